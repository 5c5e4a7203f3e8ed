"""Quantization configs (``conf/quant/``): each is a Quantizer whose ``apply`` returns a new subject."""

from modelxray.quant.base import Quantizer

__all__ = ["Quantizer"]
