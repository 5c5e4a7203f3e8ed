"""The run's top-level keys (seed, threads, runtime.*, report.*) come from one schema and are checked
like every group's keys, in one line naming the key; a run is a loop over named stages."""

import dataclasses

import pytest

from modelxray.api import compose
from modelxray.config.components import build_components
from modelxray.config.settings import ORIGINAL_WEIGHTS_PLACES, RunSettings, run_settings
from modelxray.core.errors import ConfigError


def _error(overrides):
    with pytest.raises(ConfigError) as info:
        build_components(compose(["model=tiny_gpt2", *overrides]))
    return str(info.value)


def test_the_default_config_holds_the_schema_defaults():
    settings = build_components(compose(["model=tiny_gpt2"])).settings
    assert settings == RunSettings()
    assert (settings.seed, settings.threads, settings.runtime.original_weights) == (0, None, "auto")


def test_settings_given_on_the_command_line_reach_the_components():
    overrides = ["seed=3", "threads=2", "runtime.skip_finished=true", "report.dashboard=false"]
    settings = build_components(compose(["model=tiny_gpt2", *overrides])).settings
    assert (settings.seed, settings.threads, settings.runtime.skip_finished, settings.report.dashboard) == (
        3,
        2,
        True,
        False,
    )


@pytest.mark.parametrize(
    "override, key, says",
    [
        ("seed=1.5", "seed", "expected int"),
        ("threads=0", "threads", "must be positive"),
        ("model_cache_size=-1", "model_cache_size", ">= 0"),
        ("progress=maybe", "progress", "expected bool"),
        ("runtime.original_weights=ram", "runtime.original_weights", "auto, disk, memory, cpu"),
        ("runtime.resume=' '", "runtime.resume", "MLflow run id"),
        ("+runtime.skip_finishd=true", "runtime.skip_finishd", "runtime.skip_finished"),
        ("+report.dashbord=false", "report.dashbord", "report.dashboard"),
        ("report.dashboard=3", "report.dashboard", "expected bool"),
        ("+thread=2", "thread", "threads"),
    ],
)
def test_a_bad_top_level_value_is_one_line_naming_its_key(override, key, says):
    msg = _error([override])
    assert msg.startswith(f"{key}: ") and says in msg and "\n" not in msg


def test_a_settings_block_that_is_not_a_mapping_is_named():
    with pytest.raises(ConfigError, match=r"^runtime: expected a mapping"):
        run_settings({"runtime": 3})


def test_the_original_weights_places_are_those_the_implementation_knows():
    from modelxray.core.original_weights import PLACES

    assert set(ORIGINAL_WEIGHTS_PLACES) == set(PLACES)


def test_every_settings_key_has_help_in_the_config_reference():
    from modelxray.core.paths import conf_dir

    reference = (conf_dir().parent / "docs" / "config_reference.md").read_text()
    for f in dataclasses.fields(RunSettings):
        assert f"| `{f.name}" in reference


def test_a_run_is_a_loop_over_named_stages():
    from modelxray.app.orchestration import STAGES

    names = [name for name, _ in STAGES]
    assert names.index("load") < names.index("start tracking") < names.index("quantize") < names.index("analyze")
    assert names[-2:] == ["report", "finish tracking"]
