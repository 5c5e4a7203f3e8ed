"""Datasets (``conf/dataset/``) and evaluation windows."""

from modelxray.data.base import TextDataset, TokenData

__all__ = ["TextDataset", "TokenData"]
