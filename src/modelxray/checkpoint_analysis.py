"""The post-hoc learning-dynamics analysis from Python, on your checkpoints, model class and data.

Why a function beside the CLI: a training script of your own leaves ``model_epoch_3.pth`` files
(or ``{epoch: model}`` in memory), a model class and DataLoaders, none of which a config names as
easily. :func:`analyze_checkpoints` takes them as they are and runs the very replay of
``analyzer=learning_dynamics`` (``run.replay``), so it returns the CLI's result: the same metrics,
tables, insights and data, and with ``output_dir`` the same files (``results/learning_dynamics.json``,
``plots/``)::

    from modelxray import analyze_checkpoints

    result = analyze_checkpoints("checkpoints", "model_epoch_{epoch}.pth", model=MyNet,
                                 train_data=train_loader, test_data=test_loader)
    print(result.metrics["memorization/test_accuracy"], result.insights[0])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from modelxray.core.result import Result
    from modelxray.data.base import ClassificationData

# what the errors of a directory's files name: this function's arguments
KEYS = {"dir": "checkpoints", "pattern": "pattern", "state_dict_key": "state_dict_key"}


def analyze_checkpoints(
    checkpoints: Mapping[int, Any] | str | Path,
    pattern: str | None = None,
    model: Any = None,
    *,
    train_data: Any = None,
    test_data: Any = None,
    dataset: Any = None,
    state_dict_key: str = "auto",
    device: str | None = None,
    output_dir: str | Path | None = None,
    progress: bool = False,
    **keys: Any,
) -> Result:
    """The learning dynamics across ``checkpoints``, as ``analyzer=learning_dynamics`` computes them.

    - ``checkpoints``: a directory of your ``torch.save``d state dicts with ``pattern`` naming them
      (``"model_epoch_{epoch}.pth"``, ``"ckpt-step={step}.pt"``; ``*`` matches anything), or
      ``{epoch: model}`` (models, or state dicts with ``model``). Files are read with
      ``torch.load(weights_only=True)``; ``state_dict_key`` ``"auto"`` unwraps
      ``{"model_state_dict": ...}``, ``{"state_dict": ...}`` and the like, or names the entry.
    - ``model``: the class the state dicts fit: a class or function called without arguments
      (``functools.partial(Net, width=64)`` for arguments), a ``{"_target_": "pkg.Net", ...}``
      mapping (as ``model.architecture`` on the command line), or a module (its architecture).
    - data: ``train_data`` and ``test_data`` (Datasets or DataLoaders of ``(input, label)``,
      read once in dataset order, so a shuffling loader is fine), or ``dataset``: a built-in
      name (``"digits"``), a dataset config (``DigitsNoisy(noise=0.2)``) or a ``ClassificationData``.
    - ``keys``: the analyzer's keys (``lr``, ``batch_size``, ``sections``; defaults as on the CLI).

    Every checkpoint is checked against the model (names and shapes) before any work; a misfit is
    one ``ConfigError`` naming the file (or epoch) and the first tensor that differs. Returns the
    ``Result`` (``metrics``, ``tables``, ``insights``, ``data``); ``output_dir`` also writes its
    files there."""
    from modelxray.analyzers.learning_dynamics.config import CheckpointDynamicsAnalyzer
    from modelxray.analyzers.learning_dynamics.run import replay

    cfg = _analyzer(CheckpointDynamicsAnalyzer, keys)
    data = _data(train_data, test_data, dataset)
    net, found = _checkpoints(checkpoints, pattern, model, state_dict_key, device)
    result = replay(cfg, net, data, found, progress)
    if output_dir is not None:
        from modelxray.report.writer import write_result

        write_result(Path(output_dir), cfg.name, result)
    return result


def _analyzer(cls: type, keys: dict[str, Any]):
    """The analyzer config from keyword keys, an unknown key named in one line."""
    import dataclasses

    known = {f.name for f in dataclasses.fields(cls)} - {"checkpoints"}
    unknown = sorted(set(keys) - known)
    if unknown:
        raise ConfigError(unknown[0], f"is no key of the learning-dynamics analysis; keys: {', '.join(sorted(known))}")
    return cls(**keys)


# ---- checkpoints ------------------------------------------------------------------------------------------
def _checkpoints(checkpoints, pattern, model, state_dict_key: str, device):
    """The model to replay on and the checkpoints, each already checked against it."""
    from modelxray.analyzers.learning_dynamics.checkpoints import saved_checkpoints

    if isinstance(checkpoints, (str, Path)):
        if pattern is None:
            raise ConfigError("pattern", "is needed with a directory: your files' names, e.g. model_epoch_{epoch}.pth")
        if model is None:
            raise ConfigError("model", "is needed with a directory: the class your state dicts fit")
        net = _place(build_model(model), device)
        return net, saved_checkpoints(checkpoints, pattern, state_dict_key, net, True, KEYS)
    if not isinstance(checkpoints, Mapping):
        raise ConfigError("checkpoints", f"must be a directory or {{epoch: model}}, got a {type(checkpoints).__name__}")
    if pattern is not None:
        raise ConfigError("pattern", "names files in a directory; checkpoints is a mapping of epochs")
    return _in_memory(checkpoints, model, state_dict_key, device)


def _in_memory(checkpoints: Mapping, model, state_dict_key: str, device):
    """``{epoch: model}`` or ``{epoch: state dict}``: each checked against the architecture."""
    from functools import partial

    from torch import nn

    from modelxray.analyzers.learning_dynamics.checkpoints import Checkpoint, Checkpoints
    from modelxray.models import saved_checkpoints as sc

    if len(checkpoints) < 2:
        raise ConfigError("checkpoints", f"needs at least two epochs, got {len(checkpoints)}")
    bad = [e for e in checkpoints if isinstance(e, bool) or not isinstance(e, int)]
    if bad:
        raise ConfigError("checkpoints", f"keys are epoch numbers (integers), got {bad[0]!r}")
    given = dict(sorted(checkpoints.items()))
    modules = all(isinstance(v, nn.Module) for v in given.values())
    if model is None and not modules:
        raise ConfigError("model", "is needed for {epoch: state dict}: the class the state dicts fit")
    net = _place(build_model(model) if model is not None else next(iter(given.values())), device)
    expected, name = sc.shapes_of(net), sc.model_name(net)
    states = {}
    for epoch, value in given.items():
        what = f"checkpoints[{epoch}]"
        if isinstance(value, nn.Module):
            state, entry = value.state_dict(), ""
        else:
            state, entry = sc.unwrap(value, state_dict_key, what, "state_dict_key")
        sc.check_fits(state, expected, what, name, "checkpoints")
        states[epoch] = (state, entry)

    def load(epoch: int, target: nn.Module) -> str:
        state, entry = states[epoch]
        target.load_state_dict(state, strict=True)
        return entry

    items = [Checkpoint(e, f"epoch {e}", partial(load, e)) for e in given]
    return net, Checkpoints(items, "epoch", "models in memory")


def build_model(model: Any) -> nn.Module:
    """Your model from a class or function (called without arguments), a ``{"_target_": ...}``
    mapping (built as ``model=file model.architecture`` builds it), or a module itself. Built
    with torch's random state set aside: the checkpoints replace the initial weights anyway."""
    import torch
    from torch import nn

    if isinstance(model, nn.Module):
        return model
    with torch.random.fork_rng(devices=[]):
        if isinstance(model, Mapping):
            if "_target_" not in model:
                raise ConfigError(
                    "model", f"a mapping needs _target_ (the class), got keys {', '.join(map(str, model))}"
                )
            return _from_target(dict(model))
        if not isinstance(model, Callable):
            raise ConfigError(
                "model", f"must be a class, a function, a {{_target_: ...}} mapping or a module, got {model!r}"
            )
        try:
            built = model()
        except TypeError as exc:
            raise ConfigError(
                "model",
                f"{getattr(model, '__name__', model)}() failed ({exc}); pass functools.partial(Class, ...) "
                "or {'_target_': 'pkg.Class', ...} with its arguments",
            ) from None
    if not isinstance(built, nn.Module):
        raise ConfigError(
            "model", f"{getattr(model, '__name__', model)}() returned a {type(built).__name__}, not a module"
        )
    return built


