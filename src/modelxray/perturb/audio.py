"""Common corruptions of speech, as pure functions of one mono waveform (a 1-D torch tensor or numpy
array, returned as the same type in float32): white noise at an exact signal-to-noise ratio, a time
shift and a change of speed. Speech-recognition robustness sweeps one of them over a level."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import torch

Waveform = Any  # torch.Tensor or np.ndarray, 1-D


def _as_numpy(audio: Waveform) -> np.ndarray:
    if isinstance(audio, torch.Tensor):
        arr = audio.detach().to("cpu", torch.float64).numpy()
    else:
        arr = np.asarray(audio, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"expected a mono 1-D waveform, got shape {tuple(arr.shape)}")
    return arr


def _like(result: np.ndarray, audio: Waveform) -> Waveform:
    """``result`` as float32 of the type (and device) of ``audio``."""
    out = np.ascontiguousarray(result, dtype=np.float32)
    if isinstance(audio, torch.Tensor):
        return torch.from_numpy(out).to(audio.device)
    return out


def _standard_normal(n: int, generator: Any) -> np.ndarray:
    """n draws of N(0, 1) from a torch generator (CPU), a numpy generator or a seed."""
    if isinstance(generator, torch.Generator):
        return torch.randn(n, generator=generator, dtype=torch.float64, device=generator.device).cpu().numpy()
    rng = generator if isinstance(generator, np.random.Generator) else np.random.default_rng(generator)
    return rng.standard_normal(n)


def add_noise_at_snr(audio: Waveform, snr_db: float, generator: Any) -> Waveform:
    """``audio`` + white Gaussian noise, rescaled so that 10 log10(P_signal / P_noise) is exactly
    ``snr_db`` for the noise drawn (not only in expectation), so levels compare across clips.
    ``generator``: a ``torch.Generator``, a ``numpy.random.Generator`` or an int seed. A silent
    clip (no signal power) and ``snr_db = inf`` return the clip unchanged."""
    x = _as_numpy(audio)
    p_signal = float(np.mean(x**2)) if x.size else 0.0
    if p_signal == 0.0 or (math.isinf(snr_db) and snr_db > 0):
        return _like(x, audio)
    noise = _standard_normal(x.size, generator)
    p_drawn = float(np.mean(noise**2))
    p_noise = p_signal / 10.0 ** (snr_db / 10.0)
    return _like(x + noise * math.sqrt(p_noise / p_drawn), audio)


def time_shift(audio: Waveform, seconds: float, sample_rate: int) -> Waveform:
    """The clip delayed by ``seconds`` (zeros in front, the end cut), or advanced when negative
    (start cut, zeros at the end); the length stays, so the model sees the same input size."""
    x = _as_numpy(audio)
    n = x.size
    shift = int(round(seconds * sample_rate))
    out = np.zeros_like(x)
    if shift >= 0:
        if shift < n:
            out[shift:] = x[: n - shift]
    elif -shift < n:
        out[: n + shift] = x[-shift:]
    return _like(out, audio)


def change_speed(audio: Waveform, factor: float) -> Waveform:
    """The clip played ``factor`` times as fast (1.1: 10% faster, about n / 1.1 samples; pitch
    moves with it, like a tape). Polyphase resampling by the ratio ``factor`` rounded to a fraction
    with denominator at most 100."""
    from scipy.signal import resample_poly

    if not factor > 0:
        raise ValueError(f"speed factor must be positive, got {factor!r}")
    x = _as_numpy(audio)
    ratio = Fraction(factor).limit_denominator(100)
    if ratio == 0:
        raise ValueError(f"speed factor {factor!r} is too small (below 1/100)")
    if ratio == 1:
        return _like(x, audio)
    return _like(resample_poly(x, ratio.denominator, ratio.numerator), audio)
