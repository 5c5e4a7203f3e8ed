"""Any Hugging Face model of a kind modelxray analyzes (causal and masked LMs, seq2seq models, text
classifiers, speech recognisers, image classifiers, CLIP-style dual encoders): a hub id (needs the
network or a filled cache) or a local directory. The kind comes from the directory's config
(``kinds/table.py``); encoders, seq2seq and speech models load in ``models/hf_tasks.py``.
A dual encoder (CLIP, SigLIP) loads as a zero-shot classifier bound to the dataset's class names when
the run knows them (``models/vision_language.py``)."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

from modelxray.core.errors import ConfigError
from modelxray.core.schema import REQUIRED
from modelxray.core.subject import LoadedModel, ModelInfo
from modelxray.kinds.base import choose
from modelxray.kinds.causal_lm import CausalLM
from modelxray.kinds.image_classification import ImageClassifier
from modelxray.kinds.labelled_images import LabelledImagesKind
from modelxray.kinds.table import AUTO, HF_KINDS, chosen_or_found
from modelxray.kinds.vision_language import DualEncoder
from modelxray.kinds.windows import WindowsKind
from modelxray.models.base import Declared, ModelSource
from modelxray.models.cache_only import model_kwargs
from modelxray.models.hf_dir import check_config_json, check_side_files, declared_from_dir, dir_bytes
from modelxray.models.hf_tasks import has_vocabulary, load_task_model
from modelxray.models.tokenizers import load_tokenizer

# seconds the hub endpoint gets to answer before a model that is not cached is called unreachable
# (transformers would retry for about half a minute before failing)
HUB_PROBE_TIMEOUT_S = 2.0
_HUB_PROBES: dict[str, str | None] = {}  # endpoint -> why it cannot be reached (None: it answers)


def _check_model_dir(path: Path) -> None:
    """A Hugging Face model directory holds a ``config.json``: without one nothing says what to build."""
    config = path / "config.json"
    if not config.is_file():
        raise ConfigError(
            "name_or_path",
            f"directory {str(path)!r} has no config.json, so it is no Hugging Face model directory: point "
            "model.name_or_path at a folder saved with save_pretrained (config.json and weights) or at a hub id",
        )
    check_config_json(config, "name_or_path")
    check_side_files(path, "name_or_path")


def load_error(name_or_path: str, exc: Exception) -> ConfigError | None:
    """transformers' refusals that the user can act on, as one line: a model that ships its own code
    (``model.trust_remote_code`` is off), a ``.bin`` checkpoint holding more than tensors (``torch.load``
    with ``weights_only=True`` refused it; loading it anyway could run code). None for anything else."""
    text = str(exc)
    if isinstance(exc, ValueError) and "trust_remote_code" in text:
        return ConfigError(
            "model.trust_remote_code",
            f"{name_or_path!r} ships its own model code, which runs on this machine when loaded; read it, and set "
            "model.trust_remote_code=true if you trust it",
        )
    if isinstance(exc, pickle.UnpicklingError) or "Weights only load failed" in text:
        return ConfigError(
            "model.name_or_path",
            f"a .bin checkpoint in {name_or_path!r} holds Python objects beyond tensors, and loading it could run "
            "code, so it was refused; convert it to safetensors where you trust its source",
        )
    return None


def _hub_cached(repo_id: str, revision: str | None) -> bool:
    """Whether the hub cache holds this model's config (then transformers can load it offline)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)
    except Exception:  # noqa: BLE001 - not a valid repo id: transformers says so when it loads
        return False


def _offline_reason(local_files_only: bool) -> str | None:
    """Why the hub cannot be used now, or None: offline mode, ``local_files_only``, or an endpoint
    that does not answer within ``HUB_PROBE_TIMEOUT_S``."""
    from huggingface_hub import constants, is_offline_mode

    if is_offline_mode():
        return "the machine is offline (HF_HUB_OFFLINE is set)"
    if local_files_only:
        return "model.local_files_only=true"
    problem = _hub_problem(constants.ENDPOINT)
    return None if problem is None else f"the machine is offline ({constants.ENDPOINT}: {problem})"


