"""The token windows a language model is scored on: shared by the performance analyzer and by the
capture of a reference model's outputs, so both see the same tokens."""

from __future__ import annotations

from modelxray.analyzers.performance.config import prefix_token_id
from modelxray.core.errors import ConfigError
from modelxray.metrics.windows import make_windows, windows_from_batches


def lm_windows(cfg, subject):
    """The windows a language model is scored on (``cfg``: the performance analyzer's settings), as
    ``(windows, description, data)``: the user's batches, else the dataset's tokens cut by the
    configured protocol. A reference model's outputs are captured on the same windows."""
    if subject.batches is not None:
        return windows_from_batches(subject.batches), "user batches (disjoint)", None
    data = subject.data
    if cfg.stride is not None and cfg.stride > data.seq_len:
        raise ConfigError("analyzer.performance.stride", f"must not exceed dataset.seq_len ({data.seq_len})")
    which = cfg.prefix_token
    if cfg.protocol == "lm_eval_rolling" and which == "none":
        which = "bos"  # the harness always scores the first token after a prefix token
    prefix = prefix_token_id(subject.tokenizer, which)
    windows = make_windows(data.ids, data.seq_len, cfg.protocol, cfg.stride, prefix)
    stride = cfg.stride or data.seq_len
    desc = {
        "disjoint": f"disjoint windows of {data.seq_len}",
        "sliding": f"sliding windows of {data.seq_len}, stride {stride}",
        "lm_eval_rolling": f"lm-eval loglikelihood_rolling, windows of {data.seq_len}",
    }[cfg.protocol]
    if prefix is not None:
        desc += f", prefix token {prefix}"
    return windows, desc, data
