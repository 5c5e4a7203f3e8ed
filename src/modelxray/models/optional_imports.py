"""Keep libraries a run does not use out of its start-up.

Why: transformers imports hqq's quantizer module at import time whenever hqq is installed (its KV
cache can quantize with HQQ), and hqq compiles functions with ``torch.compile`` when that module is
defined: 3-6 s of CPU before any model loads, on every run, though only ``quant=hqq_*`` uses hqq and
modelxray imports it then itself. ``without_hqq_in_transformers`` imports transformers' cache module
with hqq reported absent, so that import never happens; transformers' HQQ-quantized KV cache (which
modelxray never asks for) is all that is lost. Nothing changes when transformers was imported before.
"""

from __future__ import annotations

import sys


def without_hqq_in_transformers() -> None:
    """Import ``transformers.cache_utils`` with hqq reported absent (once per process)."""
    if "transformers.cache_utils" in sys.modules:
        return
    import transformers.utils as utils
    import transformers.utils.import_utils as import_utils

    real = import_utils.is_hqq_available

    def absent(*_args, **_kwargs) -> bool:
        return False

    utils.is_hqq_available = import_utils.is_hqq_available = absent
    try:
        import transformers.cache_utils  # noqa: F401 - imported now, without hqq
    finally:
        utils.is_hqq_available = import_utils.is_hqq_available = real