def _hub_problem(endpoint: str) -> str | None:
    """Why ``endpoint`` cannot be reached, or None if it answers at all (any HTTP status) within
    ``HUB_PROBE_TIMEOUT_S``; in a thread, so a name lookup that hangs is bounded too. Once per process."""
    import threading

    if endpoint not in _HUB_PROBES:
        outcome: list[str | None] = []
        thread = threading.Thread(target=lambda: outcome.append(_head(endpoint)), daemon=True)
        thread.start()
        thread.join(HUB_PROBE_TIMEOUT_S)
        _HUB_PROBES[endpoint] = outcome[0] if outcome else f"no answer within {HUB_PROBE_TIMEOUT_S:g} s"
    return _HUB_PROBES[endpoint]


def _head(url: str) -> str | None:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=HUB_PROBE_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return None  # it answered
    except urllib.error.URLError as exc:  # refused, no such name
        return str(getattr(exc.reason, "strerror", None) or exc.reason)
    except OSError as exc:  # a timeout
        return str(exc) or type(exc).__name__
    return None


# a text vocabulary at least this large was made by a trained tokenizer (CLIP's 49,408, SigLIP's
# 32,000): without that tokenizer, byte ids would be other tokens than the model learned
TEST_VOCAB = 1024


@dataclass
class HFSource(ModelSource):
    name_or_path: str = field(default="", metadata=REQUIRED)  # a hub id (org/name) or a local model directory
    revision: str | None = None
    trust_remote_code: bool = False  # off unless the user opts in: remote code runs on this machine
    local_files_only: bool = False
    tokenizer: str | None = None  # defaults to name_or_path (language models, dual encoders); byte = built-in
    kind: str = "auto"  # auto (from the config's architectures) or a kind of docs/model_kinds.md, e.g. masked_lm
    image_size: int | None = None  # image models: input size when neither config nor image processor names it
    prompt_template: str | None = None  # dual encoders: class prompt with {label}; null = the dataset's
    # causal LMs: accelerate places the modules (auto | balanced | balanced_low_0 | sequential, or
    # {module: cpu | disk | cuda:N}); null: the whole model on model.device
    device_map: str | dict | None = None
    offload_folder: str | None = None  # where device_map's disk-placed weights go; null: a temporary folder

    def validate(self) -> None:
        super().validate()
        from modelxray.models.device_map import check_device_map

        check_device_map(self.device_map, self.device)
        self.require_choice("kind", HF_KINDS)
        self.require_positive("image_size", allow_none=True)
        if self.prompt_template is not None and "{label}" not in self.prompt_template:
            raise ConfigError(
                "prompt_template", f"must contain {{label}} where the class name goes, got {self.prompt_template!r}"
            )
        if not self.name_or_path:
            raise ConfigError("name_or_path", "is required: a hub id (org/name) or a local model directory")
        local = Path(os.path.expanduser(self.name_or_path))
        looks_local = self.name_or_path.startswith((".", "/", "~"))
        if looks_local and not local.is_dir():
            raise ConfigError("name_or_path", f"model directory {self.name_or_path!r} does not exist")
        if local.is_dir():
            _check_model_dir(local)
        else:
            self._check_hub_reachable()

    def declared(self) -> Declared:
        local = Path(os.path.expanduser(self.name_or_path))
        if local.is_dir():
            return declared_from_dir(local, self.kind, self.name_or_path)
        return Declared(None if self.kind == AUTO else self.kind)

    def _check_hub_reachable(self) -> None:
        """A hub id that is not in the local cache needs the hub: say at once when it cannot be reached
        (offline mode, ``local_files_only``, or no answer from the endpoint) instead of retrying."""
        if _hub_cached(self.name_or_path, self.revision):
            return
        why = _offline_reason(self.local_files_only)
        if why is not None:
            raise ConfigError(
                "name_or_path",
                f"{self.name_or_path!r} is not in the local Hugging Face cache and {why}; "
                "pass a local model directory (model.name_or_path=/path/to/model) or download it while online",
            )

    def _cache_only(self) -> str | None:
        """Why a cached hub model loads from the cache alone, or None. transformers would ask an
        unreachable hub for newer files and retry for half a minute before falling back to the cache;
        the hub is probed once (seconds) instead, and a cached model then loads at once."""
        if self.local_files_only or Path(os.path.expanduser(self.name_or_path)).is_dir():
            return None
        if not _hub_cached(self.name_or_path, self.revision):
            return None
        return _offline_reason(False)

    def load(self) -> LoadedModel:
        from transformers import AutoConfig

        path = os.path.expanduser(self.name_or_path)
        offline = self._cache_only()
        kwargs = dict(
            revision=self.revision,
            trust_remote_code=self.trust_remote_code,
            local_files_only=self.local_files_only or offline is not None,
        )
        try:
            config = AutoConfig.from_pretrained(path, **kwargs)
            kind = chosen_or_found(self.kind, config, self.name_or_path)
            if self.device_map is not None and not kind.places_on_devices:
                raise ConfigError(
                    "model.device_map", f"places causal language models; {self.name_or_path!r} is a {kind} model"
                )
            load = choose(
                kind, self._loaders(), "model.kind", "model=hf loads language, text, speech and vision models"
            )
            loaded = load(kind, path, kwargs, config)

        except (OSError, ValueError, pickle.UnpicklingError) as exc:
            refusal = load_error(self.name_or_path, exc)
            if refusal is not None:
                raise refusal from None
            if not isinstance(exc, OSError):
                raise
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(
                "model.name_or_path", f"cannot load {self.name_or_path!r}: {first} (offline? pass a local directory)"
            ) from None
        stored = str(getattr(config, "dtype", None) or "unknown").replace("torch.", "")
        local = Path(path)
        loaded.info = ModelInfo(
            name=self.name_or_path,
            source_format="hf",
            source_dtype=stored,
            file_path=str(local) if local.is_dir() else None,
            file_bytes=dir_bytes(local) if local.is_dir() else None,
            notes=[*loaded.info.notes, *([f"loaded from the local Hugging Face cache: {offline}"] if offline else [])],
        )
        loaded.task = kind.task
        loaded.kind = kind
        loaded.model = self.place(loaded.model) if self.device_map is None else loaded.model.eval()
        return loaded

    def block_weights(self):
        from modelxray.models.hf_streamed import block_weights

        return block_weights(self)

    def tokenizer_alone(self):
        """The byte tokenizer, or a local directory's (``model.tokenizer``'s) tokenizer, as the load
        reads it; None for a hub id or one that does not load (the load says why)."""
        if self.tokenizer == "byte":
            return load_tokenizer("byte")
        local = Path(os.path.expanduser(self.tokenizer or self.name_or_path))
        if not local.is_dir():
            return None
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(str(local), trust_remote_code=self.trust_remote_code)
        except Exception:  # noqa: BLE001 - the load reports it, with the model
            return None

    def estimated_bytes(self) -> int | None:
        """A local directory's model, counted from its config.json on the meta device."""
        import torch

        from modelxray.models.config_size import parameter_count

        local = Path(os.path.expanduser(self.name_or_path))
        if not (local / "config.json").is_file():
            return None
        kind = self.declared().kind
        count = parameter_count(local, getattr(kind, "auto_class", None))
        size = getattr(getattr(torch, str(self.dtype), None), "itemsize", 4)  # float32 for auto
        return None if count is None else count * size

    def load_streamed(self, hidden_budget: int | None, reason: str) -> LoadedModel:
        from modelxray.models.hf_streamed import load_streamed

        if self.device not in ("auto", "cpu"):
            raise ConfigError(
                "runtime.offload", "blocks streams on the CPU for now: use model.device=cpu or runtime.offload=none"
            )
        return load_streamed(self, hidden_budget, reason)

    def _loaders(self) -> dict:
        """How each family of kinds loads: by its own Auto class, and wrapped where its inputs are pixels."""

        def vision_task(kind, path, kwargs, config):
            from modelxray.models.hf_vision_tasks import load_vision_task

            return load_vision_task(self, kind, path, kwargs)

        return {
            CausalLM: lambda kind, path, kwargs, config: self._load_causal_lm(path, kwargs),
            WindowsKind: lambda kind, path, kwargs, config: load_task_model(self, kind, path, kwargs),
            ImageClassifier: lambda kind, path, kwargs, config: self._load_image_classifier(path, kwargs),
            DualEncoder: lambda kind, path, kwargs, config: self._load_vision_language(path, kwargs, config),
            LabelledImagesKind: vision_task,
        }

    def _load_causal_lm(self, path: str, kwargs: dict) -> LoadedModel:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        placed = self._placement()
        model = AutoModelForCausalLM.from_pretrained(path, dtype=self.torch_dtype(), **model_kwargs(kwargs), **placed)
        if "offload_folder" in placed and self.offload_folder is None:  # the folder lives as long as the model
            model._modelxray_offload_folder = self._temporary_folder
        if self.tokenizer == "byte":
            tokenizer = load_tokenizer("byte")
        else:
            tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(self.tokenizer or path), **kwargs)
        return LoadedModel(model, tokenizer, ModelInfo(self.name_or_path, "hf", ""))

    def _placement(self) -> dict:
        """``from_pretrained``'s placement keywords: accelerate's device map, and where it may put
        weights on disk."""
        if self.device_map is None:
            return {}
        folder = self.offload_folder
        if folder is None:
            import tempfile

            self._temporary_folder = tempfile.TemporaryDirectory(prefix="modelxray-offload-")
            folder = self._temporary_folder.name
        return {"device_map": self.device_map, "offload_folder": os.path.expanduser(folder)}

    def _load_image_classifier(self, path: str, kwargs: dict) -> LoadedModel:
        from transformers import AutoModelForImageClassification

        from modelxray.models.hf_vision import wrap_image_classifier

        net = AutoModelForImageClassification.from_pretrained(path, dtype=self.torch_dtype(), **model_kwargs(kwargs))
        model, notes = wrap_image_classifier(net, path, self.image_size, self.name_or_path, kwargs)
        info = ModelInfo(self.name_or_path, "hf", "", notes=notes)
        return LoadedModel(model, None, info, task="classification", image_shape=model.image_shape)

    def _load_vision_language(self, path: str, kwargs: dict, config) -> LoadedModel:
        from transformers import AutoModel

        from modelxray.models.hf_vision import image_shape_of, normalisation, processor_settings
        from modelxray.models.vision_language import ZeroShotClassifier, family_of

        family = family_of(config, self.name_or_path)
        net = AutoModel.from_pretrained(path, dtype=self.torch_dtype(), **model_kwargs(kwargs))
        tokenizer, notes = self._dual_encoder_tokenizer(path, kwargs, config)
        processor = processor_settings(path, kwargs)
        shape = image_shape_of(config.vision_config, processor, self.image_size, self.name_or_path)
        mean, std, more = normalisation(processor, shape[0])
        notes.extend(more)
        model = ZeroShotClassifier(net, mean, std, shape, family, self.prompt_template)
        info = ModelInfo(self.name_or_path, "hf", "", notes=notes)
        return LoadedModel(model, tokenizer, info, task="classification", image_shape=shape)

    def _dual_encoder_tokenizer(self, path: str, kwargs: dict, config) -> tuple[object, list[str]]:
        """The directory's tokenizer (or ``model.tokenizer``); a directory without one (saved from
        random weights) falls back to the byte tokenizer when its text vocabulary holds 257 to
        ``TEST_VOCAB`` - 1 ids, a test model's; a larger one was made by a trained tokenizer."""
        from modelxray.models.vision_language import BYTE_VOCAB

        if self.tokenizer == "byte":
            return load_tokenizer("byte"), []
        if self.tokenizer is not None:
            return load_tokenizer(os.path.expanduser(self.tokenizer), "model.tokenizer", self.trust_remote_code), []
        from transformers import AutoTokenizer

        try:  # AutoTokenizer decides what loads, whatever files hold it
            tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
        except Exception as exc:  # noqa: BLE001 - no tokenizer files: OSError, ValueError, TypeError...
            why = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:120]}"
        else:
            if has_vocabulary(tokenizer) and len(tokenizer) >= 16:
                return tokenizer, []
            why = f"its tokenizer has {len(tokenizer)} tokens"  # built from the config alone: no vocabulary
        vocab = int(getattr(config.text_config, "vocab_size", 0) or 0)
        if not BYTE_VOCAB <= vocab < TEST_VOCAB:  # a trained vocabulary: byte ids would be other tokens
            raise ConfigError(
                "model.tokenizer",
                f"{self.name_or_path} has no tokenizer ({why}) and a text vocabulary of {vocab} ids, which "
                + (
                    f"cannot hold the byte tokenizer's {BYTE_VOCAB}"
                    if vocab < BYTE_VOCAB
                    else "a trained tokenizer made"
                )
                + "; set model.tokenizer to its tokenizer directory (model.tokenizer=byte uses modelxray's byte "
                "tokenizer anyway)",
            )
        note = (
            f"No tokenizer in {self.name_or_path}: class prompts are encoded with modelxray's byte tokenizer "
            "(right for models trained with it, e.g. digits_clip; a random-weight test model otherwise)."
        )
        return load_tokenizer("byte"), [note]
