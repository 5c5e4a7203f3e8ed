"""MLflow's UI as the comparison surface: the experiment opens on its runs, runs have names a person
reads, each run's dataset is an MLflow dataset input, a sweep has a parent run holding the
comparison, system metrics on request, and a real browser sees all of it (``scripts/ui_check.py``)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time

import pytest
import torch

from conftest import REPO, TINY_JOB, load_script, mlflow_runs, run_cli
from modelxray.api import compose
from modelxray.app import choices_of
from modelxray.data.base import ClassificationData, TokenData
from modelxray.data.example_inputs import ExampleInputs
from modelxray.data.identity import identify
from modelxray.tracking.mlflow_run import ui_url
from modelxray.tracking.mlflow_store import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from modelxray.tracking.mlflow_tracker import MlflowTracker
from modelxray.tracking.run_names import run_name


def _name(overrides: list[str]) -> str:
    from omegaconf import OmegaConf

    cfg = compose(overrides)
    config = OmegaConf.to_container(cfg, resolve=False)
    config.pop("hydra")
    return run_name(choices_of(cfg.hydra), overrides, config)


def test_run_names_say_model_analyzers_quant_and_the_values_set():
    assert _name([]) == "smollm2 perf"
    assert _name(["quant=int4", "quant.group_size=64"]) == "smollm2 perf int4 g64"
    assert (
        _name(["model=hf", "model.name_or_path=HuggingFaceTB/SmolLM2-360M", "analyzer=[performance,quant_impact]"])
        == "SmolLM2-360M perf qimpact"
    )
    assert _name(["experiment=grokking"]) == "grokking mlp classifier"
    # where runs are logged is not part of what they measured
    assert (
        _name(["model=tiny_gpt2", "dataset.max_tokens=2048", "tracker.uri=sqlite:///x.db"]) == "tiny_gpt2 perf tok2048"
    )


def test_run_names_of_a_sweep_are_distinct_even_when_shortened():
    long = "analyzer.robustness.epsilons=[0.01,0.02,0.05,0.1,0.2,0.3,0.4]"
    a = _name(["model=tiny_gpt2", "analyzer=[robustness]", long])
    b = _name(["model=tiny_gpt2", "analyzer=[robustness]", long.replace("0.4]", "0.5]")])
    assert a != b and a.startswith("tiny_gpt2 robust epsilons=") and len(a) <= 70
    names = {_name(["model=tiny_gpt2", f"quant={q}", f"seed={s}"]) for q in ("none", "int4", "int8") for s in (0, 1)}
    assert len(names) == 6 and "tiny_gpt2 perf int8 seed1" in names
    # the swept values lead, so a name shortened to its length keeps what tells the jobs apart
    many = [f"dataset.seq_len={n}" for n in (64,)] + ["model.n_layer=1", "analyzer.performance.iters=1"]
    many += ["analyzer.performance.layer_timing_iters=1", "report.dashboard=false", "dataset.max_tokens=512"]
    cfg = compose(["model=tiny_gpt2", *many, "seed=7"])
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(cfg, resolve=False)
    config.pop("hydra")
    led = run_name(choices_of(cfg.hydra), ["model=tiny_gpt2", *many, "seed=7"], config, swept=("seed",))
    assert led.startswith("seed7 tiny_gpt2 perf ")
    # a quantization sweep: each job's name starts with its quant, the baseline's too
    for quant, first in (("int4", "int4 tiny_gpt2 perf "), ("none", "quant=none tiny_gpt2 perf ")):
        cfg = compose(["model=tiny_gpt2", f"quant={quant}", *many])
        config = OmegaConf.to_container(cfg, resolve=False)
        config.pop("hydra")
        named = run_name(choices_of(cfg.hydra), ["model=tiny_gpt2", f"quant={quant}", *many], config, swept=("quant",))
        assert named.startswith(first) and named.count(quant) == 1, named


def test_dataset_identity_digests_the_exact_data_scored():
    ids = torch.arange(600)
    text = TokenData("pydoc_topics", ids, n_bytes=2000, seq_len=64, available_tokens=600)
    same = TokenData("pydoc_topics", ids.clone(), n_bytes=2000, seq_len=64, available_tokens=600)
    fewer = TokenData("pydoc_topics", ids[:500], n_bytes=1700, seq_len=64, available_tokens=600)
    a, b, c = identify(text), identify(same), identify(fewer)
    assert a.digest == b.digest != c.digest and len(a.digest) == 16
    assert a.size["tokens"] == 600 and c.size["tokens"] == 500 and a.source_type == "code"
    x, y = torch.rand(10, 4), torch.arange(10) % 3
    images = ClassificationData("digits", x, y, x, y, 3, (0.0, 1.0), (4,))
    flipped = ClassificationData("digits", x, y, x, y.flip(0), 3, (0.0, 1.0), (4,))
    assert identify(images).digest != identify(flipped).digest and identify(images).size["examples"] == 10
    inputs = ExampleInputs({"x": torch.ones(2, 3)}, "/data/inputs.pt")
    assert identify(inputs).source_type == "local" and identify(inputs).schema == {"x": "float32 [2, 3]"}
    rate = ExampleInputs({"x": torch.ones(2, 3), "sr": 16000}, "code")  # a fixed argument changes the outputs too
    other = ExampleInputs({"x": torch.ones(2, 3), "sr": 8000}, "code")
    assert (
        identify(rate).digest != identify(other).digest != identify(inputs).digest and len(identify(rate).digest) == 16
    )
    assert identify(rate).schema == {"x": "float32 [2, 3]", "sr": "16000"} and rate.n_examples == 2
    assert rate.batch(3)["sr"] == 16000 and rate.batch(3)["x"].shape == (3, 3)
    assert identify(None) is None


def test_dataset_source_names_files_and_hub_datasets(tmp_path):
    from modelxray.data.hf_dataset import HFDataset
    from modelxray.data.identity import source_of
    from modelxray.data.text_files import TextFiles

    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("some text " * 20)
    files = TextFiles(paths=[str(tmp_path / "a.txt"), str(tmp_path / "b.txt")])
    assert source_of(files) == ("local", f"{tmp_path / 'a.txt'}, {tmp_path / 'b.txt'}")
    wikitext = HFDataset(path="wikitext", subset="wikitext-2-raw-v1", split="test")
    assert source_of(wikitext) == ("hugging_face", "wikitext/wikitext-2-raw-v1:test")
    rows = tmp_path / "rows.parquet"
    rows.write_bytes(b"")
    assert source_of(HFDataset(path=str(rows), split="train")) == ("local", str(rows))
    assert source_of(None) == ("code", "in-memory data (Python API)")


def test_experiments_are_created_as_model_training_experiments(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    MlflowTracker(uri=uri, experiment="fresh").start("r", {}).finish("FINISHED")
    client = MlflowClient(uri)
    assert client.get_experiment_by_name("fresh").tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    # an older experiment the UI inferred a kind for gets ours; one a person chose keeps theirs
    inferred = client.create_experiment("old", tags={EXPERIMENT_KIND_TAG: "genai_development_inferred"})
    chosen = client.create_experiment("chosen", tags={EXPERIMENT_KIND_TAG: "genai_development"})
    for name in ("old", "chosen"):
        MlflowTracker(uri=uri, experiment=name).start("r", {}).finish("FINISHED")
    assert client.get_experiment(inferred).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert client.get_experiment(chosen).tags[EXPERIMENT_KIND_TAG] == "genai_development"


def test_links_open_the_runs_view_and_carry_no_credentials(tmp_path):
    assert ui_url("http://h:5000/", "3") == "http://h:5000/#/experiments/3/runs?workflowType=machine_learning"
    assert ui_url("http://h:5000", "3", "abc").endswith("/#/experiments/3/runs/abc?workflowType=machine_learning")
    run = MlflowTracker(uri=f"sqlite:///{tmp_path / 'm.db'}", experiment="e").start("r", {})
    assert run.view_hint().startswith("mlflow ui --backend-store-uri sqlite:///")
    assert "#/experiments/1/runs?workflowType=machine_learning" in run.view_hint()
    run.uri = "https://user:secret@mlflow.example"
    assert run.view_hint() == "https://mlflow.example/#/experiments/1/runs?workflowType=machine_learning"


def test_system_metrics_are_sampled_while_the_run_lasts(tmp_path):
    from mlflow.tracking import MlflowClient

    from modelxray.core.instantiate import build_component

    cfg = compose(["tracker.system_metrics=true", "tracker.system_metrics_interval_s=0.2"])
    tracker = build_component(cfg.tracker, "tracker")
    tracker.uri = f"sqlite:///{tmp_path / 'm.db'}"
    run = tracker.start("watched", {})
    time.sleep(1.5)
    run.finish("FINISHED")
    metrics = MlflowClient(tracker.uri).get_run(run.run_id).data.metrics
    assert "system/cpu_utilization_percentage" in metrics and "system/system_memory_usage_megabytes" in metrics
    unwatched = MlflowTracker(uri=tracker.uri, experiment="modelxray").start("plain", {})
    unwatched.finish("FINISHED")
    assert not any(k.startswith("system/") for k in MlflowClient(tracker.uri).get_run(unwatched.run_id).data.metrics)


def test_sweep_callback_keys_compose_and_instantiate():
    from hydra.utils import instantiate

    cfg = compose(
        [
            "hydra.callbacks.sweep_setup.parent_run=false",
            "hydra.callbacks.sweep_setup.summary_metrics=[performance/loss]",
            "hydra.callbacks.sweep_setup.pareto=[performance/param_bytes,performance/loss]",
        ]
    )
    callback = instantiate(cfg.hydra.callbacks.sweep_setup)
    assert callback.parent_run is False and callback.summary_metrics == ["performance/loss"]
    assert callback.pareto == ["performance/param_bytes", "performance/loss"]
    default = instantiate(compose([]).hydra.callbacks.sweep_setup)
    assert default.parent_run is True and "performance/perplexity" in default.summary_metrics


def test_a_sweep_has_a_parent_run_holding_the_comparison_of_its_named_jobs(cache_dir, tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    proc = run_cli(
        [
            "-m",
            *TINY_JOB,
            "tracker=mlflow",
            f"dataset.cache_dir={cache_dir}",
            "quant=none,int4",
            f"tracker.uri={uri}",
            "tracker.experiment=ui",
            f"hydra.sweep.dir={tmp_path}/multirun",
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client, every = mlflow_runs(uri, "ui", parents=True)
    (parent,) = [r for r in every if r.data.tags.get("modelxray.sweep_parent") == "true"]
    jobs = [r for r in every if r is not parent]
    assert len(jobs) == 2 and parent.info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in jobs} == {parent.info.run_id}
    names = sorted(r.info.run_name for r in jobs)
    assert names[0].startswith("int4 tiny_gpt2 perf debug-tiny") and names[1].startswith("quant=none tiny_gpt2 perf")
    assert all(len(n) <= 70 for n in names)
    assert all("quant=" in r.data.tags["modelxray.overrides"] for r in jobs)  # the full overrides stay as a tag
    assert parent.info.run_name.startswith("sweep ") and "quant=none,int4" in parent.info.run_name
    assert parent.data.tags["modelxray.sweep_id"] == jobs[0].data.tags["modelxray.sweep_id"]
    # each job's data as an MLflow dataset input: same text, same digest
    (inputs_a,), (inputs_b,) = (r.inputs.dataset_inputs for r in jobs)
    assert inputs_a.dataset.name == "pydoc_topics" and inputs_a.dataset.digest == inputs_b.dataset.digest
    assert '"tokens": 512' in inputs_a.dataset.profile
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"comparison.md", "pareto.png", "sweep_config.yaml", "sweep_overrides.txt"} <= artifacts
    comparison = open(client.download_artifacts(parent.info.run_id, "comparison.md", str(tmp_path))).read()
    assert all(n in comparison for n in names) and "| quant |" in comparison
    assert "performance/perplexity" in comparison and "±" in comparison and "model/size_bytes" in comparison
    assert "performance/top1_agree" in comparison and "performance/kl" in comparison  # int4 against the model as loaded
    assert comparison.count("?workflowType=machine_learning)") == 2  # each job's name links its run page
    # each job's page says what happened, and links the comparison
    for job in jobs:
        note = job.data.tags["mlflow.note.content"]
        assert note.startswith(f"**{job.info.run_name}**") and "perplexity " in note and "weights " in note
        assert f"/runs/{parent.info.run_id}?workflowType=machine_learning" in note and "comparison" in note
        assert job.data.metrics["_headline/perplexity"] == job.data.metrics["performance/perplexity"]
    (int4,) = [j for j in jobs if j.info.run_name.startswith("int4")]
    assert "top-1 agreement" in int4.data.tags["mlflow.note.content"] and "_headline/kl" in int4.data.metrics
    assert parent.data.metrics["sweep/runs_finished"] == 2
    assert "modelxray: view     mlflow ui --backend-store-uri" in proc.stdout
    assert proc.stdout.count("workflowType=machine_learning") == 1  # once, for the whole sweep
    # a job run on its own has no parent
    single = run_cli([*TINY_JOB, "tracker=mlflow", f"tracker.uri={uri}", "tracker.experiment=ui"], cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    _, after = mlflow_runs(uri, "ui")
    (alone,) = [r for r in after if r.info.run_id not in {j.info.run_id for j in jobs}]
    assert "mlflow.parentRunId" not in alone.data.tags


def _ui_check_missing() -> str | None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from ui_check import find_chromium
    finally:
        sys.path.pop(0)
    if find_chromium() is None:
        return "needs Chromium (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "needs playwright (pip install playwright)"
    if shutil.which("mlflow") is None:
        return "needs the mlflow command"
    return None


def _ui_check_module():
    return load_script("ui_check")


def test_ui_check_starts_one_worker_and_waits_long_enough_for_a_loaded_machine():
    ui_check = _ui_check_module()
    cmd = ui_check.ui_command(REPO, 5000)
    assert cmd[:2] == ["mlflow", "ui"] and cmd[cmd.index("--workers") + 1] == "1"
    assert ui_check.UI_TIMEOUT_S >= 600
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "ui_check.py"), "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--ui-timeout" in proc.stdout and "default: 600" in proc.stdout and "--workers" in proc.stdout


@pytest.mark.slow  # an MLflow server: about 20 s on 2 idle cores
@pytest.mark.skipif(shutil.which("mlflow") is None, reason="needs the mlflow command")
def test_ui_check_serves_a_store_with_one_worker(tmp_path):
    ui_check = _ui_check_module()
    MlflowTracker(uri=f"sqlite:///{tmp_path}/mlflow.db", experiment="modelxray").start("r", {}).finish("FINISHED")
    server = ui_check.start_ui(tmp_path, ui_check.free_port())  # returns once /health answers
    try:
        children = subprocess.run(
            ["ps", "-ww", "--ppid", str(server.pid), "-o", "args="], capture_output=True, text=True
        )
        assert "uvicorn" in children.stdout and "--workers 1 " in children.stdout, children.stdout
    finally:
        ui_check.stop_ui(server)
    assert server.returncode is not None


@pytest.mark.slow  # a sweep, an MLflow server and a browser
@pytest.mark.skipif(_ui_check_missing() is not None, reason=str(_ui_check_missing()))
def test_the_ui_shows_the_sweep_in_a_real_browser(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "ui_check.py"), "--out", str(tmp_path / "shots")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "FAIL" not in proc.stdout and proc.stdout.count("  ok   ") >= 10
    for shot in ("runs_table.png", "charts.png", "compare.png", "sweep_parent.png"):
        assert (tmp_path / "shots" / shot).stat().st_size > 20_000


def test_a_new_sqlite_store_is_a_copy_of_an_empty_one_made_once(tmp_path, monkeypatch):
    import sqlite3

    from modelxray.core.instantiate import build_component

    monkeypatch.chdir(tmp_path)
    cfg = compose([f"tracker.store_template_dir={tmp_path / 'templates'}", "tracker.uri=sqlite:///first.db"])
    first = build_component(cfg.tracker, "tracker")
    first.start("r", {}).finish("FINISHED")
    (template,) = (tmp_path / "templates").glob("empty-mlflow-*.db")
    second = MlflowTracker(uri="sqlite:///second.db", store_template_dir=str(tmp_path / "templates"))
    t0 = time.perf_counter()
    second.seed_store()
    assert time.perf_counter() - t0 < 1.0  # a copy, not MLflow's migrations
    run = second.start("r", {})
    run.log_metrics({"m": 1.0})
    run.finish("FINISHED")
    with sqlite3.connect(tmp_path / "second.db") as con:
        assert con.execute("pragma integrity_check").fetchone() == ("ok",)
        version = con.execute("select version_num from alembic_version").fetchone()
        default = con.execute("select artifact_location from experiments where experiment_id = 0").fetchone()
    with sqlite3.connect(template) as con:
        assert version == con.execute("select version_num from alembic_version").fetchone()
    assert default == (str(tmp_path / "mlruns" / "0"),)
    # a store that exists is never touched; null turns the template off
    before = (tmp_path / "second.db").read_bytes()
    second.seed_store()
    assert (tmp_path / "second.db").read_bytes() == before
    MlflowTracker(uri="sqlite:///third.db", store_template_dir=None).seed_store()
    assert not (tmp_path / "third.db").exists()


def test_a_sweep_without_new_runs_fails_only_when_a_job_failed(tmp_path):
    from omegaconf import OmegaConf

    from modelxray.core.failures import collecting, report_failure
    from modelxray.sweep import summarize

    class Parent:
        texts: dict = {}

        def log_text(self, text, path):
            self.texts[path] = text

    tracker = MlflowTracker(uri=f"sqlite:///{tmp_path / 'm.db'}", experiment="e")
    tracker.start("unrelated", {"modelxray.sweep_id": "other"}).finish("FINISHED")
    config = OmegaConf.create({"hydra": {"overrides": {"task": ["seed=0,1"]}}})
    parent = Parent()
    with collecting():  # every job skipped as FINISHED before: nothing new, nothing wrong
        assert summarize(parent, tracker, "s1", config, ["performance/perplexity"], []) == "FINISHED"
    assert "No job of this sweep logged a new run" in parent.texts["comparison.md"]
    with collecting():
        report_failure("job #1")
        assert summarize(parent, tracker, "s1", config, ["performance/perplexity"], []) == "FAILED"
    assert "## Failed jobs (1)\n\n- job #1" in parent.texts["comparison.md"]


def test_a_dataset_row_made_by_a_parallel_job_is_linked_after_the_lost_insert(tmp_path, monkeypatch):
    """Parallel jobs on the same text race to create its dataset row: the loser links the winner's row."""
    from mlflow.exceptions import MlflowException

    tracker = MlflowTracker(uri=f"sqlite:///{tmp_path}/m.db", experiment="race", store_template_dir=None)
    winner, run = tracker.start("winner", {}), tracker.start("loser", {})
    identity = identify(TokenData("pydoc_topics", torch.arange(300), n_bytes=900, seq_len=64, available_tokens=300))
    real, calls = run.client.log_inputs, []

    def racing(run_id, datasets):
        calls.append(run_id)
        if len(calls) == 1:  # the other job inserts the row first; this insert loses
            real(winner.run_id, datasets=datasets)
            raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.experiment_id")
        return real(run_id, datasets=datasets)

    monkeypatch.setattr(run.client, "log_inputs", racing)
    run.log_dataset(identity)
    for r in (winner, run):
        (linked,) = run.client.get_run(r.run_id).inputs.dataset_inputs
        assert linked.dataset.digest == identity.digest
    assert calls == [run.run_id, run.run_id]

    def broken(run_id, datasets):
        raise MlflowException("the store is read-only")

    monkeypatch.setattr(run.client, "log_inputs", broken)
    with pytest.raises(MlflowException, match="read-only"):
        run.log_dataset(identity)
