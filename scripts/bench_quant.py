"""Benchmark: a sweep of N quantization configs in one process vs N separate runs.

    python scripts/bench_quant.py                                  # embedded default, 4 configs
    python scripts/bench_quant.py --model tiny_gpt2 --configs int8,int4,int3,int2,mixed_attn8_mlp4

Both ways run the same jobs (``run.py quant=<c> analyzer=performance``, small evaluation, no
tracking): N processes, each importing everything and loading the model, against one Hydra
multirun process that loads the model once and quantizes an in-memory copy per job. Prints both
wall times, the ratio, and how many model loads the sweep did (from the runs' cache tags).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--configs", default="int8,int4,int3,int2")
    ap.add_argument("--max-tokens", type=int, default=1024)
    args = ap.parse_args()
    configs = args.configs.split(",")
    common = [
        f"model={args.model}",
        f"dataset.max_tokens={args.max_tokens}",
        "analyzer=performance",
        "analyzer.performance.speed_batch_sizes=[1]",
        "analyzer.performance.iters=2",
        "analyzer.performance.layer_timing=false",
        "progress=false",
        "report.dashboard=false",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{tmp}/mlflow.db"
        start = time.perf_counter()
        for c in configs:
            subprocess.run(
                [
                    sys.executable,
                    str(REPO / "run.py"),
                    f"quant={c}",
                    *common,
                    f"tracker.uri={db}",
                    "tracker.experiment=separate",
                ],
                cwd=tmp,
                env=env,
                check=True,
                capture_output=True,
            )
        separate = time.perf_counter() - start
        start = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                str(REPO / "run.py"),
                "-m",
                f"quant={','.join(configs)}",
                *common,
                f"tracker.uri={db}",
                "tracker.experiment=sweep",
            ],
            cwd=tmp,
            env=env,
            check=True,
            capture_output=True,
        )
        sweep = time.perf_counter() - start
        loads = _cache_tags(db)
    print(f"{len(configs)} configs ({', '.join(configs)}) on {args.model}, {args.max_tokens} tokens each")
    print(f"  {len(configs)} separate runs:       {separate:7.1f} s")
    print(
        f"  one multirun process:   {sweep:7.1f} s   (model loads: {loads.count('miss')}, cache hits: {loads.count('hit')})"
    )
    print(f"  ratio separate / sweep: {separate / sweep:7.2f}x")


def _cache_tags(db: str) -> list[str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=db)
    exp = client.get_experiment_by_name("sweep")
    return [r.data.tags.get("modelxray.model_cache", "?") for r in client.search_runs([exp.experiment_id])]


if __name__ == "__main__":
    main()
