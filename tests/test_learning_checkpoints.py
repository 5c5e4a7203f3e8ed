"""Post-hoc learning dynamics on a user's own checkpoints: ``torch.save``d state dicts named with the
epoch (``model_epoch_{i}.pth``), the user's class by ``_target_``, the user's data. A short digits-MLP
training run writes the same weights both as the user's files and as modelxray's own
``step_N/model.safetensors``; the new path must give the numbers of the existing one."""

from __future__ import annotations

import json
import logging
import math

import pytest
import torch
import torch.nn.functional as F

from conftest import run_cli
from modelxray import analyze_checkpoints
from modelxray.analyzers.learning_dynamics import CheckpointDynamicsAnalyzer
from modelxray.core.errors import ConfigError
from modelxray.core.result import RunContext
from modelxray.core.subject import Subject
from modelxray.data.digits import load_digits_split

EPOCHS = 4
MLP = {
    "_target_": "modelxray.models.grokking_nets.ModularMLP",
    "p": None,
    "in_features": 64,
    "hidden": [32],
    "n_classes": 10,
    "bias": True,
}
PATTERN = "model_epoch_{epoch}.pth"
# every section as by default, TracIn on fewer training examples: each analysis well under a second
KEYS = {"sections": {**CheckpointDynamicsAnalyzer().sections, "attribution": {"every_n_steps": 1, "max_train": 300}}}


class Settings:
    """A pickled object beside the weights: loading it could run code, so weights_only refuses it."""

    lr = 0.01


def _mlp(hidden=(32,)):
    from modelxray.models.grokking_nets import ModularMLP

    return ModularMLP(None, 64, list(hidden), 10, True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Four epochs of Adam on digits (under a second); after each, the state dict as the user saves
    it (epoch 2 wrapped with the optimizer, as many scripts do) and as modelxray's checkpoint."""
    from safetensors.torch import save_model

    root = tmp_path_factory.mktemp("ckpts")
    user, own = root / "user", root / "own"
    user.mkdir()
    data = load_digits_split()
    torch.manual_seed(0)
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    states = {}
    for epoch in range(1, EPOCHS + 1):
        for idx in torch.randperm(len(data.y_train), generator=gen).split(128):
            loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sd = {k: v.clone() for k, v in model.state_dict().items()}
        states[epoch] = sd
        obj = {"model_state_dict": sd, "epoch": epoch, "optimizer_state_dict": opt.state_dict()} if epoch == 2 else sd
        torch.save(obj, user / f"model_epoch_{epoch}.pth")
        (own / f"step_{epoch:06d}").mkdir(parents=True)
        save_model(model, str(own / f"step_{epoch:06d}" / "model.safetensors"))
    (user / "notes.txt").write_text("lr 0.01")
    return {"user": user, "own": own, "states": states, "data": data}


def _existing_path(saved):
    """The post-hoc path as it was: model=mlp with model.checkpoints (modelxray's own files)."""
    from modelxray.models.grokking import MLPSource

    loaded = MLPSource(p=None, n_classes=10, hidden=[32], bias=True, checkpoints=str(saved["own"]), device="cpu").load()
    subject = Subject(loaded.model, None, saved["data"], loaded.info, task="classification")
    cfg = CheckpointDynamicsAnalyzer(**KEYS)
    cfg.preflight(subject)
    return cfg.run(subject, RunContext(output_dir=saved["own"], seed=0, progress=False))


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-9, nan_ok=True), k


@pytest.fixture(scope="module")
def reference(saved):
    """The directory, the class by _target_ and the dataset by name."""
    return analyze_checkpoints(saved["user"], PATTERN, model=MLP, dataset="digits", **KEYS)


