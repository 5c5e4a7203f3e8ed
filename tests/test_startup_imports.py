"""Config classes import no heavy library: the CLI registers and validates every one of them before
any model loads, and start-up must stay well under a second."""

import json
import subprocess
import sys

HEAVY = [
    "torch",
    "transformers",
    "mlflow",
    "matplotlib",
    "seaborn",
    "scipy",
    "sklearn",
    "pandas",
    "safetensors",
    "gguf",
    "numpy",
    "tqdm",
    "peft",
    "torchao",
]

_PROBE = """
import json, sys
from modelxray.core.schema import SCHEMA, defaults_of, load_class
for group, options in SCHEMA.items():
    for path in options.values():
        defaults_of(load_class(path))
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))))
"""


def test_config_classes_import_no_heavy_library():
    code = f"HEAVY = {HEAVY!r}\n{_PROBE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_run_that_does_not_quantize_with_hqq_never_imports_it():
    """transformers imports hqq's quantizer (seconds of torch.compile) whenever hqq is installed; a
    modelxray run imports it only for quant=hqq_*."""
    import importlib.util

    if importlib.util.find_spec("hqq") is None:
        return  # nothing to keep out
    code = (
        "import sys, modelxray\n"
        "modelxray.analyze(['debug=tiny', 'model.n_layer=1', 'dataset.max_tokens=256', 'dataset.seq_len=64',"
        " 'analyzer.performance.iters=1', 'analyzer.performance.layer_timing=false',"
        " 'analyzer.performance.speed_batch_sizes=[1]', 'report.dashboard=false'], output_dir=sys.argv[1])\n"
        "print('hqq' in sys.modules)\n"
    )
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        proc = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"
