"""Every quantization strategy, modelxray's own and the field's, on one model from one
``quant_impact`` run: the table "Every strategy side by side" of docs/quantization.md.

    python scripts/measure_strategies.py                      # the embedded default, all strategies
    python scripts/measure_strategies.py --strategies none int8 int4 gguf_q4_k_m

Strategies whose library is not installed (llama-cpp-python, optimum-quanto, hqq, bitsandbytes,
compressed-tensors, torchao) are
listed as skipped with their install line. Every change and agreement is against ``none``, the
model as loaded, paired by window.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = [
    "none",
    "int8", "int8_torchao", "quanto_int8", "bnb_int8", "ct_w8a8", "gguf_q8_0",
    "gguf_q6_k", "gguf_q5_k_m",
    "int4", "gptq_int4", "awq_int4", "quanto_int4", "hqq_int4", "bnb_nf4", "ct_w4a16_g64", "gguf_q4_k_m", "gguf_iq4_xs",
    "gguf_q3_k_m",
]  # fmt: skip


def row(r: dict) -> str:
    ppl_se = r["perplexity"] * r["loss_se"]
    if r["strategy"] == "none":
        change = kl = agree = ""
    else:
        change = f"{r['delta_loss']:+.4f} ± {r['delta_loss_se']:.4f}"
        kl = f"{r['kl']:.4f} ({r['kl_p99']:.3f})"
        agree = f"{r['top1_agree']:.3f} ± {r['top1_agree_se']:.3f}"
    return (
        f"| `{r['strategy']}` | {r['effective_bits']:.2f} | {r['weight_bytes'] / 2**20:.1f} | "
        f"{r['perplexity']:.2f} ± {ppl_se:.2f} | {change} | {kl} | {agree} | {r['tokens_per_s']:.0f} | {r['speed_measured']} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategies", nargs="+", default=STRATEGIES)
    ap.add_argument("overrides", nargs="*", help="more run.py overrides (model=..., dataset=...)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable, str(ROOT / "run.py"), "analyzer=quant_impact",
            f"analyzer.quant_impact.strategies=[{','.join(args.strategies)}]",
            "tracker=none", f"hydra.run.dir={tmp}", *args.overrides,
        ]  # fmt: skip
        subprocess.run(cmd, check=True)
        result = json.loads((Path(tmp) / "results" / "quant_impact.json").read_text())
    rows = result["tables"]["strategies"]
    print(
        "| strategy | effective bits | weights (MiB) | perplexity | loss change | KL (p99) | top-1 agreement | tokens/s | speed |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not math.isnan(r.get("perplexity", float("nan"))):
            print(row(r))
    for skipped in result["tables"].get("unsupported", []):
        print(f"\nskipped `{skipped['strategy']}`: {skipped['reason']}")


if __name__ == "__main__":
    main()
