"""The input the inspect analyzer runs the model on: declared (``inputs``, ``input_shape``), a
generic model's own example inputs, a task's first example, or inferred from the model and data
(``models/input_inference.py``). Shared by its config's check before any work and by its run."""

from __future__ import annotations

from modelxray.core.errors import ConfigError
from modelxray.data.example_inputs import normalize_inputs
from modelxray.models.architecture import describe
from modelxray.models.input_inference import infer_input
from modelxray.models.weights_file import WeightsFile


def input_spec(cfg, subject):
    """The model's architecture with the input it takes (``models/input_inference.py``: config, dataset,
    model, in that order); ``None`` for a weights-only file. Raises ``ConfigError`` naming
    ``analyzer.inspect.input_shape`` (or ``inputs`` for a model that takes several tensors) when
    compute is on and no input can be inferred."""
    if isinstance(subject.model, WeightsFile):
        return None
    arch = describe(subject.model)
    given = given_inputs(cfg, subject)
    data = subject.data
    data_shape = getattr(data, "input_shape", None)
    seq_len = cfg.seq_len or getattr(data, "seq_len", None)
    arch.input = infer_input(
        subject.model,
        batch_size=cfg.batch_size,
        seq_len=seq_len,
        input_shape=cfg.input_shape,
        data_shape=tuple(data_shape) if data_shape is not None else None,
        data_name=getattr(data, "name", None),
        inputs=normalize_inputs(cfg.inputs) if cfg.inputs else (given.spec if given is not None else None),
        kind=arch.kind,
        key="analyzer.inspect.inputs" if given is None else "model.inputs",
    )
    if given is not None:
        arch.input["source"] = given.source
    if cfg.compute and arch.input.get("shape") is None:
        raise ConfigError(arch.input.get("key", "analyzer.inspect.input_shape"), arch.input["message"])
    return arch


def given_inputs(cfg, subject):
    """A generic model's example inputs (``model.inputs``), unless ``analyzer.inspect`` sets its own."""
    from modelxray.data.example_inputs import ExampleInputs

    own = cfg.inputs or cfg.input_shape
    if hasattr(subject.data, "windows") and not own:  # a text or speech task: one of its own examples
        from modelxray.measure.task_outputs import example_batch

        batch = dict(example_batch(subject, cfg.batch_size))
        desc = ", ".join(f"{n} {list(t.shape)}" for n, t in batch.items())
        return ExampleInputs(batch, f"{subject.data.name} (its first example)", desc)
    if hasattr(subject.data, "images") and not own:  # a detector, segmenter or backbone: its first images
        images = subject.data.images[: cfg.batch_size]
        return ExampleInputs({"x": images}, f"{subject.data.name} (its first images)", f"x {list(images.shape)}")
    return subject.data if isinstance(subject.data, ExampleInputs) and not own else None
