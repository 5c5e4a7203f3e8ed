"""Measured tables in the docs are blocks their script rewrites whole; --check says which differ from
a fresh run."""

import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
from doc_blocks import begin, end, update  # noqa: E402


def test_a_block_is_replaced_whole_and_checked(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"intro\n\n{begin('t', 's.py')}\n| old |\n{end('t')}\n\nafter\n")
    assert update(page, {"t": "| new |"}, "s.py", check=True) == ["t"]
    assert "| old |" in page.read_text()  # a check writes nothing
    assert update(page, {"t": "| new |"}, "s.py", check=False) == []
    assert page.read_text() == f"intro\n\n{begin('t', 's.py')}\n| new |\n{end('t')}\n\nafter\n"
    assert update(page, {"t": "| new |"}, "s.py", check=True) == []
    with pytest.raises(SystemExit, match="missing: expected one block"):
        update(page, {"missing": "x"}, "s.py", check=False)


def test_every_measured_block_names_a_script_that_exists():
    import re

    for doc in [REPO / "README.md", *(REPO / "docs").rglob("*.md")]:
        for script in re.findall(r"<!-- measured: .*? by scripts/(\S+)", doc.read_text()):
            assert (REPO / "scripts" / script).is_file(), f"{doc.name}: {script}"


@pytest.mark.slow  # trains the four digits defaults afresh and measures them: minutes
def test_the_trained_defaults_tables_match_a_fresh_run():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "measure_trained_defaults.py"), "--check"],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_every_timed_readme_command_is_in_the_readme():
    """scripts/time_readme.py times what the README tells a new user to run: each of its commands is
    a line of the README's first commands, so neither can change without the other."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("time_readme", REPO / "scripts" / "time_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    readme = (REPO / "README.md").read_text()
    for label, args, promise, words in module.COMMANDS:
        line = " ".join(["python run.py", *(f"'{a}'" if "[" in a else a for a in args)])
        assert line.rstrip() in readme, f"{label}: {line!r} is not in the README"
        assert promise > 0 and words
