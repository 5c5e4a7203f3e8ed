"""One compressibility score in [0, 1] per tensor, per layer and per model: the share of the bytes
held now that pruning and low-bit quantization could remove, each discounted by what it costs.

Per weight matrix, with ``p`` its ``prune_potential`` (share of weights magnitude pruning zeroes for
at most 1% of the tensor's energy; 0 for a layer whose units are the model's outputs), ``s`` its
``quant_sensitivity`` (relative error of ``b``-bit round-to-nearest, capped at 1) and ``B`` the bits
per element it is held in now (its bytes x 8 / elements)::

    q = max(0, 1 - b / B)                # share of its bytes b-bit storage saves
    c = 1 - (1 - p) * (1 - q * (1 - s))  # prune first, then quantize what is left

A tensor that is no weight matrix (a bias, a norm, a small table) keeps its bytes: ``c = 0``.
A layer's and the model's score are the bytes saved over the bytes held: ``sum(c * bytes) /
sum(bytes)``, so large layers weigh by their size and the parts add up to the whole.
Pure functions: rows of numbers in, numbers out."""

from __future__ import annotations


def tensor_score(prune_potential: float, quant_sensitivity: float, bits_now: float, bits: int) -> float:
    """``c`` of the module docstring for one weight matrix, in [0, 1]."""
    p = min(max(prune_potential, 0.0), 1.0)
    s = min(max(quant_sensitivity, 0.0), 1.0)
    q = max(0.0, 1.0 - bits / bits_now) if bits_now > 0 else 0.0
    return 1.0 - (1.0 - p) * (1.0 - q * (1.0 - s))


def layer_of(name: str) -> str:
    """The module a tensor belongs to: its name without the last part (``h.0.attn.c_attn``)."""
    return name.rpartition(".")[0] or name


def scored_rows(rows: list[dict], bits: int, matrices: set[str], not_prunable: set[str]) -> list[dict]:
    """Each tensor's ``compressibility`` and ``bytes_saved``: ``matrices`` names the weight matrices
    the score applies to, ``not_prunable`` those whose units are the model's outputs (p = 0)."""
    out = []
    for r in rows:
        matrix = r["name"] in matrices and r.get("quant_sensitivity") is not None and bool(r.get("numel"))
        p = 0.0 if r["name"] in not_prunable else float(r.get("prune_potential") or 0.0)
        score = tensor_score(p, float(r["quant_sensitivity"]), 8.0 * r["bytes"] / r["numel"], bits) if matrix else 0.0
        out.append(
            {
                "name": r["name"],
                "bytes": r["bytes"],
                "matrix": matrix,
                "prune_potential": p if matrix else None,
                "quant_sensitivity": float(r["quant_sensitivity"]) if matrix else None,
                "compressibility": score,
                "bytes_saved": score * r["bytes"],
            }
        )
    return out


def by_layer(scored: list[dict]) -> list[dict]:
    """One row per layer, most bytes saved first: bytes held and saved, its score, and the size-weighted
    prune potential and quantization sensitivity of its weight matrices (None without one)."""
    groups: dict[str, list[dict]] = {}
    for t in scored:
        groups.setdefault(layer_of(t["name"]), []).append(t)
    out = []
    for layer, ts in groups.items():
        held = sum(t["bytes"] for t in ts)
        saved = sum(t["bytes_saved"] for t in ts)
        mats = [t for t in ts if t["matrix"]]
        w = sum(t["bytes"] for t in mats)
        out.append(
            {
                "layer": layer,
                "bytes": held,
                "bytes_saved": saved,
                "compressibility": saved / held if held else 0.0,
                "prune_potential": sum(t["prune_potential"] * t["bytes"] for t in mats) / w if w else None,
                "quant_sensitivity": sum(t["quant_sensitivity"] * t["bytes"] for t in mats) / w if w else None,
            }
        )
    return sorted(out, key=lambda r: (-r["bytes_saved"], r["layer"]))


def model_score(scored: list[dict]) -> float:
    """The model's score: bytes saved over bytes held, all tensors counted."""
    held = sum(t["bytes"] for t in scored)
    return sum(t["bytes_saved"] for t in scored) / held if held else 0.0
