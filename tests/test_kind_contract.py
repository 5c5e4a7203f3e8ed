"""Every model kind answers what the rest of modelxray asks of it: its declarations are complete,
it is found from its transformers classes, and every analyzer either covers it or refuses it in one
line that names it (no kind is left to fail half-way through a run)."""

import pytest

from modelxray.analyzers.performance.plots import quality_intervals, quality_line
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
        if isinstance(kind, analyzer.model_kinds) and option not in kind.cannot:
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


# -- every kind runs quantized: a quality figure with its uncertainty and an agreement figure ---------------
# the test that runs each kind with quant=int8 through analyzer=performance and checks them, so that
# a new kind cannot be added without one (the kinds below without a fast test elsewhere run here)
RUN_TESTS = {
    "causal_lm": "test_kind_contract.py::test_the_kinds_without_a_test_of_their_own_run_quantized",
    "classification": "test_kind_contract.py::test_the_kinds_without_a_test_of_their_own_run_quantized",
    "image_classification": "test_kind_contract.py::test_the_kinds_without_a_test_of_their_own_run_quantized",
    "vision_language": "test_kind_contract.py::test_the_kinds_without_a_test_of_their_own_run_quantized",
    "masked_lm": "test_task_kinds.py::test_every_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "seq2seq_lm": "test_task_kinds.py::test_every_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "sequence_classification": "test_task_kinds.py::test_every_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "token_classification": "test_task_kinds.py::test_every_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "speech_seq2seq": "test_task_kinds.py::test_every_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "speech_ctc": "test_task_kinds.py::test_every_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "audio_classification": "test_audio_classification.py::test_a_run_scores_spoken_words_as_a_hand_computation_does_and_agrees_after_int8",
    "object_detection": "test_vision_kinds.py::test_every_vision_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "semantic_segmentation": "test_vision_kinds.py::test_every_vision_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "image_features": "test_vision_kinds.py::test_every_vision_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "image_text_to_text": "test_vision_kinds.py::test_every_vision_kind_runs_quantized_with_quality_uncertainty_and_agreement",
    "generic": "test_generic_kind.py::test_cli_generic_run_is_logged_to_mlflow",
}
CANNOT_RUN = {"weights"}  # a weights-only file has no forward: quant= and performance refuse it in one line


def test_every_kind_that_runs_is_run_quantized_by_a_test():
    import ast
    from pathlib import Path

    here = Path(__file__).parent
    assert set(RUN_TESTS) | CANNOT_RUN == set(NAMES), "add the kind's quantized run to RUN_TESTS"
    for kind in CANNOT_RUN:
        assert not named(kind).runs
    for name, where in RUN_TESTS.items():
        file, function = where.split("::")
        tree = ast.parse((here / file).read_text())
        assert function in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, f"{name}: {where}"


@pytest.mark.parametrize("name", ["causal_lm", "classification", "image_classification", "vision_language"])
def test_the_kinds_without_a_test_of_their_own_run_quantized(name, tmp_path, tracking_uri, cache_dir):
    import torch

    import modelxray
    from conftest import mlflow_runs

    exp = f"contract_{name}"
    common = [
        "quant=int8",
        "analyzer=performance",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing_iters=1",
        "analyzer.performance.speed_batch_sizes=[1]",
        "progress=false",
        "report.dashboard=false",
        f"tracker.uri={tracking_uri}",
        f"tracker.experiment={exp}",
    ]
    given = {}
    if name == "causal_lm":
        args = ["model=tiny_gpt2", "dataset.max_tokens=1024", "dataset.seq_len=128", f"dataset.cache_dir={cache_dir}"]
        quality, error = "perplexity", "loss_se"
    elif name == "classification":  # any module mapping inputs to class logits, on a classification split
        torch.manual_seed(0)
        given = {"model": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)), "image_shape": (1, 8, 8)}
        args, quality, error = ["dataset=digits", "dataset.max_test=64"], "accuracy", "accuracy_ci_low"
    else:
        from test_vision_language import _clip
        from test_vision_models import _vit

        d = (_vit if name == "image_classification" else _clip)(tmp_path / name)
        args = ["model=hf", f"model.name_or_path={d}", "dataset=digits", "dataset.max_test=64"]
        quality, error = "accuracy", "accuracy_ci_low"
    out = modelxray.analyze([*common, *args], output_dir=tmp_path, **given)
    assert out.results["performance"].data.get("degenerate"), "a random-weight model must be flagged"
    assert quality_intervals(out.results["performance"]) and quality_line(out.results["performance"])  # plot, line
    _, (run,) = mlflow_runs(tracking_uri, exp)
    assert run.info.status == "FINISHED" and run.data.tags["modelxray.kind"] == name
    m = run.data.metrics
    for key in (quality, error, "top1_agree", "kl"):
        assert f"performance/{key}" in m, sorted(m)
    assert m[f"performance/{named(name).headline}"] == m[f"performance/{quality}"]
    assert 0 <= m["performance/top1_agree"] <= 1 and m["performance/kl"] >= 0


