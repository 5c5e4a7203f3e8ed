"""scripts/run_examples.py: an example is stopped for its time only when --timeout asks for it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, load_script


@pytest.fixture(scope="module")
def run_examples():
    return load_script("run_examples")


def test_no_time_limit_unless_one_is_given(run_examples, tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text("import time\ntime.sleep(2)\nprint('done')\n")
    ok, _, tail = run_examples.run(slow)  # no limit by default
    assert ok and "done" in tail
    ok, _, tail = run_examples.run(slow, timeout_s=0.5)
    assert not ok and tail == "did not finish in 0.5 s (--timeout)"


def test_the_limit_is_an_option_documented_in_help():
    script = str(REPO / "scripts" / "run_examples.py")
    proc = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--timeout SECONDS" in proc.stdout and "default: no limit" in " ".join(proc.stdout.split())
    proc = subprocess.run([sys.executable, script, "--timeout", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--timeout: 0: give a number of seconds above 0" in proc.stderr
