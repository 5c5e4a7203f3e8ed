"""Robustness of encoders, seq2seq models and speech recognisers: audio noise at set SNRs, time
shift and speed scored by word error rate; token substitution and embedding attacks on the text a
model reads (a seq2seq model's source only); weight and quantization noise on every kind."""

import pytest
import torch

import task_models
from conftest import mlflow_runs
from modelxray.kinds.table import named
from modelxray.metrics.windows import IGNORE, NamedTensors, Window
from modelxray.models.hf import HFSource
from modelxray.perturb.embedding_shift import EmbeddingShift
from modelxray.perturb.text_task_harness import substitute_text

SMALL = ["dataset.examples=6", "dataset.seq_len=40", "progress=false", "report.dashboard=false"]
FAST = [
    "analyzer=robustness",
    "analyzer.robustness.seeds=1",
    "analyzer.robustness.weight_noise_levels=[0.1]",
    "analyzer.robustness.quant_noise_bits=[4]",
    "analyzer.robustness.eval_windows=4",
    "analyzer.robustness.pgd_eps=[0.03]",
    "analyzer.robustness.pgd_steps=2",
    "analyzer.robustness.pgd_windows=2",
    "analyzer.robustness.fgsm_eps=[0.03]",
    "analyzer.robustness.substitution_rates=[0.2]",
]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("robust_kinds")
    return {name: task_models.ALL[name](root / name) for name in ("bert_classifier", "t5", "whisper", "wav2vec2_ctc")}


def _run(dirs, name, extra, tmp_path, tracking_uri, cache_dir):
    import modelxray

    exp = f"robust_{name}"
    args = [
        "model=hf",
        f"model.name_or_path={dirs[name]}",
        f"dataset.cache_dir={cache_dir}",
        f"tracker.uri={tracking_uri}",
        f"tracker.experiment={exp}",
        *SMALL,
        *FAST,
        *extra,
    ]
    modelxray.analyze(args, output_dir=tmp_path)
    _, (run,) = mlflow_runs(tracking_uri, exp)
    errors = [p.read_text()[-1500:] for p in tmp_path.rglob("*_traceback.txt")]
    assert run.info.status == "FINISHED", errors
    return run.data.metrics


@pytest.mark.parametrize("name", ["whisper", "wav2vec2_ctc"])
def test_speech_robustness_scores_noise_shift_and_speed_by_word_error_rate(
    name, dirs, tmp_path, tracking_uri, cache_dir
):
    levels = [
        "analyzer.robustness.snr_db=[10]",
        "analyzer.robustness.time_shifts=[0.25]",
        "analyzer.robustness.speed_factors=[1.25]",
        "analyzer.robustness.utterances=3",
        "analyzer.robustness.max_new_tokens=6",
    ]
    m = _run(dirs, name, levels, tmp_path, tracking_uri, cache_dir)
    for key in ("clean_wer", "audio_noise_10_wer", "time_shift_0.25_wer", "speed_1.25_wer", "weight_noise_0.1_wer"):
        assert f"robustness/{key}" in m, sorted(m)
    assert m["robustness/audio_noise_10_wer_se"] >= 0
    assert 0 <= m["robustness/time_shift_0.25_transcript_change"]
    assert not any(k.startswith("robustness/fgsm") for k in m)  # audio: no embedding attack


@pytest.mark.parametrize("name, quality", [("bert_classifier", "accuracy"), ("t5", "perplexity")])
def test_text_kinds_get_substitution_attacks_and_weight_noise(name, quality, dirs, tmp_path, tracking_uri, cache_dir):
    m = _run(dirs, name, [], tmp_path, tracking_uri, cache_dir)
    for key in (
        f"clean_{quality}",
        f"token_substitution_0.2_{quality}",
        "token_substitution_0.2_top1_agree",
        f"fgsm_0.03_{quality}",
        f"pgd_0.03_{quality}",
        f"weight_noise_0.1_{quality}",
        "quant_noise_4bit_kl",
    ):
        assert f"robustness/{key}" in m, sorted(m)
    assert 0 <= m["robustness/token_substitution_0.2_top1_agree"] <= 1


