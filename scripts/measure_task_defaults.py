"""The trained task defaults measured on the weights shipped with modelxray: the detector, the
segmenter (and its encoder as a backbone), the vision-language model and the two text models, each
swept over the quantizers with the performance analyzer. Writes the measured tables of
docs/model_kinds.md (their ``<!-- measured: ... -->`` blocks), so the docs show what a fresh
evaluation of the shipped weights gives, on any machine.

    python scripts/measure_task_defaults.py             # measure, write (about 25 minutes on 2 cores)
    python scripts/measure_task_defaults.py --check     # the same; exit 1 if a table differs from the docs
    python scripts/measure_task_defaults.py --only digits_vlm

Nothing trains: the runs use an empty cache, and a run that trained (no shipped entry for its
settings) stops the script; ``python scripts/ship_trained_defaults.py`` writes the shipped weights.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from doc_blocks import update  # noqa: E402

SCRIPT = "measure_task_defaults.py"
SHIP = "python scripts/ship_trained_defaults.py"
FAST = ["tracker=none", "progress=false", "threads=2", "report.dashboard=false", "analyzer=[performance]"]
FAST += [
    "analyzer.performance.layer_timing=false",
    "analyzer.performance.iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
]
SWEEP = ["none", "int8", "int4", "int3", "int2", "gptq_int4", "awq_int4"]
LINEAR = [("int4", "linear"), ("int3", "linear"), ("gptq_int3", None)]  # (quant, targets) on the Linear layers


def _run(model_args: list[str], quant: str, cache: Path, work: Path, extra: tuple[str, ...] = ()) -> dict:
    import modelxray

    args = [*FAST, *model_args, f"model.cache_dir={cache}", f"quant={quant}", *extra]
    out = modelxray.analyze(args, output_dir=work / "_".join(a.replace("/", "-") for a in args[-4:]))
    if out.failed:
        raise SystemExit(f"{' '.join(args)}: {', '.join(out.failed)} failed")
    if cache.is_dir() and any(cache.iterdir()):  # the tables are measured on the shipped weights only
        raise SystemExit(f"{' '.join(args)}: trained instead of loading shipped weights; run {SHIP}")
    print(f"  {' '.join(model_args)} quant={quant} {' '.join(extra)}", flush=True)
    return out.metrics


def pm(m: dict, key: str, digits: int = 3) -> str:
    v, se = m.get(key), m.get(f"{key}_se")
    if v is None:
        return "-"
    return f"{v:.{digits}f}" + (f" ± {se:.{digits}f}" if se else "")


def interval(m: dict, key: str, digits: int = 2) -> str:
    return f"{m[key]:.{digits}f} ({m[f'{key}_ci_low']:.{digits}f}-{m[f'{key}_ci_high']:.{digits}f})"


def small(v: float | None) -> str:
    return "-" if v is None else (f"{v:.2g}" if v < 0.01 else f"{v:.3f}")


def _layers(m: dict, quant: str, targets: str | None) -> str:
    if quant == "none":
        return "-"
    share = m.get("quant/params_quantized_share", float("nan"))
    linear_only = targets == "linear" or quant.startswith(("gptq", "awq"))
    return f"{'Linear only' if linear_only else 'convolutions and Linear'} ({share:.0%})"


def _label(quant: str, targets: str | None) -> str:
    return f"{quant} `targets=[linear]`" if targets else quant


def _vision_sweep(model: str, cache: Path, work: Path):
    runs = [(q, None, _run([f"model={model}"], q, cache, work)) for q in SWEEP]
    for q, targets in LINEAR:
        extra = ("quant.targets=[linear]",) if targets else ()
        runs.append((q, targets, _run([f"model={model}"], q, cache, work, extra)))
    order = ["none", "int8", "int4", "int3", "int2", "int4 `targets=[linear]`", "int3 `targets=[linear]`"]
    order += ["gptq_int4", "awq_int4", "gptq_int3"]
    return sorted(runs, key=lambda r: order.index(_label(r[0], r[1])))


def detector(cache: Path, work: Path) -> str:
    rows = ["| quant | layers quantized (share of weights) | mAP@[.5:.95] | mAP@.5 | mAP@.5 against unquantized | effective bits |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for q, t, m in _vision_sweep("digits_detector", cache, work):
        bits = "32" if q == "none" else f"{m['quant/effective_bits']:.2f}"
        rows.append(f"| {_label(q, t)} | {_layers(m, q, t)} | {pm(m, 'performance/map')} | {pm(m, 'performance/map_50')} "
                    f"| {pm(m, 'performance/unquantized_map_50')} | {bits} |")  # fmt: skip
    return "\n".join(rows)


def segmenter(cache: Path, work: Path) -> str:
    rows = ["| quant | layers quantized (share of weights) | mean IoU | pixel accuracy | mean IoU against unquantized | pixels agree | effective bits |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    for q, t, m in _vision_sweep("digits_segmenter", cache, work):
        bits = "32" if q == "none" else f"{m['quant/effective_bits']:.2f}"
        agree = "-" if "performance/pixel_agree" not in m else f"{m['performance/pixel_agree']:.4f}"
        rows.append(f"| {_label(q, t)} | {_layers(m, q, t)} | {pm(m, 'performance/miou')} | {pm(m, 'performance/pixel_accuracy')} "
                    f"| {pm(m, 'performance/unquantized_miou')} | {agree} | {bits} |")  # fmt: skip
    return "\n".join(rows)


def backbone(cache: Path, work: Path) -> str:
    rows = ["| quant | k-NN accuracy | cosine drift | effective bits |", "|---|---|---|---|"]
    for q in ["none", "int8", "int4", "int3", "int2", "gptq_int4"]:
        m = _run(["model=digits_segmenter", "model.kind=image_features"], q, cache, work)
        bits = "32" if q == "none" else f"{m['quant/effective_bits']:.2f}"
        drift = "-" if q == "none" else f"{m['performance/embedding_drift']:.1e}"
        label = f"{q} ({_layers(m, q, None).replace(' (', ', ').rstrip(')')})" if q.startswith("gptq") else q
        rows.append(f"| {label} | {interval(m, 'performance/knn_accuracy')} | {drift} | {bits} |")
    return "\n".join(rows)


def quant_table(model: str, quants: list[str], columns: list[tuple], cache: Path, work: Path, extra=()) -> str:
    """One row per quantizer: ``columns`` are (head, cell of the metrics, shown for ``none`` too);
    the unquantized row shows "-" where a column compares with it, and the bits column closes it."""
    heads = ["quant", *(head for head, _, _ in columns), "effective bits"]
    rows = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for q in quants:
        m = _run([f"model={model}"], q, cache, work, extra)
        none = q == "none"
        cells = [cell(m) if always or not none else "-" for _, cell, always in columns]
        rows.append(
            f"| {q} | " + " | ".join(cells) + f" | {'32' if none else format(m['quant/effective_bits'], '.2f')} |"
        )
    return "\n".join(rows)


def _pm(key: str, digits: int = 3):
    return lambda m: pm(m, f"performance/{key}", digits)


AGREE = ("top-1 agreement", _pm("top1_agree"), False)
KL = ("KL (nats)", lambda m: small(m.get("performance/kl")), False)


def vlm(cache: Path, work: Path) -> str:
    columns = [
        ("answer perplexity", _pm("perplexity"), True),
        ("token accuracy", _pm("accuracy"), True),
        ("exact match (95% interval)", lambda m: interval(m, "performance/exact_match"), True),
        AGREE,
        KL,
        ("answers equal to unquantized", lambda m: interval(m, "performance/unquantized_exact_match"), False),
    ]
    extra = ("analyzer.performance.generate_examples=64", "analyzer.performance.max_new_tokens=3")
    return quant_table("digits_vlm", ["none", "int8", "int4", "int3", "int2"], columns, cache, work, extra)


TEXT_QUANTS = ["none", "int8", "int4", "gptq_int4", "awq_int4", "int3", "gptq_int3", "int2"]


def bart(cache: Path, work: Path) -> str:
    columns = [
        ("target perplexity", _pm("perplexity", 2), True),
        ("token accuracy", _pm("accuracy"), True),
        ("chrF", _pm("chrf", 1), True),
        ("chrF vs unquantized output", _pm("unquantized_chrf", 1), False),
        AGREE,
        KL,
    ]
    return quant_table("pydoc_bart", TEXT_QUANTS, columns, cache, work)


def bert(cache: Path, work: Path) -> str:
    columns = [
        ("masked-token perplexity", _pm("perplexity", 0), True),
        ("masked-token accuracy", _pm("accuracy"), True),
        AGREE,
        KL,
    ]
    return quant_table("pydoc_bert", TEXT_QUANTS, columns, cache, work)


TABLES = {  # block name -> (the model it trains, the function measuring it)
    "digits_detector quantized": ("digits_detector", detector),
    "digits_segmenter quantized": ("digits_segmenter", segmenter),
    "digits_segmenter backbone": ("digits_segmenter", backbone),
    "digits_vlm quantized": ("digits_vlm", vlm),
    "pydoc_bart quantized": ("pydoc_bart", bart),
    "pydoc_bert quantized": ("pydoc_bert", bert),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="measure, write nothing; exit 1 when a table differs")
    ap.add_argument("--only", nargs="*", default=None, help="models to measure (default: all)")
    args = ap.parse_args()
    import torch

    print(f"torch {torch.__version__}, CPU {torch.backends.cpu.get_cpu_capability()}", flush=True)
    blocks = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache, work = Path(tmp) / "cache", Path(tmp) / "runs"
        for name, (model, measure) in TABLES.items():
            if args.only is None or model in args.only:
                blocks[name] = measure(cache, work)
    stale = update(ROOT / "docs" / "model_kinds.md", blocks, SCRIPT, args.check)
    if args.check and stale:
        print(
            f"differ from a fresh evaluation of the shipped weights: {', '.join(stale)}; rerun python scripts/{SCRIPT}"
        )
        raise SystemExit(1)
    print(
        "the measured tables match a fresh evaluation of the shipped weights"
        if args.check
        else f"wrote docs/model_kinds.md: {', '.join(blocks)}"
    )


if __name__ == "__main__":
    main()
