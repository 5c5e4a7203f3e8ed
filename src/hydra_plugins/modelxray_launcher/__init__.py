"""modelxray's Hydra launchers (see launcher.py)."""
