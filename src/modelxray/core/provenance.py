"""Run tags: where a run came from (git commit, package versions, host, Hydra job)."""

from __future__ import annotations

import platform
import socket
import subprocess
from importlib import metadata

_PACKAGES = ("modelxray", "torch", "transformers", "hydra-core", "mlflow", "numpy")


def git_commit(cwd: str | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str]:
    out = {}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    out["python"] = platform.python_version()
    return out


def host() -> str:
    return socket.gethostname()
