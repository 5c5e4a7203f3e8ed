"""The audio classifier kind, added through docs/new_kind.md: found from transformers' audio
classification table, scored on spoken words (one class per label) with an accuracy a hand
computation reproduces, quantized with its agreement, refused in one line where it has no inputs to
perturb, and fed from a user's folder of clips or DataLoader."""

import wave

import numpy as np
import pytest
import torch

import task_models
from conftest import mlflow_runs, run_cli
from modelxray.analyzers.performance.plots import quality_intervals, quality_line
from modelxray.core.errors import ConfigError
from modelxray.kinds.audio_classification import class_words
from modelxray.kinds.table import kind_of_architecture, named
from modelxray.models.hf import HFSource

SMALL = [
    "dataset.examples=8",
    "progress=false",
    "report.dashboard=false",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing_iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
]


@pytest.fixture(scope="module")
def spotter(tmp_path_factory):
    return task_models.wav2vec2_audio_classifier(tmp_path_factory.mktemp("audio") / "spotter")


@pytest.mark.parametrize(
    "arch", ["ASTForAudioClassification", "Wav2Vec2ForSequenceClassification", "WhisperForAudioClassification"]
)
def test_the_kind_comes_from_the_audio_classification_table(arch):
    assert kind_of_architecture(arch) is named("audio_classification")
    assert kind_of_architecture("Wav2Vec2ForCTC") is named("speech_ctc")  # a recogniser stays one


def test_each_label_is_spoken_as_its_name_or_as_a_frequent_word_of_the_text():
    class Model:
        def __init__(self, labels):
            self.config = type("C", (), {"id2label": dict(enumerate(labels)), "num_labels": len(labels)})

    assert class_words(Model(["Yes", "no", "up"]), "") == ["yes", "no", "up"]
    text = "the cat saw the dog; the dog saw a bird. A cat, a dog."
    assert class_words(Model(["LABEL_0", "LABEL_1"]), text) == ["the", "dog"]  # by frequency: 3, 3 (first seen)
    with pytest.raises(ConfigError, match=r"^dataset: the text holds 2 distinct words, fewer than the model's 3"):
        class_words(Model(["LABEL_0", "LABEL_1", "LABEL_2"]), "one one two")


def test_a_run_scores_spoken_words_as_a_hand_computation_does_and_agrees_after_int8(
    spotter, tmp_path, tracking_uri, cache_dir
):
    import modelxray
    from modelxray.data.pydoc_topics import PydocTopics

    exp = "audio_classification"
    common = [
        "model=hf",
        f"model.name_or_path={spotter}",
        f"dataset.cache_dir={cache_dir}",
        f"tracker.uri={tracking_uri}",
        f"tracker.experiment={exp}",
        *SMALL,
    ]
    out = modelxray.analyze([*common, "quant=int8"], output_dir=tmp_path)
    perf = out.results["performance"]
    assert "no better than always answering the commonest label" in perf.data["degenerate"][0]
    assert quality_intervals(perf) and quality_line(perf).startswith("accuracy")
    _, (run,) = mlflow_runs(tracking_uri, exp)
    assert run.data.tags["modelxray.kind"] == "audio_classification" and run.info.run_name.endswith(
        "audio_classification"
    )
    m = run.data.metrics
    # an independent computation of the unquantized model's accuracy on the same clips
    loaded = HFSource(name_or_path=str(spotter), device="cpu").load()
    data = named("audio_classification").examples_for(PydocTopics(examples=8, cache_dir=cache_dir), loaded)
    assert data.meta["references"][:4] == ["yes", "no", "up", "down"]  # every class is heard in turn
    fe = loaded.processor
    inputs = fe(data.meta["audio"], sampling_rate=data.meta["sample_rate"], return_tensors="pt", padding=True)
    with torch.no_grad():
        predicted = loaded.model(input_values=inputs["input_values"]).logits.argmax(-1)
    labels = torch.tensor(data.meta["labels"])
    assert labels.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    unquantized = float((predicted == labels).float().mean())
    assert m["performance/examples_scored"] == 8
    assert m["performance/accuracy_ci_low"] <= m["performance/accuracy"] <= m["performance/accuracy_ci_high"]
    assert 0.9 <= m["performance/top1_agree"] <= 1 and m["performance/kl"] >= 0
    # int8 moves a few predictions at most: the quantized accuracy is within one example of the float one
    assert abs(m["performance/accuracy"] - unquantized) <= 1 / 8 + 1e-9


def test_robustness_is_refused_in_the_kinds_own_words(spotter, tmp_path, cache_dir):
    proc = run_cli(
        [
            "model=hf",
            f"model.name_or_path={spotter}",
            "analyzer=robustness",
            "tracker=none",
            f"dataset.cache_dir={cache_dir}",
        ],
        tmp_path,
    )
    assert proc.returncode == 2
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("modelxray: error")]
    assert (
        "analyzer.robustness:" in line and "is an audio classifier (audio_classification); its inputs are audio" in line
    )


def _wav(path, seconds=0.3, rate=16000, freq=440.0):
    t = np.arange(int(seconds * rate)) / rate
    pcm = (0.3 * np.sin(2 * np.pi * freq * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())


def test_a_folder_of_clips_is_labelled_by_its_transcripts_and_a_label_the_model_lacks_is_one_line(spotter, tmp_path):
    from modelxray.data.audio_folder import AudioFolder

    folder = tmp_path / "clips"
    folder.mkdir()
    for i, word in enumerate(["yes", "no", "up"]):
        _wav(folder / f"{i}.wav", freq=300 + 100 * i)
    (folder / "transcripts.tsv").write_text("0.wav\tyes\n1.wav\tno\n2.wav\tUp\n")
    loaded = HFSource(name_or_path=str(spotter), device="cpu").load()
    kind = named("audio_classification")
    data = kind.examples_for(AudioFolder(path=str(folder)), loaded)
    assert data.meta["labels"] == [0, 1, 2] and data.n_examples == 3
    (folder / "transcripts.tsv").write_text("0.wav\tyes\n1.wav\tleft\n")
    with pytest.raises(ConfigError, match=r"^dataset.path: .*label 'left' is neither one of the model's labels"):
        kind.examples_for(AudioFolder(path=str(folder)), loaded)


def test_a_users_dataloader_of_clips_and_labels_is_scored(spotter, tmp_path):
    from torch.utils.data import DataLoader

    import modelxray

    loaded = HFSource(name_or_path=str(spotter), device="cpu").load()
    clips = torch.randn(6, 4000) * 0.1
    rows = [{"input_values": clips[i], "labels": torch.tensor(i % 4)} for i in range(6)]
    outcome = modelxray.analyze(
        ["analyzer=performance", "tracker=none", *SMALL],
        model=loaded.model,
        processor=loaded.processor,
        dataloader=DataLoader(rows, batch_size=3),
        output_dir=tmp_path,
    )
    metrics = outcome.results["performance"].metrics
    assert metrics["examples_scored"] == 6 and 0 <= metrics["accuracy"] <= 1
