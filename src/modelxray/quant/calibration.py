"""Drive a model's stacks of transformer blocks on calibration data (what GPTQ and AWQ need).

The inputs of a stack's first block are caught with a forward pre-hook that stops the forward pass
(the "catcher" trick of the GPTQ reference code), keeping the other arguments the model passes to
its blocks (attention mask, rotary position embeddings, ...). Each block then runs on those
inputs, and its outputs feed the next block, so a block is calibrated on what the
already-quantized blocks before it produce.

A model may hold several stacks: a language model's decoder layers or a ViT's encoder layers are
one; a CLIP-style dual encoder has two, its text tower and its vision tower, and the zero-shot
classifier runs both in every forward (the text tower on the class prompts). Each stack is driven
in turn. Block inputs that repeat exactly from one batch to the next (the class prompts' hidden
states) are kept once. Linear layers outside every stack (a classifier head, a dual encoder's
projections) see the calibration batches through a forward of the whole model (``ModelInputs``).

Calibration data comes from the run (``subject_calibration``): a language model's windows after the
evaluated span, a classifier's training examples (a seeded draw from the train split, fed as
the performance analyzer feeds test examples: in the dtype of the model's weights), or a text
model's examples of its own task that are not evaluated (masked windows, denoising pairs,
paragraphs; an encoder-decoder's two stacks are each driven in turn); or from the
caller of ``modelxray.quantize`` (``as_calibration``: token ids or float inputs).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from modelxray.core.errors import ConfigError
from modelxray.kinds.base import Kind, choose
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.classifier import Classifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import kind_of
from modelxray.measure.classifier_reference import input_dtype
from modelxray.measure.scoring import forward_logits, model_device
from modelxray.metrics.windows import NamedTensors
from modelxray.models.block_inputs import block_call
from modelxray.quant.targets import _is_conv1d


class _Caught(Exception):
    pass


def _holds_linear(module: nn.Module) -> bool:
    return any(isinstance(m, nn.Linear) or _is_conv1d(m) for m in module.modules())


def _is_block(module: nn.Module) -> bool:
    """A block of layers (not a bare Linear) holding at least one Linear layer."""
    return not (isinstance(module, nn.Linear) or _is_conv1d(module)) and _holds_linear(module)


def block_stacks(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    """Every outermost ModuleList of blocks holding Linear layers, in model order: a language model's
    decoder layers (``model.layers``, ``transformer.h``), a ViT's encoder layers, both towers of a
    dual encoder. Lists nested in a block (a mixture of experts) belong to that block."""
    found: list[tuple[str, nn.ModuleList]] = []
    for name, module in model.named_modules():
        if not (isinstance(module, nn.ModuleList) and len(module) > 0 and _is_block(module[0])):
            continue
        if not any(name.startswith(f"{outer}.") for outer, _ in found):
            found.append((name, module))
    if not found:
        raise ConfigError(
            "quant",
            "calibration-based quantization needs a model made of repeated blocks "
            "(a ModuleList of layers); use an RTN config (quant=int4) for this model",
        )
    return found


@dataclass
class Calibration:
    """What to calibrate on, in chunks, and what it is (for the report): token ids (rows, seq_len)
    of a language model, or float inputs (rows, *input_shape) of a classifier."""

    chunks: list[torch.Tensor]
    origin: str  # e.g. "windows after the evaluated span"
    progress: bool = True  # show the quantizer's progress bar (the run's ``progress`` key)

    @property
    def kind(self) -> str:
        if isinstance(self.chunks[0], NamedTensors):
            return "named"  # a text model's named inputs (masked ids, source and decoder ids)
        return "tokens" if self.takes_tokens else "examples"

    @property
    def takes_tokens(self) -> bool:
        """Token ids or named inputs, which go through the model as a language model takes them."""
        return isinstance(self.chunks[0], NamedTensors) or not self.chunks[0].is_floating_point()

    @property
    def n_rows(self) -> int:
        return sum(c.shape[0] for c in self.chunks)

    def batches(self, batch_size: int) -> Iterator[torch.Tensor]:
        for chunk in self.chunks:
            for start in range(0, chunk.shape[0], batch_size):
                yield chunk[start : start + batch_size]

    def n_batches(self, batch_size: int) -> int:
        return sum(-(-c.shape[0] // batch_size) for c in self.chunks)

    def forward(self, model: nn.Module, batch: torch.Tensor) -> Any:
        """One forward of ``model`` on a batch: token ids as a language model takes them (no KV
        cache), float inputs as a classifier takes them (on its device, in its weights' dtype)."""
        if self.takes_tokens:
            return forward_logits(model, batch.to(model_device(model)))
        return model(batch.to(device=model_device(model), dtype=input_dtype(model)))


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


class BlockInputs:
    """Per calibration batch: the hidden states entering the current block of one stack and the other
    arguments the model passes to its blocks. A batch whose inputs repeat the first batch's exactly
    (a dual encoder's class prompts, the same in every forward) is kept once (``repeated`` counts them)."""

    def __init__(self, model: nn.Module, blocks: nn.ModuleList, calibration: Calibration, batch_size: int):
        self.hidden: list[torch.Tensor] = []
        self.args: list[tuple] = []
        self.kwargs: list[dict[str, Any]] = []
        self.repeated = 0

        def catch(_module, args, kwargs):
            hidden, rest, kwargs = block_call(args, kwargs)  # no KV cache: it would grow at every replay
            hidden = hidden.detach()
            if self.hidden and _same(hidden, self.hidden[0]):
                self.repeated += 1
            else:
                self.hidden.append(hidden)
                self.args.append(rest)
                self.kwargs.append(kwargs)
            raise _Caught

        handle = blocks[0].register_forward_pre_hook(catch, with_kwargs=True)
        try:
            with torch.inference_mode():
                for batch in calibration.batches(batch_size):
                    try:
                        calibration.forward(model, batch)
                    except _Caught:
                        pass
        finally:
            handle.remove()

    @classmethod
    def caught(cls, caught: list[tuple[torch.Tensor, tuple, dict[str, Any]]]) -> BlockInputs:
        """Inputs of a stack's first block caught elsewhere (a model streamed block by block catches
        them while it reads its embeddings): ``(hidden, other positional arguments, keyword arguments)``."""
        inputs = cls.__new__(cls)
        inputs.hidden = [h for h, _, _ in caught]
        inputs.args = [a for _, a, _ in caught]
        inputs.kwargs = [k for _, _, k in caught]
        inputs.repeated = 0
        return inputs

    def __iter__(self) -> Iterator[tuple[torch.Tensor, tuple, dict[str, Any]]]:
        return iter(zip(self.hidden, self.args, self.kwargs))

    @property
    def n_batches(self) -> int:
        return len(self.hidden)

    @property
    def n_tokens(self) -> int:
        """Rows of hidden states (tokens, or patches and class tokens of an image) per pass over the batches."""
        return sum(h.numel() // h.shape[-1] for h in self.hidden)

    def observe(self, block: nn.Module, layer_targets, fn) -> None:
        """Run ``block`` on every batch and call ``fn(name, x, raw)`` with each target layer's input
        (``x`` flattened to (tokens, features) in float32, ``raw`` as the layer received it)."""
        with _observing(layer_targets, fn):
            self.run(block, update=False)

    def run(self, block: nn.Module, update: bool) -> None:
        """Run ``block`` on every batch; with ``update`` its outputs become the next block's inputs."""
        with torch.inference_mode():
            for i, (hidden, args, kwargs) in enumerate(self):
                out = block(hidden, *args, **kwargs)
                out = out[0] if isinstance(out, (tuple, list)) else out
                if update:
                    self.hidden[i] = out.detach()


def is_chain(model: nn.Module, blocks: nn.ModuleList, calibration: Calibration, batch_size: int) -> bool:
    """Whether each block of ``blocks`` reads the output of the one before, on the first calibration
    batch: a decoder's layers do; parallel heads that each read their own input (SegFormer's decode
    head, RT-DETR's box heads) do not, even where the shapes happen to fit. Blocks the forward never
    runs are not judged."""
    seen_in: dict[int, torch.Tensor] = {}
    seen_out: dict[int, torch.Tensor] = {}
    handles = []
    for i, block in enumerate(blocks):

        def before(_m, args, kwargs, i=i):
            hidden = args[0] if args else kwargs.get("hidden_states")
            if i not in seen_in and isinstance(hidden, torch.Tensor):
                seen_in[i] = hidden.detach()

        def after(_m, _args, out, i=i):
            out = out[0] if isinstance(out, (tuple, list)) else out
            if i not in seen_out and isinstance(out, torch.Tensor):
                seen_out[i] = out.detach()

        handles.append(block.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(block.register_forward_hook(after))
    try:
        with torch.inference_mode():
            calibration.forward(model, next(calibration.batches(batch_size)))
    finally:
        for h in handles:
            h.remove()
    pairs = [(seen_out[i], seen_in[i + 1]) for i in range(len(blocks) - 1) if i in seen_out and i + 1 in seen_in]
    return all(a.shape == b.shape and torch.equal(a, b) for a, b in pairs)


class ModelInputs:
    """The calibration batches through a forward of the whole model: the inputs of Linear layers
    outside every stack of blocks (a classifier head, a dual encoder's projections), as the model
    quantized so far produces them. Same ``observe`` as ``BlockInputs``; the block is the model."""

    def __init__(self, model: nn.Module, calibration: Calibration, batch_size: int):
        self.model, self.calibration, self.batch_size = model, calibration, batch_size
        self.n_batches = calibration.n_batches(batch_size)

    def observe(self, _block: nn.Module, layer_targets, fn) -> None:
        with _observing(layer_targets, fn), torch.inference_mode():
            for batch in self.calibration.batches(self.batch_size):
                self.calibration.forward(self.model, batch)


class _RoutedExpertInputs(TorchFunctionMode):
    """Each expert of a fused-experts tensor sees only the tokens its router sends it: a MoE layer's
    forward multiplies those tokens by the expert's slice of the tensor (``F.linear(x, w[e])``, or
    ``x @ w[e]`` where experts are stored transposed). This mode sees those calls and hands ``x`` to
    ``fn`` under the expert's target name, so GPTQ and AWQ calibrate each expert on its own tokens."""

    MATMULS = (torch.nn.functional.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)

    def __init__(self, by_weight: dict[tuple, str], fn) -> None:
        super().__init__()
        self.by_weight, self.fn = by_weight, fn

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.MATMULS and len(args) >= 2 and isinstance(args[1], torch.Tensor):
            name = self.by_weight.get((args[1].data_ptr(), tuple(args[1].shape)))
            if name is not None and args[0].numel():
                raw = args[0].detach()
                self.fn(name, raw.reshape(-1, raw.shape[-1]).float(), raw)
        return func(*args, **(kwargs or {}))


@contextmanager
def _observing(layer_targets, fn) -> Iterator[None]:
    """Forward hooks calling ``fn(name, x, raw)`` with each target layer's input, for the ``with``
    body; each expert of a fused-experts tensor through ``_RoutedExpertInputs``."""
    handles = []
    experts = {}
    for t in layer_targets:
        if t.expert is not None:
            w = t.tensor()[t.expert]  # the slice the MoE layer's forward multiplies by
            experts[(w.data_ptr(), tuple(w.shape))] = t.name
            continue

        def hook(_m, args, _out, name=t.name):
            raw = args[0].detach()
            fn(name, raw.reshape(-1, raw.shape[-1]).float(), raw)

        handles.append(t.module.register_forward_hook(hook))
    modules = {t.module for t in layer_targets if t.expert is not None}
    try:
        with _eager_experts(modules), _RoutedExpertInputs(experts, fn) if experts else nullcontext():
            yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def _eager_experts(modules) -> Iterator[None]:
    """transformers runs a MoE layer's experts through a grouped kernel by default (one matmul over
    every expert's tokens at once); its eager forward, the same computation expert by expert, is the
    one whose per-expert calls ``_RoutedExpertInputs`` sees. Restored after."""
    configs = [m.config for m in modules if hasattr(getattr(m, "config", None), "_experts_implementation")]
    before = [c._experts_implementation for c in configs]
    for c in configs:
        c._experts_implementation = "eager"
    try:
        yield
    finally:
        for c, value in zip(configs, before):
            c._experts_implementation = value


def calibration_windows(subject) -> torch.Tensor:
    data = subject.data
    kind = kind_of(subject)
    if not isinstance(kind, CausalLM):
        raise ConfigError(
            "quant",
            f"calibration-based quantization (GPTQ, AWQ) calibrates on a language model's token windows or a "
            f"classifier's training examples; {subject.info.name} is a {kind.task} model: use RTN, e.g. quant=int4",
        )
    if data is None or data.calibration is None or data.calibration.shape[0] == 0:
        raise ConfigError(
            "dataset.calibration_windows",
            "no calibration windows: the dataset has no tokens after "
            "the evaluated span; lower dataset.max_tokens or raise dataset.calibration_windows",
        )
    return data.calibration


def example_calibration(data, n: int, seed: int, method: str) -> Calibration:
    """``n`` training examples drawn without replacement (seeded; all when the split holds fewer):
    the examples a classifier is calibrated on, never its evaluated test split."""
    x = getattr(data, "x_train", None)
    if x is None:
        raise ConfigError(
            "quant",
            f"{method} calibrates a classifier on its dataset's training examples, and this run has no dataset "
            "(a user DataLoader); quantize with modelxray.quantize(model, ..., calibration=inputs), or use quant=int4",
        )
    if x.shape[0] == 0:
        raise ConfigError(
            "quant",
            f"{method} calibrates a classifier on its training examples, and {data.name} has no training split "
            "(every example is evaluated); use an RTN config such as quant=int4",
        )
    idx = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(seed))[: min(n, x.shape[0])]
    what = "images" if data.meta.get("image_shape") else "examples"
    return Calibration([x[idx]], f"{what} drawn from the {data.name} training split of {x.shape[0]:,}, seed {seed}")


def task_calibration(subject, method: str) -> Calibration:
    """An encoder's, seq2seq model's or text classifier's calibration: examples of its own task that
    are never evaluated (``TaskData.calibration``), batched by shape."""
    from modelxray.metrics.windows import batched

    data = subject.data
    found = data.calibration_examples() if hasattr(data, "calibration_examples") else None
    windows, origin = found or (None, "")
    if not windows:
        what = "a text dataset (spoken for a speech model)"
        raise ConfigError(
            "quant",
            f"{method} calibrates a {kind_of(subject).task} model on examples of its task built from {what} beside the "
            f"evaluated ones, and {getattr(data, 'name', 'this run')} gives none; use an RTN config such as quant=int4",
        )
    chunks = [inputs for inputs, _ in batched(windows, len(windows))]
    return Calibration(chunks, origin)


def canvas_calibration(subject, quantizer) -> Calibration:
    """A detector's, segmenter's or backbone's calibration: the images its dataset held out of the
    scoring (a user folder's ``calibration_images``), else ``calibration_examples`` digit canvases of
    its input size built from the digits train split (the evaluated canvases use the test split)."""
    import dataclasses

    from modelxray.data.digit_canvases import DigitCanvases

    held = getattr(subject.data, "calibration", None)
    if held is not None and len(held):
        return Calibration([held], f"images of {subject.data.name} held out of the scoring")
    images = subject.data.images
    spec = DigitCanvases(examples=quantizer.calibration_examples, seed=quantizer.seed)
    spec = dataclasses.replace(spec, **{k: v for k, v in subject.data.meta.get("split", {}).items()})
    data = spec.load(canvas_size=int(images.shape[-1]), channels=int(images.shape[1]), part="train")
    return Calibration([data.images], f"digit canvases from the digits train split, seed {quantizer.seed}")


def subject_calibration(subject, quantizer) -> Calibration:
    """The run's calibration data: a classifier's training examples (``quant.calibration_examples``,
    seeded by ``quant.seed``), a text model's examples of its task that are not evaluated, else the
    dataset's token windows after the evaluated span."""
    calibrate = choose(kind_of(subject), CALIBRATION, "quant", "calibrates models")
    return calibrate(subject, quantizer)


# each kind's calibration data (the most specific class of a kind wins): any other kind (an encoder,
# a seq2seq model, a text classifier, a speech model) is calibrated on examples of its own task
CALIBRATION = {
    CausalLM: lambda subject, q: Calibration([calibration_windows(subject)], "windows after the evaluated span"),
    Classifier: lambda subject, q: example_calibration(subject.data, q.calibration_examples, q.seed, q.name),
    LabelledImagesKind: canvas_calibration,
    Kind: lambda subject, q: task_calibration(subject, q.name),
}


def as_calibration(data: Any, method: str) -> Calibration:
    """The ``calibration=`` of ``modelxray.quantize``: token ids (a LongTensor [batch, seq]) for a language
    model or float inputs [batch, *input_shape] for a classifier; a tensor, a list of them, or a
    DataLoader yielding them (or mappings with ``input_ids`` / ``pixel_values``, or (inputs, labels) pairs)."""
    if data is None:
        raise ConfigError(
            "calibration",
            f"{method} calibrates on token ids (a language model) or float inputs (a classifier): pass "
            "calibration= a LongTensor [batch, seq] or a float tensor [batch, *input_shape], a list of them "
            "or a DataLoader yielding them",
        )
    items = [data] if isinstance(data, (torch.Tensor, Mapping)) else list(data)
    chunks = [_calibration_batch(item, i) for i, item in enumerate(items)]
    if not chunks or sum(c.shape[0] for c in chunks) == 0:
        raise ConfigError("calibration", f"is empty: {method} needs at least one sequence of token ids or input")
    if len({c.is_floating_point() for c in chunks}) > 1:
        raise ConfigError("calibration", "mixes token ids and float inputs; give one kind")
    return Calibration(chunks, "calibration sequences" if not chunks[0].is_floating_point() else "calibration inputs")


def _calibration_batch(item: Any, index: int) -> torch.Tensor:
    if isinstance(item, Mapping):
        item = item["input_ids"] if "input_ids" in item else item.get("pixel_values")
        if item is None:
            raise ConfigError("calibration", f"batch {index}: a mapping needs input_ids or pixel_values")
    elif isinstance(item, (tuple, list)) and item and isinstance(item[0], torch.Tensor):
        item = item[0]  # (inputs, labels) from a classifier's DataLoader
    t = torch.as_tensor(item)
    if t.is_floating_point() and t.dim() >= 2:
        return t
    if t.dim() == 1:
        t = t.unsqueeze(0)
    if t.dim() != 2 or t.is_floating_point() or t.dtype == torch.bool:
        raise ConfigError(
            "calibration",
            f"batch {index}: expected integer token ids of shape [batch, seq] or float inputs [batch, ...], "
            f"got {t.dtype} {tuple(t.shape)}",
        )
    return t.long()