def test_your_files_give_the_numbers_of_modelxrays_own_checkpoints(saved, reference, caplog):
    own = _existing_path(saved)
    with caplog.at_level(logging.WARNING, logger="modelxray.models.saved_checkpoints"):
        mine = analyze_checkpoints(saved["user"], PATTERN, model=MLP, dataset="digits", **KEYS)
    _same(mine.metrics, own.metrics)
    assert mine.data["checkpoint_steps"] == own.data["checkpoint_steps"] == [1, 2, 3, 4]
    assert mine.data["checkpoint_unit"] == "epoch"
    assert [f["state_dict_entry"] for f in mine.data["checkpoint_files"]] == ["", "model_state_dict", "", ""]
    assert mine.insights[0].startswith("Analyzed 4 checkpoints from epoch 1 to 4")
    assert "State dicts read from the model_state_dict entry of 1 of 4 files." in mine.insights
    # the file the pattern leaves out: named in one log line and in the report, never used
    (line,) = [r.getMessage() for r in caplog.records if "not matching" in r.getMessage()]
    assert "notes.txt" in line and "1 file" in line
    assert any("notes.txt" in i for i in mine.insights)
    # by hand: the last checkpoint's test accuracy and loss
    data, last = saved["data"], _mlp()
    last.load_state_dict(saved["states"][EPOCHS])
    with torch.no_grad():
        logits = last(data.x_test)
    acc = (logits.argmax(1) == data.y_test).float().mean().item()
    assert mine.metrics["memorization/test_accuracy"] == pytest.approx(acc, abs=1e-6)
    assert mine.metrics["memorization/test_loss"] == pytest.approx(F.cross_entropy(logits, data.y_test).item(), 1e-5)


def test_epoch_models_loaders_and_a_class_give_the_same_result(saved, reference):
    """{epoch: model}, a model class with DataLoaders (the training one shuffling) and the directory
    with the dataset name: one replay, one set of numbers."""
    from torch.utils.data import DataLoader, TensorDataset

    from modelxray.learning_dynamics import LearningDynamicsAnalyzer as PerEpoch

    data = saved["data"]
    models = {}
    for epoch, sd in saved["states"].items():
        models[epoch] = _mlp()
        models[epoch].load_state_dict(sd)
    train = TensorDataset(data.x_train, data.y_train)
    test = TensorDataset(data.x_test, data.y_test)
    from_models = analyze_checkpoints(
        models,
        train_data=DataLoader(train, batch_size=64, shuffle=True),
        test_data=DataLoader(test, batch_size=256),
        **KEYS,
    )
    _same(from_models.metrics, reference.metrics)
    from_class = analyze_checkpoints(saved["user"], PATTERN, model=_mlp, train_data=train, test_data=test, **KEYS)
    _same(from_class.metrics, reference.metrics)
    # the per-epoch tracker replaying the same checkpoints over an unshuffled loader agrees
    tracker = PerEpoch(num_classes=10)
    loader = DataLoader(train, batch_size=100)
    for epoch, model in models.items():
        stats = tracker.compute_epoch_statistics(loader, model, epoch)
    for key in ("examples/forgetting_events_total", "examples/never_learned_share", "cartography/hard_share"):
        assert stats[key] == pytest.approx(reference.metrics[key]), key


def test_output_dir_holds_the_clis_files(saved, tmp_path):
    keys = {"sections": {**KEYS["sections"], "attribution": None, "features": None}}
    result = analyze_checkpoints(saved["user"], PATTERN, model=MLP, dataset="digits", output_dir=tmp_path, **keys)
    stored = json.loads((tmp_path / "results" / "learning_dynamics.json").read_text())
    assert stored["metrics"]["checkpoints"] == 4 == result.metrics["checkpoints"]
    for plot in ("memorization.png", "cartography_map.png", "gradient_flow.png", "learning_curves_by_region.png"):
        assert (tmp_path / "plots" / plot).stat().st_size > 5_000, plot


# ---- errors: one line, before any analysis -----------------------------------------------------------------
@pytest.fixture
def no_replay(monkeypatch):
    """Any error below must come before the replay starts."""
    from modelxray.analyzers.learning_dynamics import run

    def fail(*a, **k):
        raise AssertionError("the analysis started")

    monkeypatch.setattr(run, "replay", fail)


def _copy(saved, tmp_path, extra: dict | None = None):
    """The user's folder copied, with ``extra`` files (name -> object to torch.save, or bytes)."""
    import shutil

    folder = tmp_path / "ckpts"
    shutil.copytree(saved["user"], folder)
    for name, obj in (extra or {}).items():
        if isinstance(obj, bytes):
            (folder / name).write_bytes(obj)
        else:
            torch.save(obj, folder / name)
    return folder


