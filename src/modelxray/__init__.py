"""modelxray: put a PyTorch / Hugging Face model under analysis and record everything in MLflow."""

from modelxray.api import analyze
from modelxray.errors import ConfigError

__all__ = ["analyze", "ConfigError"]
__version__ = "0.1.0"