def test_substitution_replaces_only_ordinary_tokens_of_the_text():
    ids = torch.tensor([2, 10, 11, 4, 12, 3, 0, 0])  # [CLS] a b [MASK] c [SEP] pad pad
    mask = torch.tensor([1, 1, 1, 1, 1, 1, 0, 0])
    inputs = NamedTensors(input_ids=ids, attention_mask=mask)
    targets = torch.tensor([IGNORE, 1, 0, 2, 1, IGNORE, IGNORE, IGNORE])
    protected = torch.tensor([0, 1, 2, 3, 4])
    out = substitute_text(
        Window(inputs, targets), 1.0, 50, protected, torch.Generator().manual_seed(0), named("masked_lm")
    )
    new = out.inputs["input_ids"]
    assert torch.equal(new[[0, 3, 5, 6, 7]], ids[[0, 3, 5, 6, 7]])  # specials, the mask and padding stay
    assert (new[[1, 2, 4]] >= 5).all()  # ordinary tokens only
    assert torch.equal(out.targets, targets)  # a masked LM is still scored on what the masks hid
    tagged = substitute_text(
        Window(inputs, targets), 1.0, 50, protected, torch.Generator().manual_seed(0), named("token_classification")
    )
    assert (tagged.targets[[1, 2, 4]] == IGNORE).all()  # a replaced word's tag is not scored
    same = substitute_text(
        Window(inputs, targets), 0.0, 50, protected, torch.Generator().manual_seed(0), named("masked_lm")
    )
    assert torch.equal(same.inputs["input_ids"], ids)


def test_an_embedding_shift_within_the_encoder_leaves_the_decoder_clean(tmp_path):
    """The shifted T5 equals the model run on the encoder's shifted embeddings, given directly."""
    model = HFSource(name_or_path=str(task_models.t5(tmp_path / "t5")), device="cpu").load().model
    src, dec = torch.tensor([[5, 6, 7, 8, 1]]), torch.tensor([[0, 9, 10, 11, 12]])  # same length: the trap
    delta = torch.randn(1, 5, model.config.d_model, generator=torch.Generator().manual_seed(0))
    encoder = model.get_encoder()
    with torch.no_grad(), EmbeddingShift(encoder.get_input_embeddings(), encoder) as shift:
        shift.delta = delta
        shifted = model(input_ids=src, decoder_input_ids=dec).logits
    with torch.no_grad():
        embeds = model.get_input_embeddings()(src) + delta
        direct = model(inputs_embeds=embeds, decoder_input_ids=dec).logits
        clean = model(input_ids=src, decoder_input_ids=dec).logits
    torch.testing.assert_close(shifted, direct)
    assert not torch.allclose(shifted, clean)


def test_speech_harness_without_a_perturbation_reproduces_the_clean_transcripts(dirs, cache_dir):
    from types import SimpleNamespace

    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.kinds.table import named
    from modelxray.perturb.speech_harness import SpeechHarness

    loaded = HFSource(name_or_path=str(dirs["wav2vec2_ctc"]), device="cpu").load()
    data = named("speech_ctc").examples_for(PydocTopics(examples=3, cache_dir=cache_dir), loaded)
    subject = SimpleNamespace(data=data, tokenizer=loaded.tokenizer, processor=loaded.processor, kind=loaded.kind)
    h = SpeechHarness(loaded.model, subject, 3, 2, 8, progress=False)
    gen = torch.Generator().manual_seed(0)
    for family, level in (("time_shift", 0.0), ("speed", 1.0), ("audio_noise", float("inf"))):
        out = h.perturb_inputs(family, level, gen, "")
        assert out["transcript_change"] == 0 and out["wer"] == h.clean["wer"], family
    assert h.clean["utterances_scored"] == 3
