"""Named example inputs: what a ``generic`` model (any module, no labels, no tokenizer) runs on.

A user declares the tensors its ``forward`` takes, by name, as shapes (batch dimension first, an
optional ``dtype`` and, for integer inputs, ``high``) or as a file of saved tensors
(``.safetensors``, or a ``torch.save``d dict read with ``weights_only=True``). An argument that is
not a tensor (a sample rate, a flag) is a fixed ``{value: 16000}``, passed as it is with every batch. The same spec
format serves ``model.inputs`` and ``analyzer.inspect.inputs``; ``normalize_inputs`` checks it
before any model loads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")
_INPUT_KEYS = ("shape", "dtype", "high")
INPUTS_EXAMPLE = (
    "e.g. {pixel_values: [1, 3, 224, 224], input_ids: {shape: [1, 16], dtype: int64}} "
    "(a fixed non-tensor argument: sr: {value: 16000})"
)
CONSTANT_TYPES = (bool, int, float, str)  # what a fixed argument may be


def is_constant(entry: Any) -> bool:
    """A normalised entry (or a value) that is a fixed non-tensor argument, not a tensor."""
    return isinstance(entry, dict) and "value" in entry


def tensors_only(values: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors among named inputs (fixed non-tensor arguments left out)."""
    import torch

    return {n: v for n, v in values.items() if isinstance(v, torch.Tensor)}


def normalize_inputs(value: Any, key: str = "inputs") -> dict[str, dict[str, Any]]:
    """``inputs`` as name -> {shape, dtype, high}: a value is a shape (batch dimension included) or a
    mapping with ``shape`` and optional ``dtype`` (INPUT_DTYPES; default int64 for ids and masks,
    the model's floating dtype otherwise) and ``high`` (integer values are drawn below it; default
    the smallest embedding table). Raises ConfigError naming the bad entry under ``key``."""
    if not isinstance(value, dict) or not value:
        raise ConfigError(key, f"must map each forward argument to its shape, {INPUTS_EXAMPLE}; got {value!r}")
    out = {}
    for name, v in value.items():
        entry_key = f"{key}.{name}"
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(key, f"{name!r} is not an argument name, {INPUTS_EXAMPLE}")
        if isinstance(v, (list, tuple)):
            v = {"shape": v}
        if isinstance(v, dict) and "value" in v:  # a fixed non-tensor argument (a sample rate, a flag)
            if set(v) != {"value"} or not isinstance(v["value"], CONSTANT_TYPES):
                raise ConfigError(
                    f"{entry_key}.value",
                    f"a fixed argument is {{value: X}} with X a number, bool or string; got {v!r}",
                )
            out[name] = {"value": v["value"]}
            continue
        if not isinstance(v, dict) or "shape" not in v:
            raise ConfigError(
                entry_key,
                f"must be a shape such as [1, 16], a mapping with shape and dtype, or a fixed {{value: 16000}}; got {v!r}",
            )
        unknown = sorted(set(v) - set(_INPUT_KEYS))
        if unknown:
            raise ConfigError(f"{entry_key}.{unknown[0]}", f"unknown key; valid keys: {', '.join(_INPUT_KEYS)}")
        shape = v["shape"]
        if (
            not isinstance(shape, (list, tuple))
            or not shape
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
        ):
            raise ConfigError(
                f"{entry_key}.shape", f"must be a list of positive sizes, batch first, e.g. [1, 16]; got {shape!r}"
            )
        dtype = v.get("dtype")
        if dtype is not None and dtype not in INPUT_DTYPES:
            raise ConfigError(f"{entry_key}.dtype", f"must be one of {', '.join(INPUT_DTYPES)}; got {dtype!r}")
        high = v.get("high")
        if high is not None and not (isinstance(high, int) and not isinstance(high, bool) and high > 0):
            raise ConfigError(
                f"{entry_key}.high", f"must be a positive integer (values are drawn below it); got {high!r}"
            )
        out[name] = {"shape": [int(d) for d in shape], "dtype": dtype, "high": high}
    return out


def check_inputs_value(value: Any, key: str = "inputs") -> None:
    """``value`` is a spec mapping or the path of an existing tensors file; else one ConfigError line."""
    if isinstance(value, str):
        path = Path(os.path.expanduser(value))
        if not path.is_file():
            raise ConfigError(key, f"tensors file {value!r} does not exist; give a file or a mapping, {INPUTS_EXAMPLE}")
        return
    normalize_inputs(value, key)


