"""The subject of a run: the configured model (through the process cache) or the user's module,
with the data it scores: the user's batches, the configured dataset fitted to the model (images
resized, a dual encoder bound to the class prompts), or a generic model's example inputs."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from omegaconf import DictConfig

from modelxray.core.errors import ConfigError
from modelxray.core.subject import LoadedModel, ModelInfo, Subject
from modelxray.kinds.image_classification import ImageClassifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import kind_of, kind_of_architecture
from modelxray.kinds.windows import WindowsKind
from modelxray.models import process_cache
from modelxray.models.optional_imports import optional_libraries_on_use


def _in_memory(
    model: torch.nn.Module,
    tokenizer: Any,
    image_shape: tuple | None = None,
    example_inputs: Any = None,
    processor: Any = None,
) -> LoadedModel:
    """A user's module: a language model (with a tokenizer or token batches), an image classifier
    (``image_shape``), a generic module (``example_inputs``: name -> tensor or shape), or a
    transformers encoder, seq2seq, speech, vision-language model, detector, segmenter or backbone (its
    kind from its class; with its feature extractor, processor or image processor: ``processor``)."""
    dtypes = {str(p.dtype).replace("torch.", "") for p in model.parameters()}
    info = ModelInfo(name=type(model).__name__, source_format="in-memory", source_dtype=",".join(sorted(dtypes)))
    kind = kind_of_architecture(type(model).__name__) if hasattr(model, "config") else None
    by_class = kind is not None and image_shape is None and example_inputs is None
    if by_class and kind.needs_processor and processor is None:
        raise ConfigError(
            "processor", f"{info.name} is {kind.a_noun()}: pass its {kind.needs_processor} (processor=...)"
        )
    if by_class and isinstance(kind, WindowsKind):
        if tokenizer is None:  # a vision-language model's processor holds its tokenizer
            tokenizer = getattr(processor, "tokenizer", None)
        return LoadedModel(model.eval(), tokenizer, info, task=kind.task, kind=kind, processor=processor)
    if by_class and isinstance(kind, LabelledImagesKind):
        from modelxray.models.hf_vision_tasks import settings_of, wrap_vision_task

        loaded = wrap_vision_task(model, kind, settings_of(processor), processor, None, info.name)
        loaded.model, loaded.task, loaded.info = loaded.model.eval(), kind.task, info
        return loaded
    if isinstance(kind, ImageClassifier) and example_inputs is None:
        return _pixel_classifier(model, image_shape, processor, info)
    if image_shape is not None:
        return LoadedModel(model.eval(), None, info, task="classification", image_shape=tuple(image_shape))
    if example_inputs is not None:
        from modelxray.models.generic import example_inputs_for

        given = example_inputs_for(model, example_inputs, key="example_inputs")
        return LoadedModel(model.eval(), None, info, task="generic", example_inputs=given)
    return LoadedModel(model.eval(), tokenizer, info)


def _pixel_classifier(model: torch.nn.Module, image_shape: Any, processor: Any, info: ModelInfo) -> LoadedModel:
    """A transformers image classifier as ``pixels -> logits`` (``models.hf_vision.PixelClassifier``):
    its input shape from ``image_shape``, else its config or ``processor``; the processor's
    normalisation applied inside, to pixels in [0, 1] (without a processor, pixels are fed as given)."""
    from modelxray.models.hf_vision import PixelClassifier, image_shape_of, normalisation
    from modelxray.models.hf_vision_tasks import settings_of

    settings = settings_of(processor)
    if image_shape is not None:
        shape = tuple(int(d) for d in image_shape)
    else:
        try:
            shape = image_shape_of(model.config, settings, None, info.name)
        except ConfigError:
            raise ConfigError(
                "image_shape",
                f"{info.name} is an image classifier whose config names no image size: "
                "pass image_shape=(C, H, W) or its image processor (processor=...)",
            ) from None
    if processor is not None:
        mean, std, notes = normalisation(settings, shape[0])
    else:
        mean, std, notes = [0.0] * shape[0], [1.0] * shape[0], []
    info.notes.extend(notes)
    wrapped = PixelClassifier(model.eval(), mean, std, shape).eval()
    return LoadedModel(wrapped, None, info, task="classification", image_shape=shape, processor=processor)


def defer_optional_libraries(components: Any, model_given: bool) -> None:
    """Before anything of the run imports transformers' model code (the tokenizer checked before the
    weights load, a reference model, the model itself), its optional libraries are set to import on
    first use (``models.optional_imports``); a run whose models are plain torch modules skips both."""
    sources = [components.model, getattr(components, "reference", None)]
    if model_given or any(s is not None and s.builds_with_transformers for s in sources):
        optional_libraries_on_use()


def load_subject(
    cfg: DictConfig,
    components,
    *,
    model: torch.nn.Module | None = None,
    tokenizer: Any = None,
    batches: Any = None,
    image_shape: tuple | None = None,
    example_inputs: Any = None,
    processor: Any = None,
    load_dataset: bool = True,
    cache_size: int | None = None,
    dataset_chosen: bool = True,
    offload: Any = None,
) -> tuple[Subject, str | None]:
    """The model under analysis with its data: the configured model (through the process cache:
    returns ``"hit"`` or ``"miss"``) or the given module, on the user's batches, else the configured
    dataset fitted to the model (images resized, a dual encoder bound to the class prompts), else a
    generic model's example inputs. ``offload``: the run's ``app.offload.OffloadChoice``; with
    ``blocks`` the model is built on the meta device and streamed from disk by the analyzers."""
    defer_optional_libraries(components, model is not None)  # hqq, torchao and scipy load when a run uses them
    cache = None
    if model is None and offload is not None and offload.mode == "blocks":
        loaded = process_cache.load_streamed(components.model, offload.hidden_budget(), offload.reason)
    elif model is None:
        capacity = cfg.model_cache_size if cache_size is None else cache_size  # 0: not kept after the call
        loaded, hit = process_cache.lookup(components.model, capacity)
        cache = "hit" if hit else "miss"
    else:
        loaded = _in_memory(model, tokenizer, image_shape, example_inputs, processor)
    kind = kind_of(loaded)
    needs_data = load_dataset and batches is None and components.dataset is not None and kind.reads_dataset
    stands_in = kind.default_dataset(components.dataset) if needs_data and not dataset_chosen else None
    if stands_in is not None:  # no dataset= given: e.g. an image classifier is scored on its kind's offline data
        components = dataclasses.replace(components, dataset=stands_in[0])
        info = dataclasses.replace(loaded.info, notes=[*loaded.info.notes, stands_in[1]])
        loaded = dataclasses.replace(loaded, info=info)
    if needs_data:
        kind.check_dataset(components.dataset, loaded)
    if needs_data and kind.needs_tokenizer and loaded.tokenizer is None:
        raise ConfigError("tokenizer", f"{loaded.info.name} is a {kind} model: pass its tokenizer (tokenizer=...)")
    data = kind.examples_for(components.dataset, loaded, bool(cfg.get("progress", False))) if needs_data else None
    if batches is not None:
        kind_data, batches = user_batches(loaded, batches)
        data = kind_data if kind_data is not None else data
    if data is not None and loaded.image_shape is not None:
        data = _fit_images(data, loaded)
        loaded = _bind_class_prompts(data, loaded)
    if loaded.example_inputs is not None:  # a generic model: its own named inputs
        data = _keyed_inputs(loaded)
    subject = Subject(
        loaded.model,
        loaded.tokenizer,
        data,
        loaded.info,
        task=kind.task,
        batches=batches,
        kind=kind,
        processor=loaded.processor,
        load_memory=loaded.load_memory,
        stream=loaded.stream,
    )
    return subject, cache


def user_batches(loaded: Any, batches: Any, key: str = "dataloader", image_shape: Any = None) -> tuple[Any, Any]:
    """A user's DataLoader as (data, batches): the examples of a kind that reads it so
    (``data_from_batches``), else a language model's token batches read once into a list (an
    iterable loader yields its batches a single time; every analyzer reads them) in one shape and
    checked against the model's vocabulary, else the batches as they come (a generic module). A batch
    of a shape no analyzer can read is a one-line ConfigError here, before any analyzer runs.
    ``image_shape``: an image classifier's input where ``loaded`` does not say it (a Subject)."""
    data = data_from_batches(loaded, batches, key, image_shape)
    if data is not None:
        return data, None
    if kind_of(loaded).reads_token_batches:
        from modelxray.metrics.token_batches import token_batch

        read = [token_batch(b, key) for b in yielded(batches, key)]
        if not read:
            raise ConfigError(key, "yields no batches")
        _check_tokens(read, loaded.model, key)
        return None, [{"input_ids": b.ids, "attention_mask": b.mask, "labels": b.labels} for b in read]
    return None, batches


