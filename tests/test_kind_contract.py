"""Every model kind answers what the rest of modelxray asks of it: its declarations are complete,
it is found from its transformers classes, and every analyzer either covers it or refuses it in one
line that names it (no kind is left to fail half-way through a run)."""

import pytest

from modelxray.core.errors import ConfigError
from modelxray.core.schema import SCHEMA, load_class
from modelxray.core.subject import ModelInfo, Subject
from modelxray.kinds.base import Kind, choose
from modelxray.kinds.table import HF_KINDS, KINDS, kind_of, kind_of_architecture, named, overview_table

NAMES = [k.name for k in KINDS]


def test_every_kind_is_declared_once_with_what_the_docs_and_reports_need():
    assert len(set(NAMES)) == len(NAMES)
    for kind in KINDS:
        assert kind.name and kind.task and kind.noun, kind
        assert kind.models and kind.datasets and kind.quality, f"{kind}: the docs' row would be empty"
        assert named(kind.name) is kind and str(kind) == kind.name
        assert kind.runs or not kind.headline  # a kind that cannot run has no quality to lead with
        if kind.runs and kind.reads_dataset:
            assert kind.headline, f"{kind} has no headline metric"
        if kind.hf_tables:
            assert kind.auto_class, f"{kind} is found in transformers' tables but names no Auto class to load it"
            assert kind.name in HF_KINDS


def test_the_overview_table_has_a_row_per_kind_or_shared_row():
    rows = overview_table().splitlines()[2:]
    for kind in KINDS:
        assert any(f"`{kind.name}`" in r.split(" | ")[0] for r in rows), kind


@pytest.mark.parametrize(
    "arch, kind",
    [
        ("LlamaForCausalLM", "causal_lm"),
        ("BertForMaskedLM", "masked_lm"),
        ("T5ForConditionalGeneration", "seq2seq_lm"),
        ("WhisperForConditionalGeneration", "speech_seq2seq"),
        ("Wav2Vec2ForCTC", "speech_ctc"),
        ("ViTForImageClassification", "image_classification"),
        ("DetrForObjectDetection", "object_detection"),
        ("SegformerForSemanticSegmentation", "semantic_segmentation"),
        ("Dinov2Model", "image_features"),
        ("LlavaForConditionalGeneration", "image_text_to_text"),
    ],
)
def test_a_kind_is_found_from_its_transformers_class(arch, kind):
    assert kind_of_architecture(arch) is named(kind)


def test_a_subject_without_a_kind_is_the_kind_of_its_task():
    info = ModelInfo("m", "test", "float32")
    for task, kind in (("causal_lm", "causal_lm"), ("classification", "classification"), ("generic", "generic")):
        assert kind_of(Subject(None, None, None, info, task=task)) is named(kind)
    assert kind_of(Subject(None, None, None, info, task="masked_lm", kind="masked_lm")) is named("masked_lm")


@pytest.mark.parametrize("name", NAMES)
def test_every_analyzer_covers_each_kind_or_refuses_it_in_one_line(name):
    from modelxray.app.checks import check_task

    kind = named(name)
    subject = Subject(None, None, None, ModelInfo("m", "test", "float32"), task=kind.task, kind=kind)
    covering = []
    for option, path in SCHEMA["analyzer"].items():
        analyzer = load_class(path)
        if isinstance(kind, analyzer.model_kinds):
            covering.append(option)
            continue
        with pytest.raises(ConfigError) as err:
            check_task(subject, {option: analyzer()})
        line = str(err.value)
        assert "\n" not in line and f"({kind.name})" in line and line.startswith(f"analyzer.{option}:"), line
    assert "inspect" in covering, f"{kind}: every kind's weights can be inspected"
    if kind.runs and kind.reads_dataset:
        assert "performance" in covering, f"{kind}: every kind that runs on data gets a quality figure"


def test_choose_picks_the_most_specific_class_and_refuses_the_rest_in_one_line():
    from modelxray.kinds.speech import SpeechRecognizer
    from modelxray.kinds.windows import WindowsKind

    table = {WindowsKind: "windows", SpeechRecognizer: "speech"}
    assert choose(named("speech_ctc"), table, "k", "x") == "speech"
    assert choose(named("masked_lm"), table, "k", "x") == "windows"
    with pytest.raises(ConfigError, match=r"^k: serves windows; causal language models \(causal_lm\) are not among"):
        choose(named("causal_lm"), table, "k", "serves windows")
    assert isinstance(named("generic"), Kind)