def _error(folder, **kw) -> ConfigError:
    kw.setdefault("model", MLP)
    with pytest.raises(ConfigError) as err:
        analyze_checkpoints(folder, kw.pop("pattern", PATTERN), dataset="digits", **kw)
    assert "\n" not in str(err.value)
    return err.value


def test_no_matching_file(saved, no_replay):
    err = _error(saved["user"], pattern="ckpt-step={step}.pt")
    assert err.key == "pattern" and "0 files" in str(err) and "model_epoch_1.pth" in str(err)


def test_pattern_form(saved, no_replay):
    for bad, words in (
        ("model_epoch.pth", "exactly once"),
        ("e{epoch}_s{step}.pt", "exactly once"),
        ("ckpts/model_{epoch}.pth", "without folders"),
    ):
        err = _error(saved["user"], pattern=bad)
        assert err.key == "pattern" and words in str(err), bad
    # a wildcard and a step: ckpt-step=1200.pt style names, sorted by number, not by text
    assert _error_free_numbers(saved) == [9, 10, 1200]
    from modelxray.models.saved_checkpoints import parse_pattern

    assert parse_pattern("model*{epoch}.pth").number("model12.pth") == 12  # the wildcard leaves the digits
    assert parse_pattern("model_epoch_{epoch}.pth").number("model_epoch_3.pth.bak") is None


def _error_free_numbers(saved) -> list[int]:
    import tempfile
    from pathlib import Path

    from modelxray.models.saved_checkpoints import list_saved, parse_pattern

    with tempfile.TemporaryDirectory() as d:
        for name in ("run1-ckpt-step=1200.pt", "run1-ckpt-step=9.pt", "run2-ckpt-step=10.pt", "last.pt"):
            (Path(d) / name).write_bytes(b"")
        found, others = list_saved(d, parse_pattern("*-ckpt-step={step}.pt"))
        assert [p.name for p in others] == ["last.pt"]
        return [c.number for c in found]


def test_unreadable_file(saved, tmp_path, no_replay):
    folder = _copy(saved, tmp_path, {"model_epoch_9.pth": b"not a checkpoint"})
    err = _error(folder)
    assert err.key == "checkpoints" and "model_epoch_9.pth is not a readable PyTorch checkpoint" in str(err)


def test_unsafe_pickle_is_refused(saved, tmp_path, no_replay):
    sd = saved["states"][1]
    folder = _copy(saved, tmp_path, {"model_epoch_9.pth": {"state_dict": sd, "settings": Settings()}})
    err = _error(folder)
    assert "model_epoch_9.pth holds pickled Python objects" in str(err) and "Settings" in str(err)
    assert "refused" in str(err)


def test_checkpoint_that_does_not_fit_the_class(saved, tmp_path, no_replay):
    narrow = {**MLP, "hidden": [16]}
    err = _error(saved["user"], model=narrow)
    assert (
        err.key == "checkpoints"
        and "model_epoch_1.pth does not fit modelxray.models.grokking_nets.ModularMLP" in str(err)
    )
    assert "hidden.fc1.weight is [32, 64] in the file and [16, 64] in the model" in str(err)
    # only the last file differs: still found before any work
    folder = _copy(saved, tmp_path, {"model_epoch_9.pth": _mlp((16,)).state_dict()})
    assert "model_epoch_9.pth does not fit" in str(_error(folder))
    deeper = _error(saved["user"], model={**MLP, "hidden": [32, 32]})
    assert "has no hidden.fc2.weight" in str(deeper)
    # {epoch: model} of two architectures
    models = {1: _mlp(), 2: _mlp((16,))}
    with pytest.raises(ConfigError, match=r"checkpoints\[2\] does not fit"):
        analyze_checkpoints(models, dataset="digits")


def test_state_dict_entry(saved, tmp_path, no_replay):
    err = _error(saved["user"], state_dict_key="weights")
    assert err.key == "state_dict_key" and "model_epoch_1.pth holds no 'weights' entry" in str(err)
    folder = _copy(saved, tmp_path, {"model_epoch_9.pth": {"epoch": 9, "optim": {"lr": 0.1}}})
    err = _error(folder)
    assert err.key == "state_dict_key" and "holds no state dict" in str(err) and "epoch (int)" in str(err)


