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
SKIP_GROUPS = {"analyzer"}  # added once the analyzers' configs are split from their work

_PROBE = """
import json, sys
from modelxray.core.schema import SCHEMA, defaults_of, load_class
for group, options in SCHEMA.items():
    if group not in SKIP:
        for path in options.values():
            defaults_of(load_class(path))
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))))
"""


def test_config_classes_import_no_heavy_library():
    code = f"SKIP = {sorted(SKIP_GROUPS)!r}\nHEAVY = {HEAVY!r}\n{_PROBE}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
