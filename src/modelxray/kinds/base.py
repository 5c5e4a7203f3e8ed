"""What the rest of modelxray asks of a model kind: one class per kind, so that the code that loads,
feeds, scores, perturbs or reports a model asks its kind instead of comparing its name.

A kind is declared by its class attributes (its name, the task it is scored as, the transformers
tables that name its architectures, the data it reads) and does its work through its methods. Where
a kind cannot do something its method raises a one-line ``ConfigError`` saying so, and that line is
what users see. Families of kinds that share their inputs share a base class (``windows``,
``labelled_images``, ``classifier``), so code that serves a family serves every kind in it, a new
one included (``choose`` picks the most specific entry of a table keyed by kind classes)."""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from modelxray.core.errors import ConfigError

T = TypeVar("T")


class Kind:
    """A kind of model: how it is loaded, what data it is scored on, and what its quality is."""

    # -- what it is: its names, and docs/model_kinds.md's row ------------------------------------
    name: ClassVar[str] = "kind"  # model.kind's value and the modelxray.kind tag
    task: ClassVar[str] = "kind"  # what it is scored as (the ``task`` param and tag)
    noun: ClassVar[str] = "model"  # how a sentence names a model of this kind
    family: ClassVar[str] = "models of every kind"  # a family's base class: how a sentence names its members
    models: ClassVar[str] = ""  # the model options that load one
    datasets: ClassVar[str] = ""  # the datasets it reads
    quality: ClassVar[str] = ""  # what its quality is

    # -- how it is found and loaded ----------------------------------------------------------------
    # transformers' ``MODEL_FOR_*_MAPPING_NAMES`` tables whose classes are of this kind (``table.KINDS``
    # orders the kinds for matching)
    hf_tables: ClassVar[tuple[str, ...]] = ()
    auto_class: ClassVar[str | None] = None  # the ``AutoModelFor...`` class that loads it
    needs_tokenizer: ClassVar[bool] = False  # its own examples are tokenized: a model without a tokenizer stops
    takes_byte_tokenizer: ClassVar[bool] = False  # model.tokenizer=byte serves it (no special tokens needed)
    needs_processor: ClassVar[str | None] = None  # the part loaded beside it (feature extractor, processor ...)
    # an in-memory transformers model of this kind needs nothing beside itself (its input size is in its config)
    needs_nothing_beside: ClassVar[bool] = False
    places_on_devices: ClassVar[bool] = False  # model.device_map can spread it over devices
    streams_from_disk: ClassVar[bool] = False  # runtime.offload=blocks can read it a block at a time
    # model=file: the key that declares a model of this kind ("inputs": a generic model), what the key
    # is (for the line that says it belongs to another kind), and which kinds a file may be
    file_key: ClassVar[str | None] = None
    file_key_is: ClassVar[str] = ""
    from_file: ClassVar[bool] = False  # model.kind may name it for model=file
    from_target: ClassVar[bool] = False  # a module built from _target_ can be of this kind (its keys say how)

    # -- its data ----------------------------------------------------------------------------------
    modalities: ClassVar[tuple[str, ...]] = ()  # the datasets' ``modality`` it reads (text, images, audio)
    fitting: ClassVar[str] = "a text dataset"  # the datasets that fit, for the one-line error naming them
    reads_dataset: ClassVar[bool] = True  # scored on the configured dataset (a generic model: its own inputs)
    reads_token_batches: ClassVar[bool] = False  # a user's DataLoader yields token batches, read as they come
    seq_len_within_positions: ClassVar[bool] = False  # dataset.seq_len tokens enter the model at once

    # -- how it is scored and reported -----------------------------------------------------------
    headline: ClassVar[str] = ""  # the metric a report leads with for it
    # how its scored positions make its quality: "perplexity" (exp of the mean loss), "label" (one
    # label per example: accuracy with a Wilson interval) or "token_labels" (a label per token)
    scored_by: ClassVar[str] = "perplexity"
    perplexity_name: ClassVar[str] = "perplexity"  # what its perplexity is of, in a report's quality line
    counted_in: ClassVar[str] = "windows"  # what one of its examples is, in a table's count column
    named_in_run: ClassVar[bool] = False  # a run's name says the kind (the UI lists such runs apart)

    # -- what can be done with it ----------------------------------------------------------------
    runs: ClassVar[bool] = True  # it has a forward to run (a weights-only file has not)
    trains_as: ClassVar[str | None] = None  # what train= optimizes on it (train.task=auto): causal_lm | classification
    agreement_after_quant: ClassVar[bool] = True  # performance scores it against its unquantized outputs
    caches_reference: ClassVar[bool] = False  # its unquantized outputs are kept in the reference cache (sweeps)
    compared_by_reference: ClassVar[bool] = True  # reference= can be a second model of this kind
    # what it cannot be analyzed by, and why: analyzer option -> the line users see (checked before any work)
    cannot: ClassVar[dict[str, str]] = {}
    analyzer_hint: ClassVar[str] = ""  # said after the analyzers that fit, when one that does not was chosen

    @classmethod
    def quality_figure(cls) -> str:
        """What its quality is read as at the scored positions: ``perplexity`` or ``accuracy``."""
        return "perplexity" if cls.scored_by == "perplexity" else "accuracy"

    @classmethod
    def labels_every_token(cls) -> bool:
        """Each scored token carries its own label (a token classifier): a replaced token is unscored."""
        return cls.scored_by == "token_labels"

    @classmethod
    def plural(cls) -> str:
        """How a sentence names every model of this class (a family names its members)."""
        return cls.__dict__.get("family", None) or f"{cls.noun}s"

    @classmethod
    def a_noun(cls) -> str:
        """The noun with its article: "an object detector"."""
        return f"{'an' if cls.noun[0] in 'aeiou' else 'a'} {cls.noun}"

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    def __repr__(self) -> str:
        return f"<kind {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kind) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    # -- data ----------------------------------------------------------------------------------
    def default_dataset(self, dataset: Any) -> tuple[Any, str] | None:
        """(the dataset that stands for ``dataset`` when none was chosen, the note that says so), or
        None when the configured default stands."""
        return None

    def check_dataset(self, dataset: Any, loaded: Any) -> None:
        """One line, before any data loads, when ``dataset`` cannot be this kind's data."""

    def check_file_keys(self, source: Any, fmt: str) -> None:
        """model=file: one line when ``source``'s keys cannot build a model of this kind from a ``fmt`` file."""

    def reference_work(self) -> Any:
        """What ``measure.reference_outputs.capture`` keeps of a model of this kind before a quantizer
        changes it, ``work(subject, performance, windows, progress)``; None: nothing (weights alone)."""
        return None

    def degenerate_signs(self, metrics: dict, subject: Any, uniform_share: float) -> list[str]:
        """What says a model of this kind has learnt nothing, from its performance ``metrics`` and the
        subject's data (``metrics.degenerate``): a perplexity near the vocabulary's size, an accuracy no
        better than the commonest label. ``uniform_share``: the share of the vocabulary a perplexity
        must reach to count as a uniform guess. Empty for a model that learnt something."""
        return []

    def data_type(self) -> type | None:
        """The class of data its analyzers read (checked after loading), or None: any."""
        return None

    def trial_inputs(self, subject: Any, full: bool = False) -> Any:
        """One example of the subject's own inputs (batch 1, on the model's device), as
        ``measure.scoring.forward_logits`` takes them, for the trial forward that runs before any
        analyzer; None where there is nothing to run (weights alone, no data). ``full``: as large as
        the analyzers feed it, where the first try was a shorter one."""
        return None

    def examples_for(self, dataset: Any, loaded: Any, progress: bool = False) -> Any:
        """``dataset`` as the examples this kind is scored on (by default, as the dataset loads itself)."""
        return dataset.load(loaded.tokenizer)

    def data_from_batches(self, loaded: Any, batches: Any, key: str, image_shape: Any = None) -> Any:
        """A user's DataLoader as this kind's data, or None when the analyzers read its batches as
        they come (a language model's token batches, a generic module's inputs)."""
        return None


def choose(kind: Kind, table: dict[type, T], key: str, what: str) -> T:
    """The entry of ``table`` (kind classes -> anything) for ``kind``'s most specific class; a kind no
    class of the table covers is a one-line ConfigError at ``key``: ``what`` (e.g. "analyzes causal LMs
    and classifiers") followed by the kind."""
    for cls in type(kind).__mro__:
        if cls in table:
            return table[cls]
    raise ConfigError(key, f"{what}; {kind.plural()} ({kind.name}) are not among them")


def plurals(kinds: tuple[type, ...]) -> str:
    """``kinds`` named for a sentence: "causal language models and classifiers"."""
    names = [k.plural() for k in kinds]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
