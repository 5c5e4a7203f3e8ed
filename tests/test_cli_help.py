"""``python run.py --help``: the groups with their options and the composed config, fast (the groups
are read from conf/, not through Hydra's config loader), and without the generated schema groups."""

import re

from conftest import REPO, run_cli


def test_help_lists_groups_options_and_config():
    proc = run_cli(["--help"], REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    groups = dict(re.findall(r"^([\w/]+): (.+)$", out, flags=re.MULTILINE))
    assert {"model", "dataset", "analyzer", "quant", "tracker", "train"} <= set(groups)
    assert "tiny_gpt2" in groups["model"].split(", ")
    assert {"int4", "int8", "none"} <= set(groups["quant"].split(", "))
    assert "performance" in groups["analyzer"].split(", ")
    assert "slurm" in groups["hydra/launcher"].split(", ")
    assert not [g for g in groups if g == "schema" or g.startswith("schema/")]
    assert "local" not in groups
    # the composed config: top-level keys, the default choices
    for key in ("model:", "dataset:", "analyzer:", "seed:", "progress:", "model_cache_size:"):
        assert re.search(rf"^{key}", out, flags=re.MULTILINE), key
    assert "python run.py quant=int4,int8 -m" in out
    assert "docs/config_reference.md" in out
    assert "--hydra-help" in out


def test_help_shows_the_config_of_the_overrides():
    proc = run_cli(["model=tiny_gpt2", "quant=int4", "-h"], REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "modelxray.models.tiny_gpt2.TinyGPT2Source" in proc.stdout
    assert "bits: 4" in proc.stdout


def test_help_with_a_bad_option_is_the_one_line_error():
    proc = run_cli(["model=no_such_model", "--help"], REPO, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "modelxray: error: model: no option 'no_such_model'; choose one of: "
        + ", ".join(sorted(p.stem for p in (REPO / "conf" / "model").glob("*.yaml")))
    )
