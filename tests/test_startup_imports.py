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
