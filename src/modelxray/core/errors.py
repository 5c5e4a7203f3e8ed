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
    analyzer that tries many options (quant_impact's strategies) lists that one as skipped instead.
    ``extra`` names the project's extra that installs it (``pip install "modelxray[extra]"``), so a
    caller can tell "not installed here" from a wrong config."""

    def __init__(self, key: str, message: str, extra: str = ""):
        self.extra = extra
        super().__init__(key, message)

    def under(self, prefix: str) -> ConfigError:
        moved = super().under(prefix)
        moved.extra = self.extra
        return moved


def require_library(key: str, what: str, module: str, pip: str, extra: str = "") -> None:
    """Raise :class:`MissingLibrary` naming ``module``, its pip command and the project's ``extra``
    that holds it (none for a dependency of the project itself) unless ``module`` can be imported
    (found without importing it, so the check stays light)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package of a dotted module is missing
        found = False
    if not found and not extra:  # a dependency of the project itself: a broken environment
        raise ConfigError(key, f"{what} needs the {module!r} package: pip install {pip}")
    if not found:
        raise MissingLibrary(
            key, f"{what} needs the {module!r} package: pip install {pip} (extra modelxray[{extra}])", extra
        )


class JobKilled(BaseException):
    """SIGTERM arrived (SLURM's scancel, a timeout, a shutdown): the run ends KILLED, not FAILED."""


class OutputError(OSError):
    """A file of the run could not be written (disk full, quota, file-size limit): the run ends FAILED
    with one line naming the file, and what was written before it is kept."""

    def __init__(self, path, exc: OSError):
        super().__init__(exc.errno, exc.strerror or str(exc), str(path))

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"
