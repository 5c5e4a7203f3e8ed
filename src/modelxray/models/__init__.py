"""Model sources: each config in ``conf/model/`` names one of these classes."""

from modelxray.models.base import LoadedModel, ModelInfo, ModelSource
from modelxray.models.process_cache import load_model

__all__ = ["LoadedModel", "ModelInfo", "ModelSource", "load_model"]
