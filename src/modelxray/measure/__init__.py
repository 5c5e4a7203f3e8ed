"""Measurements that run code and watch it (timers, hooks, process memory); results are plain numbers."""
