"""A bad value on the command line is found before Hydra composes the config, and the line it gets is
the one the full check after composing gives; where the early check cannot know what composing would
give (a preset, an interpolation, a sweep), it stays quiet and the full check speaks."""

import pytest

from modelxray import api, cli
from modelxray.config.components import validate_config
from modelxray.config.early_values import check_values_early
from modelxray.core.errors import ConfigError
from modelxray.core.paths import conf_dir

BAD = [
    ["dataset.seq_len=-1"],
    ["dataset.seq_lenn=3"],
    ["threads=0"],
    ["seed=x"],
    ["foo=1"],
    ["runtime.foo=1"],
    ["runtime.offload=sometimes"],
    ["runtime.max_memory=lots"],
    ["report.headline=[]"],
    ["report.dashbord=false"],
    ["quant=int4", "quant.bits=1"],
    ["quant=int4", "quant.group_size=0"],
    ["analyzer.performance.batch_size=0"],
    ["analyzer=[performance,robustness]", "analyzer.robustness.noise_levels=[-1]"],
    ["tracker.uri="],
    ["model=tiny_gpt2", "model.n_layer=0"],
    ["dataset=text_files", "dataset.paths=[]"],
]


def full_check_error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(api.compose(overrides))
    return str(info.value)


@pytest.mark.parametrize("overrides", BAD, ids=" ".join)
def test_the_early_line_is_the_full_checks_line(overrides):
    with pytest.raises(ConfigError) as early:
        check_values_early(overrides, conf_dir())
    assert str(early.value) == full_check_error(overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        ["dataset.seq_len=64", "threads=1", "analyzer.performance.batch_size=2"],  # good values
        ["debug=tiny", "dataset.seq_len=-1"],  # a preset sets keys of other groups
        ["experiment=grokking", "model.width=0"],
        ["model=digits_mlp", "model.hidden=0"],  # an option that changes another group's choice
        ["model=digits_mlp", "dataset.seq_len=-1"],  # ... of the group whose key is set
        ["dataset.seq_len=${seed}"],  # an interpolation
        ["-m", "dataset.seq_len=-1,8"],  # a sweep
        ["--config-dir", "/tmp", "dataset.seq_len=-1"],  # another config folder
        ["~dataset.seq_len"],  # a deletion
        ["analyzer=[performance,robustness]", "analyzer.robustness.seeds.0=5"],  # an item of a list
        ["model=file", "model.path=/no/such.pt", "--cfg", "job"],  # --cfg prints the config unchecked
        ["quant=int3", "quant.bits=1"],  # an option that builds on another option
    ],
    ids=" ".join,
)
def test_quiet_where_composing_could_give_something_else(overrides):
    check_values_early(overrides, conf_dir())


def test_a_bad_value_is_one_line_without_composing(monkeypatch, capsys):
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    def no_composing(*args, **kwargs):
        raise AssertionError("composed")

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", no_composing)
    assert cli.main(["dataset.seq_len=-1"]) == 2
    assert capsys.readouterr().err.strip() == "modelxray: error: dataset.seq_len: must be positive, got -1"
