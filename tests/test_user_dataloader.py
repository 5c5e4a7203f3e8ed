"""Every language-model analyzer takes a user's DataLoader of token batches (seed 000's
``analyze_bit_widths(data_loader)``, ``analyze_robustness(data_loader)``), scoring its rows as windows."""

from __future__ import annotations

import pytest
import torch

import modelxray
from modelxray.core.errors import ConfigError

# every analyzer that scores a language model on a loader, each at its smallest
EVERY_LM_ANALYZER = [
    "analyzer=[performance,robustness,bitwidth,quant_impact]",
    "tracker=none",
    "progress=false",
    "report.dashboard=false",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing=false",
    "analyzer.robustness.pgd_eps=[]",
    "analyzer.robustness.weight_noise_levels=[]",
    "analyzer.robustness.quant_noise_bits=[]",
    "analyzer.robustness.dropout_rates=[0.1]",
    "analyzer.robustness.substitution_rates=[]",
    "analyzer.bitwidth.uniform_bits=[8]",
    "analyzer.bitwidth.sensitivity=false",
    "analyzer.quant_impact.strategies=[none,int8]",
]


@pytest.fixture(scope="module")
def model_and_loader():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=64))
    ids = torch.randint(0, 257, (6, 32), generator=torch.Generator().manual_seed(1))
    return model, torch.utils.data.DataLoader(ids, batch_size=2)


def test_bitwidth_robustness_and_quant_impact_score_the_loaders_rows(model_and_loader, tmp_path):
    model, loader = model_and_loader
    overrides = [*EVERY_LM_ANALYZER, "threads=1", "analyzer.robustness.fgsm_eps=[0.03]"]
    out = modelxray.analyze(overrides, model=model, dataloader=loader, output_dir=tmp_path)
    assert not out.failed
    m = out.metrics
    # 6 rows of 32 tokens: 31 scored each, the same windows for every analyzer
    assert m["performance/tokens_scored"] == m["bitwidth/reference_tokens_scored"] == 6 * 31
    assert m["bitwidth/reference_perplexity"] == pytest.approx(m["performance/perplexity"], rel=1e-5)
    assert m["robustness/clean_perplexity"] == pytest.approx(m["performance/perplexity"], rel=1e-5)
    assert m["quant_impact/none_perplexity"] == pytest.approx(m["performance/perplexity"], rel=1e-5)


def test_no_text_and_no_loader_is_one_line(model_and_loader):
    from modelxray.core.subject import ModelInfo, Subject

    model, _ = model_and_loader
    subject = Subject(model, None, None, ModelInfo("m", "in-memory", "float32"))
    from modelxray.analyzers.robustness.config import RobustnessAnalyzer

    with pytest.raises(ConfigError, match="needs token windows: a text dataset .* or a DataLoader of token batches"):
        RobustnessAnalyzer().preflight(subject)


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 64, 10)
    )


def test_a_classifier_takes_a_loader_of_images_and_labels(digits, tmp_path):
    """(images, labels) batches become the split every classifier analyzer scores: the accuracy is the
    model's on exactly those images."""
    x, y = digits.x_test[:96].view(-1, 1, 8, 8), digits.y_test[:96]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    model = _cnn().eval()
    overrides = [
        "analyzer=[performance,robustness]",
        "tracker=none",
        "threads=1",
        "progress=false",
        "report.dashboard=false",
        "analyzer.performance.iters=1",
        "analyzer.performance.layer_timing=false",
        "analyzer.robustness.fgsm_eps=[0.1]",
        "analyzer.robustness.pgd_eps=[]",
        "analyzer.robustness.weight_noise_levels=[]",
        "analyzer.robustness.quant_noise_bits=[]",
    ]
    out = modelxray.analyze(overrides, model=model, dataloader=loader, image_shape=(1, 8, 8), output_dir=tmp_path)
    assert not out.failed
    with torch.no_grad():
        expected = (model(x).argmax(1) == y).float().mean().item()
    assert out.metrics["performance/accuracy"] == pytest.approx(expected)
    assert out.metrics["performance/examples_scored"] == 96
    assert "robustness/fgsm_0.1_accuracy" in out.metrics


