"""Datasets (``conf/dataset/``): the token streams and classification splits that runs evaluate."""

from modelxray.data.base import TextDataset, TokenData

__all__ = ["TextDataset", "TokenData"]