def _from_target(arch: dict) -> nn.Module:
    """``{_target_: ...}`` through the builder of ``model=file``, its errors named by this argument."""
    from types import SimpleNamespace

    from modelxray.models.file_load import _build_target

    try:
        return _build_target(SimpleNamespace(architecture=arch))
    except ConfigError as exc:
        raise ConfigError("model", exc.message) from None


def _place(net: nn.Module, device: str | None) -> nn.Module:
    """``net`` on ``device`` (a copy: a module you passed stays where it is)."""
    import copy

    return copy.deepcopy(net).to(device) if device is not None else net


# ---- data ---------------------------------------------------------------------------------------------------
def _data(train_data, test_data, dataset) -> ClassificationData:
    """Your train/test data, or a dataset, as the ``ClassificationData`` the analysis walks."""
    from modelxray.data.base import ClassificationData

    if dataset is not None:
        if train_data is not None or test_data is not None:
            raise ConfigError("dataset", "give either dataset or train_data and test_data, not both")
        return _dataset(dataset)
    if train_data is None or test_data is None:
        missing = "train_data" if train_data is None else "test_data"
        raise ConfigError(
            missing,
            "is needed: train_data and test_data (Datasets or DataLoaders of (input, label)), or dataset='digits'",
        )
    from modelxray.learning_dynamics.loaders import dataset_tensors

    x_train, y_train = dataset_tensors(train_data, "train_data")
    x_test, y_test = dataset_tensors(test_data, "test_data")
    if tuple(x_train.shape[1:]) != tuple(x_test.shape[1:]):
        raise ConfigError(
            "test_data", f"inputs are {tuple(x_test.shape[1:])}, train_data's {tuple(x_train.shape[1:])}: one shape"
        )
    x_train, x_test = x_train.float(), x_test.float()
    lo = float(min(x_train.min(), x_test.min()))
    hi = float(max(x_train.max(), x_test.max()))
    return ClassificationData(
        name="your data",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        n_classes=int(max(y_train.max(), y_test.max())) + 1,
        feature_range=(lo, hi),
        input_shape=tuple(x_train.shape[1:]),
        meta={"source": "train_data / test_data"},
    )


def _dataset(dataset) -> ClassificationData:
    """A built-in dataset by name (its defaults), a dataset config, or ``ClassificationData``."""
    from modelxray.data.base import ClassificationData

    if isinstance(dataset, ClassificationData):
        return dataset
    if isinstance(dataset, str):
        from modelxray.core.schema import SCHEMA, load_class

        options = SCHEMA["dataset"]
        if dataset not in options:
            raise ConfigError("dataset", f"unknown dataset {dataset!r}; built-in: {', '.join(sorted(options))}")
        dataset = load_class(options[dataset])()
    loaded = dataset.load() if hasattr(dataset, "load") else dataset
    if not isinstance(loaded, ClassificationData):
        raise ConfigError(
            "dataset",
            f"{getattr(dataset, 'name', dataset)!r} is no labelled classification data; e.g. dataset='digits'",
        )
    return loaded