def test_a_classifier_loader_of_the_wrong_structure_is_one_line(tmp_path):
    loader = torch.utils.data.DataLoader(torch.zeros(4, 1, 8, 8), batch_size=2)
    with pytest.raises(
        ConfigError, match=r"dataloader: yields .*; a classifier's DataLoader yields \(inputs, labels\)"
    ):
        modelxray.analyze(["tracker=none"], model=_cnn(), dataloader=loader, image_shape=(1, 8, 8), output_dir=tmp_path)


# --- every common shape of a language model's loader, padding masked out of every metric


def _rows():
    """Three sequences of 12, 9 and 5 tokens (ids 2..256: no row is all 0 and 1)."""
    g = torch.Generator().manual_seed(3)
    return [torch.randint(2, 257, (n,), generator=g) for n in (12, 9, 5)]


def _padded(rows, left: bool = False, pad: int = 0):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        span = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, span], mask[i, span] = r, 1
    return ids, mask


def _shapes():
    """name -> a DataLoader of the three rows, as people build them."""
    from torch.utils.data import DataLoader, TensorDataset

    rows = _rows()
    ids, mask = _padded(rows)
    left_ids, left_mask = _padded(rows, left=True)
    labels = ids.masked_fill(mask == 0, -100)

    def as_dicts(batch):
        return {"input_ids": torch.stack([b[0] for b in batch]), "attention_mask": torch.stack([b[1] for b in batch])}

    return {
        "TensorDataset(ids, attention_mask), right padding": DataLoader(TensorDataset(ids, mask), batch_size=2),
        "TensorDataset(ids, attention_mask), left padding": DataLoader(
            TensorDataset(left_ids, left_mask), batch_size=2
        ),
        "TensorDataset(ids, attention_mask, labels)": DataLoader(TensorDataset(ids, mask, labels), batch_size=3),
        "dicts of input_ids and attention_mask": DataLoader(list(zip(ids, mask)), batch_size=2, collate_fn=as_dicts),
        "one row per batch, unpadded": [r.unsqueeze(0) for r in rows],
        "TensorDataset(ids) of rows, one per batch": [[r.unsqueeze(0)] for r in rows],
    }


@pytest.mark.parametrize("name", list(_shapes()))
def test_every_loader_shape_scores_the_same_tokens(name):
    """Padding is no token: every shape scores exactly the rows' own tokens, whichever side it pads."""
    from modelxray.metrics.windows import windows_from_batches

    windows = windows_from_batches(_shapes()[name])
    assert [w.inputs.tolist() for w in windows] == [r.tolist() for r in _rows()]
    assert [int((w.targets != -100).sum()) for w in windows] == [11, 8, 4]
    for w in windows:
        assert w.targets[:-1].tolist() == w.inputs[1:].tolist()


def test_labels_mark_what_is_scored_and_a_tensor_dataset_of_ids_is_one_element_lists():
    from torch.utils.data import DataLoader, TensorDataset

    from modelxray.metrics.windows import windows_from_batches

    ids = torch.randint(2, 257, (4, 8), generator=torch.Generator().manual_seed(0))
    (batch,) = list(DataLoader(TensorDataset(ids), batch_size=4))
    assert isinstance(batch, list) and len(batch) == 1  # what used to fail inside performance
    assert len(windows_from_batches([batch])) == 4
    labels = ids.clone()
    labels[:, :4] = -100  # score the second half only (a prompt, then its answer)
    (w, *_) = windows_from_batches(DataLoader(TensorDataset(ids, labels), batch_size=4))
    assert (w.targets != -100).sum() == 4 and w.targets[3:7].tolist() == ids[0, 4:8].tolist()