def yielded(batches: Any, key: str = "dataloader"):
    """The batches of a user's loader, as they come; rows of different lengths that its collate
    could not stack are one line saying so (not torch's traceback from inside the DataLoader)."""
    it = iter(batches)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except RuntimeError as exc:
            if "equal size" not in str(exc):
                raise
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(
                key,
                f"could not stack a batch ({first}); rows of different lengths need a collate_fn that pads them "
                "(transformers' DataCollatorWithPadding or DataCollatorForLanguageModeling) or batch_size=1",
            ) from None
        yield batch


def _check_tokens(read: list, model: Any, key: str) -> None:
    """Token ids the model has embeddings for, and a row of two or more tokens to score."""
    kept = torch.cat([b.ids[b.mask] for b in read])
    lo, hi = (int(kept.min()), int(kept.max())) if kept.numel() else (0, 0)
    vocab = _vocab_size(model)
    if lo < 0 or (vocab is not None and hi >= vocab):
        embeds = f"embeds ids 0..{vocab - 1}" if vocab is not None else "embeds no negative id"
        raise ConfigError(
            key,
            f"yields token id {lo if lo < 0 else hi} (where no attention mask says padding); {type(model).__name__} "
            f"{embeds}: mark padding with attention_mask 0 (labels take -100, input ids never)",
        )
    if not any(int(m.sum()) >= 2 for b in read for m in b.mask):
        raise ConfigError(key, "yields no sequence of two or more tokens: nothing a language model can be scored on")


