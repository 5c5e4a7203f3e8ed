"""The offline vision defaults measured on the weights shipped with modelxray: each digits model's
shipped weights (their digest) and test accuracy, then one ``quant_impact`` run per model and one
``robustness`` run of the CLIP-style model. Writes the measured tables of docs/model_kinds.md and
docs/quantization.md (their ``<!-- measured: ... -->`` blocks), so the docs show what a fresh
evaluation of the shipped weights gives, on any machine.

    python scripts/measure_trained_defaults.py           # measure and write the tables (about 3 minutes)
    python scripts/measure_trained_defaults.py --check   # measure; exit 1 if a table differs from the docs

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

SCRIPT = "measure_trained_defaults.py"
SHIP = "python scripts/ship_trained_defaults.py"
FAST = ["tracker=none", "progress=false", "threads=1", "report.dashboard=false"]
MODELS = [  # (label in the docs, overrides)
    ("`digits_mlp`", ["model=digits_mlp"]),
    ("`digits_mlp model.arch=cnn`", ["model=digits_mlp", "model.arch=cnn"]),
    ("`digits_vit`", ["model=digits_vit"]),
    ("`digits_clip` (zero-shot)", ["model=digits_clip"]),
]
STRATEGIES = ["none", "int8", "int4", "gptq_int4", "awq_int4"]
BITWIDTH = ["analyzer.bitwidth.eval_examples=450", "analyzer.bitwidth.sensitivity_examples=450"]


def _analyze(args: list[str], out: Path):
    import modelxray

    result = modelxray.analyze([*FAST, *args], output_dir=out)
    if result.failed:
        raise SystemExit(f"{' '.join(args)}: {', '.join(result.failed)} failed; see {out}/errors")
    trained_here(args)
    return result


def trained_here(args: list[str]) -> None:
    """Stop when a run trained its model (its ``model.cache_dir``, empty before, holds weights):
    the tables are measured on the shipped weights only."""
    cache = next((Path(a.split("=", 1)[1]) for a in args if a.startswith("model.cache_dir=")), None)
    if cache is not None and cache.is_dir() and any(cache.iterdir()):
        raise SystemExit(f"{' '.join(args)}: trained instead of loading shipped weights; run {SHIP}")


def shipped(args: list[str]) -> dict:
    """The manifest entry of the weights shipped for the model ``args`` choose."""
    from modelxray.api import compose
    from modelxray.config.components import build_components
    from modelxray.models.trained_cache import read_manifest

    key = build_components(compose(args), skip_dataset=True).model.trained_key()
    entry = read_manifest().get(key.shipped_name)
    if entry is None:
        raise SystemExit(f"{' '.join(args)}: no weights shipped for these settings; run {SHIP}")
    return entry


def _interval(m: dict, key: str) -> str:
    return f"{m[key]:.3f} ({m[f'{key}_ci_low']:.3f}-{m[f'{key}_ci_high']:.3f})"


def trained(cache: Path, work: Path) -> str:
    rows = [
        "| model | test accuracy (95% Wilson interval, 450 test digits) | weights (sha256, first 16) |",
        "|---|---|---|",
    ]
    for label, args in MODELS:
        out = _analyze([*args, f"model.cache_dir={cache}", "analyzer=[performance]", "analyzer.performance.iters=1",
                        "analyzer.performance.layer_timing=false", "analyzer.performance.speed_batch_sizes=[1]"],
                       work / label.strip("`").split()[0])  # fmt: skip
        entry = shipped(args)
        (digest,) = entry["files"].values()
        rows.append(f"| {label} | {_interval(out.metrics, 'performance/accuracy')} | `{digest[:16]}` |")
        print(f"  {label}: {rows[-1]}", flush=True)
    p = entry["platform"]
    return "\n".join(rows) + (
        f"\n\nThe weights shipped with modelxray, trained by `{SHIP}` with torch {p['torch']}, {p['cpu']} CPU."
    )


def strategies(cache: Path, work: Path) -> dict[str, list[dict]]:
    out = {}
    for label, args in MODELS[2:]:
        run = _analyze([*args, f"model.cache_dir={cache}", "analyzer=[quant_impact]",
                        f"analyzer.quant_impact.strategies=[{','.join(STRATEGIES)}]",
                        "analyzer.quant_impact.eval_examples=450", "analyzer.quant_impact.iters=1",
                        "analyzer.quant_impact.warmup=0"], work / f"qi_{args[0]}")  # fmt: skip
        out[label] = run.results["quant_impact"].tables["strategies"]
        print(f"  {label}: quant_impact done", flush=True)
    return out


def _agree(r: dict) -> tuple[str, str]:
    if r["strategy"] == "none":
        return "1", "0"
    return f"{r['top1_agree']:.3f}", f"{r['kl']:.2g}"


def strategy_table(by_model: dict[str, list[dict]], models: list[str], names: list[str]) -> str:
    from modelxray.core.formatting import human_bytes

    head = "| model | quant | accuracy (95% Wilson interval) | top-1 agreement | KL (nats) | effective bits | weights |"
    rows = [head, "|---|---|---|---|---|---|---|"]
    for label in models:
        for r in by_model[label]:
            if r["strategy"] not in names:
                continue
            agree, kl = _agree(r)
            acc = f"{r['accuracy']:.3f} ({r['accuracy_ci_low']:.3f}-{r['accuracy_ci_high']:.3f})"
            bits = f"{r['effective_bits']:.2f}" if r["strategy"] != "none" else "32"
            rows.append(
                f"| {label} | {r['strategy']} | {acc} | {agree} | {kl} | {bits} | {human_bytes(r['weight_bytes'])} |"
            )
    return "\n".join(rows)


def robustness(cache: Path, work: Path) -> str:
    run = _analyze(["model=digits_clip", f"model.cache_dir={cache}", "analyzer=[robustness]"], work / "robust")
    result = run.results["robustness"]
    table = result.source.summary_tables(result)
    (name, rows), *_ = table.items()
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def bitwidth(cache: Path, work: Path, args: list[str], name: str) -> tuple[str, str]:
    """The configurations table and the most sensitive units of one bitwidth run."""
    run = _analyze([*args, f"model.cache_dir={cache}", "analyzer=[bitwidth]", *BITWIDTH], work / name)
    result = run.results["bitwidth"]
    m = result.metrics
    head = "| configuration | effective bits | accuracy [95% interval] | KL | top-1 agreement | Pareto |"
    rows = [head, "|---|---|---|---|---|---|"]
    acc = f"{m['reference_accuracy']:.3f} [{m['reference_accuracy_ci_low']:.3f}, {m['reference_accuracy_ci_high']:.3f}]"
    rows.append(f"| unquantized | 32 | {acc} | 0 | 1 | |")
    for r in result.tables["configurations"]:
        acc = f"{r['accuracy']:.3f} [{r['accuracy_ci_low']:.3f}, {r['accuracy_ci_high']:.3f}]"
        pareto = "yes" if r.get("pareto") else ""
        rows.append(
            f"| {r['config']} | {r['effective_bits']:.2f} | {acc} | {r['kl']:.2g} | {r['top1_agree']:.3f} | {pareto} |"
        )
    rec = result.data["recommendation"]
    rows += ["", f"Recommended: {rec['source']} plan, {rec['effective_bits']:.2f} effective bits, accuracy "
                 f"{rec['accuracy']:.3f}, top-1 agreement {rec['top1_agree']:.3f}."]  # fmt: skip
    sens = sorted(result.tables["layer_sensitivity"], key=lambda r: -r["kl"])[:4]
    unit = next(k for k in ("unit", "label", "name", "block") if k in sens[0])
    lines = ["| unit (at 3 bits, the rest unquantized) | KL | top-1 agreement | accuracy change |", "|---|---|---|---|"]
    lines += [f"| `{r[unit]}` | {r['kl']:.2g} | {r['top1_agree']:.3f} | {-r['accuracy_drop']:+.3f} |" for r in sens]
    print(f"  {name}: bitwidth done", flush=True)
    return "\n".join(rows), "\n".join(lines)


# each robustness family's levels key; a table sets its own families' levels and leaves the others off
LEVEL_KEYS = {
    "fgsm": "fgsm_eps",
    "pgd": "pgd_eps",
    "weight_noise": "weight_noise_levels",
    "quant_noise": "quant_noise_bits",
    "feature_dropout": "dropout_rates",
    "feature_substitution": "substitution_rates",
    "gaussian_noise": "gaussian_noise_sigmas",
    "blur": "blur_sigmas",
    "occlusion": "occlusion_sides",
}
CORRUPTIONS = {  # family -> (levels, the table's column head)
    "gaussian_noise": ([0.05, 0.1, 0.2, 0.3, 0.5], "noise sigma 0.05 / 0.1 / 0.2 / 0.3 / 0.5"),
    "blur": ([0.5, 1, 1.5, 2, 3], "blur sigma 0.5 / 1 / 1.5 / 2 / 3 px"),
    "occlusion": ([0.25, 0.5, 0.75, 1.0], "occlusion 0.25 / 0.5 / 0.75 / 1.0 (grey)"),
}
ATTACKS = {
    "fgsm": ([0.01, 0.03, 0.1, 0.2], "FGSM 0.01 / 0.03 / 0.1 / 0.2"),
    "pgd": ([0.1, 0.2], "PGD-10 0.1 / 0.2"),
    "weight_noise": ([0.3, 1.0], "weight noise 0.3 / 1.0"),
    "quant_noise": ([3, 2], "quant noise 3 / 2 bits"),
    "feature_dropout": ([0.1, 0.2], "dropout 0.1 / 0.2"),
    "feature_substitution": ([0.1, 0.2], "substitution 0.1 / 0.2"),
}


def robustness_levels(cache: Path, work: Path, families: dict, name: str, extra: tuple[str, ...] = ()) -> str:
    """Accuracy of the two small digits classifiers at each level of ``families`` (the others off)."""
    rows = ["| model (clean accuracy) | " + " | ".join(head for _, head in families.values()) + " |",
            "|---|" + "---|" * len(families)]  # fmt: skip
    levels = [
        f"analyzer.robustness.{key}=[{','.join(str(x) for x in families[f][0])}]" if f in families
        else f"analyzer.robustness.{key}=[]"
        for f, key in LEVEL_KEYS.items()
    ]  # fmt: skip
    for label, args in (("MLP 64", ["model=digits_mlp"]), ("CNN 8-16", ["model=digits_mlp", "model.arch=cnn"])):
        run = _analyze([*args, f"model.cache_dir={cache}", "analyzer=[robustness]", *levels, *extra],
                       work / f"{name}_{label.split()[0]}")  # fmt: skip
        result = run.results["robustness"]
        cells = []
        for family, (at, _) in families.items():
            acc = {float(r["level"]): r["accuracy"] for r in result.tables["robustness"] if r["family"] == family}
            cells.append(" / ".join(f"{acc[float(x)]:.3f}" for x in at))
        rows.append(f"| {label} ({result.metrics['clean_accuracy']:.3f}) | " + " | ".join(cells) + " |")
    print(f"  {name} done", flush=True)
    return "\n".join(rows)


def _cell(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="measure, write nothing; exit 1 when a table differs")
    args = ap.parse_args()
    import torch

    print(f"torch {torch.__version__}, CPU {torch.backends.cpu.get_cpu_capability()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        cache, work = Path(tmp) / "cache", Path(tmp) / "runs"
        blocks_kinds = {"trained digits defaults": trained(cache, work)}
        by_model = strategies(cache, work)
        models = [m for m, _ in MODELS[2:]]
        blocks_kinds["digits quantized"] = strategy_table(by_model, models, ["none", "int8", "int4"])
        blocks_kinds["digits_clip strategies"] = strategy_table(by_model, models[1:], STRATEGIES)
        blocks_kinds["digits_clip robustness"] = robustness(cache, work)
        mlp_table, _ = bitwidth(cache, work, ["model=digits_mlp"], "bits_mlp")
        clip_table, clip_units = bitwidth(cache, work, ["model=digits_clip"], "bits_clip")
        blocks_bits = {"bitwidth digits_mlp": mlp_table, "bitwidth digits_clip": clip_table}
        blocks_robust = {
            "digits image corruptions": robustness_levels(cache, work, CORRUPTIONS, "corruptions"),
            "digits attacks": robustness_levels(cache, work, ATTACKS, "attacks", ("analyzer.robustness.pgd_steps=10",)),
        }
        blocks_bits["bitwidth digits_clip units"] = clip_units
        blocks_quant = {
            "digits calibrated": strategy_table(by_model, models, ["none", "int4", "gptq_int4", "awq_int4"])
        }
    stale = update(ROOT / "docs" / "model_kinds.md", blocks_kinds, SCRIPT, args.check)
    stale += update(ROOT / "docs" / "quantization.md", blocks_quant, SCRIPT, args.check)
    stale += update(ROOT / "docs" / "analyzers" / "bitwidth.md", blocks_bits, SCRIPT, args.check)
    stale += update(ROOT / "docs" / "analyzers" / "robustness.md", blocks_robust, SCRIPT, args.check)
    if args.check and stale:
        print(
            f"differ from a fresh evaluation of the shipped weights: {', '.join(stale)}; rerun python scripts/{SCRIPT}"
        )
        raise SystemExit(1)
    print(
        "the docs' measured tables match a fresh evaluation of the shipped weights"
        if args.check
        else "wrote docs/model_kinds.md, docs/quantization.md, docs/analyzers/bitwidth.md, robustness.md"
    )


if __name__ == "__main__":
    main()
