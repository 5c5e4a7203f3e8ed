"""Experiment tracking. ``mlflow_tracker`` is the only module that imports mlflow."""

from modelxray.tracking.base import NullTracker, TrackerRun

__all__ = ["NullTracker", "TrackerRun"]