def test_duplicate_numbers_and_missing_arguments(saved, tmp_path, no_replay):
    folder = _copy(saved, tmp_path, {"model_epoch_03.pth": saved["states"][3]})
    assert "model_epoch_03.pth and model_epoch_3.pth" in str(_error(folder))
    with pytest.raises(ConfigError, match="^model: is needed"):
        analyze_checkpoints(saved["user"], PATTERN, dataset="digits")
    with pytest.raises(ConfigError, match="^test_data: is needed"):
        analyze_checkpoints(saved["user"], PATTERN, model=MLP, train_data=[])
    with pytest.raises(ConfigError, match="^lr_typo: is no key"):
        analyze_checkpoints(saved["user"], PATTERN, model=MLP, dataset="digits", lr_typo=1)


def test_analyzer_keys_are_checked_with_the_config():
    with pytest.raises(ConfigError, match=r"^checkpoints\.pattern: is needed with dir"):
        CheckpointDynamicsAnalyzer(checkpoints={"dir": "/tmp"})
    with pytest.raises(ConfigError, match=r"^checkpoints\.pattern: must hold"):
        CheckpointDynamicsAnalyzer(checkpoints={"pattern": "model.pth"})
    with pytest.raises(ConfigError, match=r"^checkpoints\.folder: unknown key"):
        CheckpointDynamicsAnalyzer(checkpoints={"folder": "/tmp"})


@pytest.mark.slow
def test_cli_on_your_checkpoints(saved, reference, tmp_path):
    """``model=file`` with the class by _target_ and the pattern: the numbers of the Python call; a
    file that does not fit stops the run with one line before the analysis."""
    arch = "model.architecture={_target_: modelxray.models.grokking_nets.ModularMLP, p: null, in_features: 64, "
    common = [
        "analyzer=learning_dynamics",
        "dataset=digits",
        "model=file",
        "model.kind=image_classification",
        "model.input_shape=[1,8,8]",
        f"model.path={saved['user'] / 'model_epoch_4.pth'}",
        "analyzer.learning_dynamics.checkpoints.pattern='model_epoch_{epoch}.pth'",
        "analyzer.learning_dynamics.sections.attribution.max_train=300",
        "threads=1",
        "progress=false",
        "tracker=none",
    ]
    proc = run_cli([*common, arch + "hidden: [32], n_classes: 10, bias: true}"], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = tmp_path.glob("outputs/*/*/results/learning_dynamics.json")
    cli = json.loads(path.read_text())
    _same(cli["metrics"], reference.metrics)
    assert all(math.isfinite(v) for v in cli["metrics"].values() if isinstance(v, float) and v == v)
    # a file in the folder that another class wrote: exit 2, one line naming the key, the file and the tensor
    folder = _copy(saved, tmp_path, {"model_epoch_9.pth": _mlp((16,)).state_dict()})
    bad = [c.replace(str(saved["user"]), str(folder)) for c in common]
    proc = run_cli([*bad, arch + "hidden: [32], n_classes: 10, bias: true}"], tmp_path, timeout=240)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "analyzer.learning_dynamics.checkpoints.dir:" in proc.stderr
    assert "model_epoch_9.pth does not fit" in proc.stderr and "hidden.fc1.weight is [16, 64]" in proc.stderr


def test_safetensors_files_and_state_dicts_in_memory(saved, tmp_path):
    """``.safetensors`` files read with safetensors; ``{epoch: state dict}`` unwrapped like a file."""
    from safetensors.torch import save_file

    from modelxray.checkpoint_analysis import _in_memory
    from modelxray.models import saved_checkpoints as sc

    for epoch in (1, 2):
        save_file(saved["states"][epoch], str(tmp_path / f"w-{epoch}.safetensors"))
    found, _ = sc.list_saved(tmp_path, sc.parse_pattern("w-{step}.safetensors"))
    model = _mlp()
    assert sc.check_all(found, model, "auto", "dir", "state_dict_key") == ["", ""]
    assert sc.load_saved(model, found[1].path, "auto", "dir", "state_dict_key") == ""
    assert torch.equal(model.out.weight, saved["states"][2]["out.weight"])
    wrapped = {1: {"state_dict": saved["states"][1]}, 2: saved["states"][2]}
    net, checkpoints = _in_memory(wrapped, MLP, "auto", None)
    assert [c.load(net) for c in checkpoints.items] == ["state_dict", ""] and checkpoints.unit == "epoch"