# -- the degenerate check: every kind that runs says when its model has learnt nothing ---------------------
def _windows(targets: list[list[int]]):
    import torch

    from modelxray.metrics.windows import NamedTensors, Window

    return [
        Window(NamedTensors({"input_ids": torch.zeros(len(t), dtype=torch.long)}), torch.tensor(t)) for t in targets
    ]


def test_degenerate_signs_by_hand_for_each_kind():
    from types import SimpleNamespace

    import torch

    lm = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(vocab_size=100)))
    assert named("causal_lm").degenerate_signs({"perplexity": 80.0}, lm, 0.5)  # 80% of a uniform guess
    assert not named("causal_lm").degenerate_signs({"perplexity": 20.0}, lm, 0.5)
    assert named("masked_lm").degenerate_signs({"perplexity": 60.0}, lm, 0.5)
    # labels: 9 of 12 positions hold label 0, so always answering 0 scores 0.75
    labelled = SimpleNamespace(data=SimpleNamespace(windows=_windows([[0, 0, 0, -100], [0, 1, 2, 0], [0, 0, 0, 1, 0]])))
    flagged = named("token_classification").degenerate_signs({"accuracy": 9 / 12}, labelled, 0.5)
    assert flagged and "commonest label (0.750)" in flagged[0]
    assert not named("token_classification").degenerate_signs({"accuracy": 1.0}, SimpleNamespace(
        data=SimpleNamespace(windows=_windows([[i % 4] for i in range(40)]))), 0.5)  # fmt: skip
    assert named("audio_classification").degenerate_signs({"accuracy": 0.25}, SimpleNamespace(
        data=SimpleNamespace(windows=_windows([[i % 4] for i in range(40)]))), 0.5)  # fmt: skip
    assert named("speech_ctc").degenerate_signs({"wer": 1.0}, None, 0.5) and not named(
        "speech_seq2seq"
    ).degenerate_signs({"wer": 0.3}, None, 0.5)
    assert named("object_detection").degenerate_signs({"map_50": 0.0}, None, 0.5)
    assert not named("object_detection").degenerate_signs({"map_50": 0.2}, None, 0.5)
    masks = torch.zeros(2, 4, 4, dtype=torch.long)
    masks[:, :1] = 1  # a quarter of the pixels are class 1: labelling all 0 scores 0.75
    seg = SimpleNamespace(data=SimpleNamespace(masks=masks))
    assert named("semantic_segmentation").degenerate_signs(
        {"pixel_accuracy": 0.75, "pixel_accuracy_se": 0.01}, seg, 0.5
    )
    assert not named("semantic_segmentation").degenerate_signs(
        {"pixel_accuracy": 0.95, "pixel_accuracy_se": 0.01}, seg, 0.5
    )
    backbone = SimpleNamespace(data=SimpleNamespace(image_labels=torch.arange(40) % 10))
    assert named("image_features").degenerate_signs({"knn_accuracy": 0.1}, backbone, 0.5)
    assert not named("image_features").degenerate_signs({"knn_accuracy": 0.9}, backbone, 0.5)
