"""``python -m modelxray.analyze_model --model_path M --output_dir D`` (also ``modelxray-analyze``):
the analysis of one model file or directory in the flags of common model tools, mapped onto the
Hydra config and run as ``python run.py`` runs it, so it writes the same report into ``D`` and logs
the same MLflow run. Hydra stays the interface: every flag is one override, printed before the run,
and anything after the flags (``quant=int4``, ``analyzer.performance.iters=5``) is passed as it is.

    python -m modelxray.analyze_model --model_path ./my-model --output_dir ./report
    python -m modelxray.analyze_model --model_path ./my-model --output_dir ./report \\
        --dataset wikitext2 --data_split 'test[:100]' --analyzer performance,inspect quant=int8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# the datasets whose examples come from a split (``dataset.split``, sliced as load_dataset slices it)
SPLIT_DATASETS = ("hf", "wikitext2", "c4")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="modelxray-analyze",
        description="Analyze one model (a file, a directory or a hub id) and write the report into a folder. "
        "Each flag is a modelxray config override; more overrides may follow the flags.",
        epilog="Every key: docs/config_reference.md. The same run with Hydra: python run.py model=file "
        "model.path=M hydra.run.dir=D ...",
    )
    p.add_argument("--model_path", required=True, help="a model file or directory (model=file), or a hub id (model=hf)")
    p.add_argument("--output_dir", required=True, help="where the report, plots and results are written")
    p.add_argument("--dataset", help="the dataset option (dataset=...), e.g. wikitext2, hf, text_files")
    p.add_argument(
        "--data_split",
        help=f"a split with an optional slice, e.g. validation[:100] or train[:10%%] ({', '.join(SPLIT_DATASETS)})",
    )
    p.add_argument("--analyzer", action="append", help="analyzers, comma-separated or repeated (analyzer=[...])")
    p.add_argument("--quant", help="the quantization to apply first (quant=...), e.g. int8, gptq_int4")
    p.add_argument("--device", help="cpu, cuda or auto (model.device)")
    return p


def overrides_of(args: argparse.Namespace, rest: list[str]) -> list[str]:
    """The Hydra overrides the flags stand for, then the user's own."""
    from modelxray.core.errors import ConfigError
    from modelxray.model_analyzer import model_overrides

    out = [*model_overrides(args.model_path), f"hydra.run.dir={Path(args.output_dir).expanduser().resolve()}"]
    if args.dataset:
        out.append(f"dataset={args.dataset}")
    if args.data_split:
        dataset = args.dataset or next((o.split("=", 1)[1] for o in rest if o.startswith("dataset=")), None)
        if dataset not in SPLIT_DATASETS:
            raise ConfigError(
                "--data_split",
                f"splits are read from {', '.join(f'dataset={d}' for d in SPLIT_DATASETS)}; "
                f"add --dataset with one of them (dataset={dataset or 'the default'} has no splits)",
            )
        out.append(f"dataset.split={args.data_split}")
    if args.analyzer:
        names = [n.strip() for group in args.analyzer for n in group.split(",") if n.strip()]
        out.append(f"analyzer=[{','.join(names)}]")
    if args.quant:
        out.append(f"quant={args.quant}")
    if args.device:
        out.append(f"model.device={args.device}")
    return [*out, *rest]


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, print the overrides they stand for, and run them through the command line."""
    from modelxray.cli import main as run
    from modelxray.cli import say_error
    from modelxray.core.errors import ConfigError

    args, rest = parser().parse_known_args(sys.argv[1:] if argv is None else argv)
    try:
        overrides = overrides_of(args, rest)
    except ConfigError as exc:
        say_error(exc)
        return 2
    print("modelxray: python run.py " + " ".join(overrides), flush=True)
    return run(overrides)


if __name__ == "__main__":
    sys.exit(main())
