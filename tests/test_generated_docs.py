"""The config reference and the README's table of options are generated from the code and conf/,
and CI fails when either is stale."""

import subprocess
import sys
from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    return load_script("gen_config_reference")


def test_the_generated_files_are_current():
    done = subprocess.run(
        [sys.executable, "scripts/gen_config_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_options_cell_follows_the_files_in_conf():
    gen = _generator()
    row = "| `quant` | `int8`, `int4`, `gone_option` | notes stay |"
    out = gen.readme_options(f"intro\n{row}\n")
    cell = out.splitlines()[1].split(" | ")[1]
    assert cell.startswith("`none` (default), `int8`, `int4`, ")  # the default first, the written order kept
    assert "`gone_option`" not in cell and "`gptq_int4`" in cell  # dropped and appended
    assert out.splitlines()[1].endswith("| notes stay |")
    assert "`performance` (default)" in gen.readme_options("| `analyzer` | x | y |")
