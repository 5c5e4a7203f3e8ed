"""Errors a user can act on: one line that names the bad key or file and says how to fix it."""

from __future__ import annotations


class ConfigError(ValueError):
    """A bad configuration value, reported before any model loads.

    ``key`` is the dotted config key (``dataset.max_tokens``) or a file path; the message says what
    would fix it. ``str(err)`` is the one line the CLI prints.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)

    def under(self, prefix: str) -> ConfigError:
        """The same error with its key placed under a config group (``max_tokens`` -> ``dataset.max_tokens``)."""
        if not prefix or self.key.startswith(prefix + ".") or self.key == prefix:
            return self
        return type(self)(f"{prefix}.{self.key}" if self.key else prefix, self.message)


class MissingLibrary(ConfigError):
    """An optional library a chosen option runs through is not installed: the run stops, and an
    analyzer that tries many options (quant_impact's strategies) lists that one as skipped instead."""


class JobKilled(BaseException):
    """SIGTERM arrived (SLURM's scancel, a timeout, a shutdown): the run ends KILLED, not FAILED."""


class OutputError(OSError):
    """A file of the run could not be written (disk full, quota, file-size limit): the run ends FAILED
    with one line naming the file, and what was written before it is kept."""

    def __init__(self, path, exc: OSError):
        super().__init__(exc.errno, exc.strerror or str(exc), str(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"