def test_a_hugging_face_dataset_and_the_language_modeling_collator(tmp_path):
    """``datasets`` with ``set_format("torch")``, and ``DataCollatorForLanguageModeling(mlm=False)``'s
    padded batches (labels -100 at the padding): the rows' own tokens, nothing else."""
    datasets = pytest.importorskip("datasets")
    from tokenizers import Tokenizer, models
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    from modelxray.metrics.windows import windows_from_batches

    rows = [r.tolist() for r in _rows()]
    table = datasets.Dataset.from_dict({"input_ids": [rows[0][:9], rows[1]]})  # two rows of 9 tokens
    table.set_format("torch")
    windows = windows_from_batches(DataLoader(table, batch_size=2))
    assert [w.inputs.tolist() for w in windows] == [rows[0][:9], rows[1]]
    vocab = {f"t{i}": i for i in range(257)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")), pad_token="t0")
    collate = DataCollatorForLanguageModeling(tok, mlm=False)
    batches = list(DataLoader([{"input_ids": r} for r in rows], batch_size=3, collate_fn=collate))
    assert batches[0]["input_ids"].shape == (3, 12) and (batches[0]["labels"] == -100).sum() == 3 + 7
    assert [w.inputs.tolist() for w in windows_from_batches(batches)] == rows


@pytest.mark.parametrize(
    "batch,expected",
    [
        ({"text": ["a"]}, "yields a mapping with ['text'] and no input_ids (text: tokenize first); expected"),
        ((torch.rand(2, 8),), "yields input ids of shape (2, 8) and dtype torch.float32; expected integer token ids"),
        ((torch.ones(2, 8, dtype=torch.long) * 5, torch.tensor([0, 1])), "yields labels of shape (2,) for input ids"),
        (
            (torch.ones(2, 8, dtype=torch.long),) * 4,
            "yields tuples of 4 tensors (2, 8) int64; expected a (batch, tokens)",
        ),
        ((torch.ones(2, 8, dtype=torch.long) * 5, torch.rand(2, 8) * 3), "yields float labels; a language model's"),
    ],
)
def test_a_loader_of_another_shape_is_one_line_naming_it(batch, expected):
    from modelxray.metrics.windows import windows_from_batches

    with pytest.raises(ConfigError) as info:
        windows_from_batches([batch])
    assert str(info.value).startswith(f"dataloader: {expected}")


def test_a_padded_loader_through_every_analyzer_and_an_iterable_one_read_once(model_and_loader, tmp_path):
    """Right-padded (ids, attention_mask) batches give the numbers of the unpadded rows in every
    analyzer; a loader that can be read once (a generator, an IterableDataset) serves them all."""
    model, _ = model_and_loader
    rows = _rows()
    ids, mask = _padded(rows)
    overrides = [*EVERY_LM_ANALYZER, "analyzer.robustness.fgsm_eps=[]"]
    padded = modelxray.analyze(
        overrides,
        model=model,
        dataloader=torch.utils.data.DataLoader(list(zip(ids, mask)), batch_size=3),
        output_dir=tmp_path / "padded",
    )
    once = modelxray.analyze(
        overrides, model=model, dataloader=(r.unsqueeze(0) for r in rows), output_dir=tmp_path / "once"
    )
    assert not padded.failed and not once.failed
    for key in (
        "performance/perplexity",
        "bitwidth/reference_perplexity",
        "robustness/clean_perplexity",
        "quant_impact/int8_perplexity",
    ):
        assert padded.metrics[key] == pytest.approx(once.metrics[key], rel=1e-5), key
    assert padded.metrics["performance/tokens_scored"] == once.metrics["performance/tokens_scored"] == 11 + 8 + 4


def test_an_image_loader_of_pairs_or_of_pixel_value_mappings_gives_the_same_split():
    from modelxray.data.loader_data import classification_from_loader

    x, y = torch.rand(6, 1, 8, 8), torch.tensor([0, 1, 2, 0, 1, 2])
    pairs = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4)
    mappings = [{"pixel_values": x[:4], "labels": y[:4]}, {"pixel_values": x[4:], "labels": y[4:]}]
    a, b = classification_from_loader(pairs), classification_from_loader(mappings)
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.y_test, b.y_test) and a.n_classes == 3
    with pytest.raises(
        ConfigError,
        match=r"^dataloader: yields lists of 1 item\(s\): 1 tensor \(4, 1, 8, 8\) float32; a classifier's DataLoader yields",
    ):
        classification_from_loader(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x), batch_size=4))
