"""Every ``python run.py`` command written in the README and docs composes and passes the config
check (every component built, every key and value validated), so the documentation cannot drift from
the product. Commands that name the reader's own files, placeholders (``<run id>``, ``...``) and the
documented examples of a bad input are left out of the check by what they are, not by a list. A
command that runs through an optional extra which is not installed here (``quant=gguf_q4_k_m``
without llama-cpp-python) is composed, then skipped with the extra's name, as the docs say it needs
that extra: a machine set up only by the README passes."""

import importlib.util
import re
import shlex
import sys

import pytest

from conftest import REPO
from modelxray.api import compose
from modelxray.config.components import build_components
from modelxray.core.errors import ConfigError, MissingLibrary

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# errors that mean "the reader's own file or model is not here", not that the command is wrong
READERS_OWN = ("does not exist", "not in the local Hugging Face cache", "no such file", "no file matches")


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every ``python run.py`` line in a code block and every inline one."""
    found = []
    for page in PAGES:
        text = page.read_text().replace("\\\n", " ")
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            found += [
                (page.name, line.strip()) for line in block.splitlines() if line.strip().startswith("python run.py")
            ]
        for line in text.splitlines():  # inline `python run.py ...`, outside code blocks
            found += [(page.name, cmd) for cmd in re.findall(r"`(python run\.py[^`]*)`", line) if "error" not in line]
    return list(dict.fromkeys(found))  # a command repeated on a page is checked once


def jobs_of(command: str) -> list[list[str]] | None:
    """The overrides of the jobs ``command`` runs: one, or for a sweep one per value of each swept
    key (the other keys at their first value); ``None`` for a placeholder command."""
    command = command.split(" #")[0]
    if re.search(r"<[^>]+>|\.\.\.|\bPATH\b", command):
        return None
    args = shlex.split(command)[2:]
    sweep = "-m" in args or "--multirun" in args
    pairs = [a.split("=", 1) for a in args if not a.startswith("-") and "=" in a and not a.startswith("hydra")]
    values = [v.split(",") if sweep and not re.search(r"[\[{'\"]", v) else [v] for _, v in pairs]
    first = [f"{k}={vs[0]}" for (k, _), vs in zip(pairs, values)]
    jobs = [first]
    for i, ((key, _), vs) in enumerate(zip(pairs, values)):
        jobs += [[*first[:i], f"{key}={v}", *first[i + 1 :]] for v in vs[1:]]
    return jobs


COMMANDS = documented_commands()
_CHECKED: set[tuple[str, ...]] = set()  # a job written in several places is composed once


def test_a_sweep_is_checked_job_by_job():
    assert jobs_of("python run.py -m quant=none,int4 analyzer=performance,robustness seed=1") == [
        ["quant=none", "analyzer=performance", "seed=1"],
        ["quant=int4", "analyzer=performance", "seed=1"],
        ["quant=none", "analyzer=robustness", "seed=1"],
    ]
    assert jobs_of("python run.py 'analyzer=[performance,inspect]'") == [["analyzer=[performance,inspect]"]]
    assert jobs_of("python run.py runtime.resume=<run id>") is None


def test_the_pages_hold_the_commands():
    pages = {p for p, _ in COMMANDS}
    assert {"README.md", "capabilities.md", "quantization.md", "model_kinds.md"} <= pages
    assert len(COMMANDS) > 100


@pytest.mark.parametrize("page,command", COMMANDS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(COMMANDS)])
def test_a_documented_command_composes_and_passes_the_config_check(page, command, monkeypatch):
    jobs = jobs_of(command)
    if jobs is None:
        pytest.skip("a placeholder for the reader's own value")
    monkeypatch.syspath_prepend(str(REPO / "tests"))  # docs/new_analyzer.md's example analyzer lives there
    monkeypatch.chdir(REPO)
    extras = []  # the extras a job needs that are not installed here: skipped once every job is checked
    try:
        for overrides in jobs:
            if tuple(overrides) in _CHECKED:
                continue
            try:
                build_components(compose(overrides))
                _CHECKED.add(tuple(overrides))
            except MissingLibrary as exc:  # composed; its option runs through an extra not installed here
                assert exc.extra, f"{page}: {command}: a missing library that no extra installs: {exc}"
                extras.append(exc.extra)
            except ConfigError as exc:
                if "torch sees no GPU" in str(exc):  # composed and checked up to the GPU it asks for
                    pytest.skip("needs a CUDA GPU (run with `pytest -m gpu` where there is one)")
                if not any(s in str(exc) for s in READERS_OWN):  # the reader's own file: theirs, not ours
                    pytest.fail(f"{page}: {command}\n  job {' '.join(overrides)}\n  {exc}")
    finally:
        sys.modules.pop("weight_norms", None)
    if extras:
        pytest.skip(f"needs the extra [{extras[0]}] (pip install -e '.[{extras[0]}]'), not installed here")


def test_a_command_whose_extra_is_not_installed_is_skipped_with_the_extra(monkeypatch):
    """A fresh machine set up by the README lacks the optional extras: their documented commands
    are skipped with the extra to install, never failed (the seed makes the job one not yet checked)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n.startswith("hqq") else real(n, *a))
    with pytest.raises(
        pytest.skip.Exception, match=r"needs the extra \[quantizers\] \(pip install -e '\.\[quantizers\]'\)"
    ):
        test_a_documented_command_composes_and_passes_the_config_check(
            "README.md", "python run.py quant=hqq_int4 seed=90417", monkeypatch
        )
    with pytest.raises(pytest.fail.Exception, match="no option 'nope'"):  # a wrong option still fails
        test_a_documented_command_composes_and_passes_the_config_check(
            "README.md", "python run.py quant=nope", monkeypatch
        )