def load_tensors(path: str, allow_unsafe_pickle: bool = False, key: str = "inputs") -> dict[str, torch.Tensor]:
    """Named tensors from a ``.safetensors`` file or a ``torch.save``d dict (``weights_only=True``
    unless the user opts in: a pickle can run code)."""
    import torch

    p = Path(os.path.expanduser(path))
    if p.suffix == ".safetensors":
        from safetensors.torch import load_file

        tensors = load_file(str(p))
    else:
        try:
            tensors = torch.load(p, map_location="cpu", weights_only=not allow_unsafe_pickle)
        except Exception as exc:  # noqa: BLE001 - unpickling errors come in many types
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            raise ConfigError(key, f"cannot read tensors from {path!r}: {first}") from None
    if isinstance(tensors, torch.Tensor):
        tensors = {"x": tensors}
    if (
        not isinstance(tensors, dict)
        or not tensors_only(tensors)
        or not all(isinstance(t, (torch.Tensor, *CONSTANT_TYPES)) for t in tensors.values())
    ):
        raise ConfigError(
            key, f"{path!r} must hold a dict of named tensors (name -> tensor, or a fixed number), {INPUTS_EXAMPLE}"
        )
    return dict(tensors)


def is_mask(name: str) -> bool:
    return "mask" in name


def is_ids(name: str) -> bool:
    return name == "ids" or name.endswith("_ids")


def make_tensors(
    spec: dict[str, dict[str, Any]], seed: int = 0, floating: torch.dtype | None = None, high: int | None = None
) -> dict[str, torch.Tensor]:
    """Seeded tensors for a normalised spec, in its order: floating inputs uniform in [0, 1) (in
    ``floating``, the model's dtype, unless the entry names one), masks all ones, booleans fair coins,
    integers uniform below the entry's ``high`` (else ``high``: the smallest embedding table); a
    fixed argument is its value."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, entry in spec.items():
        if is_constant(entry):
            out[name] = entry["value"]
            continue
        shape = tuple(entry["shape"])
        dtype_name = entry.get("dtype") or ("int64" if is_ids(name) or is_mask(name) else None)
        want = getattr(torch, dtype_name) if dtype_name else None
        if want is None or want.is_floating_point:
            x = torch.rand(shape, generator=g).to(want or floating or torch.float32)
        elif is_mask(name) and want is not torch.bool:
            x = torch.ones(shape, dtype=want)
        elif want is torch.bool:
            x = torch.randint(0, 2, shape, generator=g).bool()
        else:
            x = torch.randint(0, int(entry.get("high") or high or 2), shape, generator=g).to(want)
        out[name] = x
    return out


def spec_of_tensors(tensors: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The spec (name -> shape, dtype; a fixed argument: its value) of given inputs."""
    return {
        n: {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "high": None}
        if hasattr(t, "shape")
        else {"value": t}
        for n, t in tensors.items()
    }


def describe_values(values: dict[str, Any]) -> str:
    """One line: each tensor's name, shape and dtype, each fixed argument as name=value."""
    return ", ".join(
        f"{n} {list(t.shape)} {str(t.dtype).replace('torch.', '')}" if hasattr(t, "shape") else f"{n}={t!r}"
        for n, t in values.items()
    )


@dataclass
class ExampleInputs:
    """The tensors a generic model runs on, keyed by the names its ``forward`` is called with.

    ``tensors`` form one batch (the first dimension of each tensor); ``batch(n)`` repeats or cuts
    them to ``n`` examples, for timing at several batch sizes."""

    tensors: dict[str, Any]  # name -> tensor, or a fixed non-tensor argument (passed as it is)
    source: str  # where they came from: "config (model.inputs)", a file path...
    description: str = ""  # one line: names, shapes, dtypes and how they are passed
    name: str = "example inputs"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def n_examples(self) -> int:
        first = next(iter(tensors_only(self.tensors).values()))
        return int(first.shape[0]) if first.dim() else 1

    @property
    def spec(self) -> dict[str, dict[str, Any]]:
        return spec_of_tensors(self.tensors)

    def batch(self, n: int, device=None, floating_dtype=None) -> dict[str, torch.Tensor]:
        """``n`` examples (cycling through the given ones), floating tensors in ``floating_dtype``."""
        import torch

        out = {}
        for name, t in self.tensors.items():
            if not isinstance(t, torch.Tensor):  # a fixed argument
                out[name] = t
                continue
            x = t[torch.arange(n) % t.shape[0]] if t.dim() else t
            if floating_dtype is not None and x.is_floating_point():
                x = x.to(floating_dtype)
            out[name] = x.to(device) if device is not None else x
        return out