def _vocab_size(model: Any) -> int | None:
    embeddings = getattr(model, "get_input_embeddings", None)
    try:
        table = embeddings() if callable(embeddings) else None
    except (AttributeError, NotImplementedError):
        table = None
    if table is not None and hasattr(table, "num_embeddings"):
        return int(table.num_embeddings)
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(size) if size else None


def data_from_batches(loaded: Any, batches: Any, key: str = "dataloader", image_shape: Any = None) -> Any:
    """A user's DataLoader as the data a model's analyzers score, as its kind reads it (a text, speech
    or vision-language model's batches as windows, a detector's as labelled images, a classifier's
    as its split); None for a language model or a generic module, which read batches as they come."""
    return kind_of(loaded).data_from_batches(loaded, yielded(batches, key), key, image_shape)


def _keyed_inputs(loaded: LoadedModel) -> Any:
    """A generic model's example inputs keyed by the names its ``forward`` takes (declared names
    that are not its parameter names go onto its positional arguments, in order)."""
    from modelxray.data.example_inputs import ExampleInputs
    from modelxray.models.input_inference import infer_input

    given = loaded.example_inputs
    spec = infer_input(
        loaded.model, batch_size=1, seq_len=None, input_shape=None, inputs=given.spec, key="model.inputs"
    )
    tensors = dict(zip(spec["arguments"], given.tensors.values()))
    how = "by keyword" if spec["call"] == "keyword" else f"onto forward({', '.join(spec['arguments'])}) in order"
    return ExampleInputs(tensors, given.source, f"{given.description}, passed {how}", meta={"call": spec["call"]})


def _fit_images(data: Any, loaded: LoadedModel) -> Any:
    """Images resized to what an image model expects, and a class count its head can score."""
    from modelxray.data.base import ClassificationData
    from modelxray.data.images import fit_images, match_labels

    if not isinstance(data, ClassificationData):
        return data  # check_task names the datasets that fit
    if _is_zero_shot(loaded):  # no head: it scores whatever classes the dataset names (its own input layer)
        return fit_images(data, loaded.image_shape, loaded.info.name)
    flat = _takes_flat(loaded.model, data)
    config = getattr(loaded.model, "config", None)
    data = match_labels(data, getattr(config, "label2id", None), loaded.info.name)
    labels = getattr(config, "num_labels", None)
    if labels is not None and labels < data.n_classes:
        raise ConfigError(
            "dataset",
            f"{data.name} has {data.n_classes} classes and {loaded.info.name} scores {labels}; "
            "use a model with at least as many labels",
        )
    return fit_images(data, loaded.image_shape, loaded.info.name, flat)


def _takes_flat(model: torch.nn.Module, data: Any) -> bool:
    """Whether the model runs on the data's examples as stored, flat (one forward of one example):
    flat pixels go to such a model as they are, and are reshaped into images for one that needs them."""
    x = data.x_test[:1]
    if x.dim() != 2 or x.shape[0] == 0:
        return True  # images already, or nothing to try
    try:
        param = next(model.parameters(), None)
        with torch.inference_mode():
            model(
                x.to(device=param.device, dtype=param.dtype) if param is not None and param.is_floating_point() else x
            )
    except Exception:  # noqa: BLE001 - a model that needs images refuses flat vectors
        return False
    return True


def _is_zero_shot(loaded: LoadedModel) -> bool:
    from modelxray.models.vision_language import ZeroShotClassifier

    return isinstance(loaded.model, ZeroShotClassifier)


def _bind_class_prompts(data: Any, loaded: LoadedModel) -> LoadedModel:
    """A dual encoder (CLIP, SigLIP) as the zero-shot classifier of the dataset's classes: one prompt
    per class name (``model.prompt_template``, else the dataset's). A copy: the cached model stays unbound."""
    import dataclasses

    from modelxray.data.base import ClassificationData
    from modelxray.models.vision_language import zero_shot_notes

    if not _is_zero_shot(loaded) or not isinstance(data, ClassificationData):
        return loaded
    names = data.meta.get("class_names")
    if not names or len(names) != data.n_classes:
        raise ConfigError(
            "dataset",
            f"{data.name} names no classes (meta class_names); {loaded.info.name} is a vision-language model "
            "that classifies by class-name prompts: use dataset=digits or dataset=image_folder",
        )
    model = loaded.model.for_classes(list(names), loaded.tokenizer, data.meta.get("prompt_template"))
    info = dataclasses.replace(loaded.info, notes=[*loaded.info.notes, *zero_shot_notes(model)])
    return dataclasses.replace(loaded, model=model, info=info)
