"""Shared types with no side effects and no heavy imports: errors, config dataclass base, results,
the subject under analysis, the training loop's callback protocol, progress bars, formatting, paths and provenance. Imports nothing above it."""

from modelxray.core.errors import ConfigError

__all__ = ["ConfigError"]
