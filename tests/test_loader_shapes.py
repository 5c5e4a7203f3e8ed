"""Every shape of DataLoader people build, through every analyzer that reads one: it works (the
numbers are the model's on exactly the loader's tokens or images, padding masked out), or it is
refused in one line naming the shape it got, before any analyzer runs.

The analyzers that read a user's loader: performance, bitwidth, robustness and quant_impact (a
language model's token batches, a classifier's images and labels), inspect (a classifier's input
shape; a language model's input comes from its config, not the loader), and ModelAnalyzer's calls
over them, with ``benchmark_inference_speed`` for a language model.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import modelxray
from modelxray import ModelAnalyzer
from modelxray.core.errors import ConfigError

CHEAP = [
    "tracker=none",
    "threads=1",
    "progress=false",
    "report.dashboard=false",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing=false",
    "analyzer.performance.speed_batch_sizes=[1]",
    "analyzer.robustness.pgd_eps=[]",
    "analyzer.robustness.weight_noise_levels=[]",
    "analyzer.robustness.quant_noise_bits=[]",
    "analyzer.bitwidth.uniform_bits=[8]",
    "analyzer.bitwidth.sensitivity=false",
    "analyzer.quant_impact.strategies=[none]",  # each strategy is a config composed twice: the cost here
]
LM = [
    "analyzer=[performance,bitwidth,robustness,quant_impact]",
    *CHEAP,
    "analyzer.robustness.fgsm_eps=[0.03]",
    "analyzer.robustness.dropout_rates=[0.1]",
    "analyzer.robustness.substitution_rates=[]",
]
INSPECT = [
    "analyzer.inspect.energy=false",
    "analyzer.inspect.spectral=none",
    "analyzer.inspect.profile_warmup=0",
    "analyzer.inspect.profile_iters=1",
    "analyzer.inspect.peak_matmul_size=64",
]
IMAGES = ["analyzer=[performance,bitwidth,robustness,quant_impact,inspect]", *CHEAP, *INSPECT]
IMAGES += ["analyzer.robustness.fgsm_eps=[0.05]"]
VOCAB = 64


@pytest.fixture(scope="module", autouse=True)
def quick():
    """One thread, and no figures: the report tests draw them; here they would take most of the time."""
    from modelxray.core.presentation import PlotsFromModule

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PlotsFromModule, "figures", lambda self, result: {})
        yield
    torch.set_num_threads(threads)


@pytest.fixture
def no_analyzer_runs(monkeypatch):
    """A refused loader must stop the run before any analyzer starts."""
    import modelxray.app
    import modelxray.app.orchestration

    def ran(name, *args, **kwargs):
        raise AssertionError(f"analyzer {name} ran on a loader that should have been refused")

    monkeypatch.setattr(modelxray.app.orchestration, "run_stage", ran)
    monkeypatch.setattr(modelxray.app, "run_stage", ran)


# --- a language model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64)).eval()


def _rows() -> list[torch.Tensor]:
    """Three sequences of 12, 9 and 5 tokens (ids 2..63: none is the pad id 0, no row is all 0 and 1)."""
    g = torch.Generator().manual_seed(3)
    return [torch.randint(2, VOCAB, (n,), generator=g) for n in (12, 9, 5)]


def _equal() -> torch.Tensor:
    """Four rows of 10 tokens: the shapes that cannot pad."""
    return torch.randint(2, VOCAB, (4, 10), generator=torch.Generator().manual_seed(4))


def _padded(rows, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        span = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, span], mask[i, span] = r, 1
    return ids, mask


def _tokenizer():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(VOCAB)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")), pad_token="t0")


def _stacked(*names):
    """A collate_fn giving a tuple (or a dict of ``names``) of the stacked fields of TensorDataset rows."""

    def collate(rows):
        fields = tuple(torch.stack(f) for f in zip(*rows))
        return dict(zip(names, fields)) if names else fields

    return collate


def _text_shapes():
    """name -> (a loader factory, the rows it holds, unpadded)."""
    datasets = pytest.importorskip("datasets")
    from transformers import DataCollatorForLanguageModeling

    eq, rows = _equal(), _rows()
    ids, mask = _padded(rows)
    left_ids, left_mask = _padded(rows, left=True)
    labels = ids.masked_fill(mask == 0, -100)

    def table(values, fmt=True):
        t = datasets.Dataset.from_dict({"input_ids": [v.tolist() for v in values]})
        if fmt:
            t.set_format("torch")
        return t

    def collator():
        return DataCollatorForLanguageModeling(_tokenizer(), mlm=False)

    equal = list(eq)
    return {
        "DataLoader(ids): (B, T) tensors": (lambda: DataLoader(eq, batch_size=2), equal),
        "TensorDataset(ids): one-tensor lists": (lambda: DataLoader(TensorDataset(eq), batch_size=2), equal),
        "(ids,) tuples": (lambda: DataLoader(TensorDataset(eq), batch_size=2, collate_fn=_stacked()), equal),
        "TensorDataset(ids, labels)": (lambda: DataLoader(TensorDataset(eq, eq.clone()), batch_size=3), equal),
        "datasets set_format('torch')": (lambda: DataLoader(table(eq), batch_size=2), equal),
        "(ids, attention_mask), right padding": (lambda: DataLoader(TensorDataset(ids, mask), batch_size=2), rows),
        "(ids, attention_mask), left padding": (
            lambda: DataLoader(TensorDataset(left_ids, left_mask), batch_size=3),
            rows,
        ),
        "dicts of input_ids, attention_mask, labels": (
            lambda: DataLoader(
                TensorDataset(ids, mask, labels),
                batch_size=2,
                collate_fn=_stacked("input_ids", "attention_mask", "labels"),
            ),
            rows,
        ),
        "DataCollatorForLanguageModeling over datasets rows": (
            lambda: DataLoader(table(rows, fmt=False), batch_size=3, collate_fn=collator()),
            rows,
        ),
        "DataCollatorForLanguageModeling over set_format('torch') rows": (
            lambda: DataLoader(table(rows), batch_size=2, collate_fn=collator()),
            rows,
        ),
    }


TEXT_SHAPES = [
    "DataLoader(ids): (B, T) tensors",
    "TensorDataset(ids): one-tensor lists",
    "(ids,) tuples",
    "TensorDataset(ids, labels)",
    "datasets set_format('torch')",
    "(ids, attention_mask), right padding",
    "(ids, attention_mask), left padding",
    "dicts of input_ids, attention_mask, labels",
    "DataCollatorForLanguageModeling over datasets rows",
    "DataCollatorForLanguageModeling over set_format('torch') rows",
]


def _perplexity(model, rows) -> tuple[float, int]:
    """By hand: each unpadded row on its own, every next token scored."""
    nll, n = 0.0, 0
    with torch.no_grad():
        for r in rows:
            logits = model(r[None]).logits[0, :-1]
            nll += F.cross_entropy(logits.float(), r[1:], reduction="sum").item()
            n += len(r) - 1
    return math.exp(nll / n), n


def test_the_shape_names_are_the_shapes_built():
    assert list(_text_shapes()) == TEXT_SHAPES


@pytest.mark.parametrize("shape", TEXT_SHAPES)
def test_a_language_models_loader_of_every_shape_in_every_analyzer(shape, gpt2, tmp_path):
    """Each analyzer scores exactly the rows' own tokens: a padded loader gives the perplexity of its
    rows unpadded, whichever side it pads and whatever marks the padding."""
    make, rows = _text_shapes()[shape]
    out = modelxray.analyze(LM, model=gpt2, dataloader=make(), output_dir=tmp_path)
    assert not out.failed, {n: r.error for n, r in out.results.items() if not r.ok}
    m = out.metrics
    expected, tokens = _perplexity(gpt2, rows)
    assert m["performance/tokens_scored"] == m["bitwidth/reference_tokens_scored"] == tokens
    for key in (
        "performance/perplexity",
        "bitwidth/reference_perplexity",
        "robustness/clean_perplexity",
        "quant_impact/none_perplexity",
    ):
        assert m[key] == pytest.approx(expected, rel=1e-4), key
    assert "robustness/token_dropout_0.1_perplexity" in m and "bitwidth/uniform_int8_perplexity" in m


@pytest.mark.parametrize(
    "shape",
    ["TensorDataset(ids): one-tensor lists", "dicts of input_ids, attention_mask, labels", TEXT_SHAPES[-2]],
)
def test_model_analyzer_calls_on_every_kind_of_batch(shape, gpt2, tmp_path):
    """ModelAnalyzer reads the loader once per call, in the same shapes; its speed is timed on them."""
    make, rows = _text_shapes()[shape]
    analyzer = ModelAnalyzer(gpt2, LM, output_dir=tmp_path)
    expected, tokens = _perplexity(gpt2, rows)
    perf = analyzer.analyze_performance(make())["metrics"]
    assert perf["perplexity"] == pytest.approx(expected, rel=1e-4) and perf["tokens_scored"] == tokens
    bits = analyzer.analyze_bit_widths(make())["metrics"]
    assert bits["reference_perplexity"] == pytest.approx(expected, rel=1e-4)
    robust = analyzer.analyze_robustness(make())["metrics"]
    assert robust["clean_perplexity"] == pytest.approx(expected, rel=1e-4)
    speed = analyzer.performance_analyzer.benchmark_inference_speed(iter(list(make())), iters=1)
    assert speed["tokens_per_second"] > 0


def test_left_and_right_padding_give_the_unpadded_numbers_in_one_batch(gpt2):
    """The padding check at its sharpest: one batch of three rows padded each way, and each row alone."""
    from modelxray.app.loading import user_batches
    from modelxray.core.subject import LoadedModel, ModelInfo
    from modelxray.metrics.windows import windows_from_batches

    loaded = LoadedModel(gpt2, None, ModelInfo("gpt2", "in-memory", "float32"))
    rows = _rows()
    seen = []
    for left in (False, True):
        _, batches = user_batches(loaded, [_padded(rows, left=left)])
        seen.append([(w.inputs.tolist(), w.targets.tolist()) for w in windows_from_batches(batches)])
    _, alone = user_batches(loaded, [r[None] for r in rows])
    assert seen[0] == seen[1] == [(w.inputs.tolist(), w.targets.tolist()) for w in windows_from_batches(alone)]


def _text_refusals():
    datasets = pytest.importorskip("datasets")
    eq, rows = _equal(), _rows()
    ragged = datasets.Dataset.from_dict({"input_ids": [r.tolist() for r in rows]})
    ragged.set_format("torch")
    pad_ids, _ = _padded(rows)
    return {
        "strings": (
            DataLoader(["the cat sat", "on the mat"], batch_size=2),
            "yields text (2 str); a language model's DataLoader yields token ids: tokenize first",
        ),
        "a datasets text column": (
            DataLoader(datasets.Dataset.from_dict({"text": ["a b", "c d"]}), batch_size=2),
            "yields a mapping with ['text'] and no input_ids (text: tokenize first)",
        ),
        "a 3-tuple of ids": (
            DataLoader(TensorDataset(eq, eq.flip(0), eq.flip(1)), batch_size=2),
            "yields lists of 3 tensors (2, 10) int64 and none after the ids is a 0/1 attention mask",
        ),
        "float ids": (
            DataLoader(TensorDataset(eq.float()), batch_size=2),
            "yields input ids of shape (2, 10) and dtype torch.float32; expected integer token ids",
        ),
        "a label per sequence": (
            DataLoader(TensorDataset(eq, torch.tensor([0, 1, 0, 1])), batch_size=2),
            "yields labels of shape (2,) for input ids of shape (2, 10)",
        ),
        "rows of Python lists": (
            DataLoader([r.tolist() for r in eq], batch_size=2),
            "yields lists of 10 tensors (2,) int64: rows of Python lists, which a DataLoader collates position",
        ),
        "a datasets table without set_format": (
            DataLoader(datasets.Dataset.from_dict({"input_ids": eq.tolist()}), batch_size=2),
            "yields input_ids as a list of 10 tensors (2,) int64: rows of Python lists",
        ),
        "ragged rows without a padding collate_fn": (
            DataLoader(ragged, batch_size=2),
            "could not stack a batch (stack expects each tensor to be equal size",
        ),
        "ids beyond the vocabulary": (
            DataLoader(eq + VOCAB, batch_size=2),
            f"yields token id {int(eq.max()) + VOCAB} (where no attention mask says padding); "
            f"GPT2LMHeadModel embeds ids 0..{VOCAB - 1}",
        ),
        "padding by -100 in the ids, no mask": (
            DataLoader(pad_ids.masked_fill(pad_ids == 0, -100), batch_size=3),
            "yields token id -100 (where no attention mask says padding)",
        ),
        "images to a language model": (
            [{"pixel_values": torch.rand(2, 3, 8, 8), "labels": torch.tensor([0, 1])}],
            "yields a mapping with ['labels', 'pixel_values'] and no input_ids",
        ),
        "one-token rows": ([torch.tensor([[5], [6]])], "yields no sequence of two or more tokens"),
        "nothing": ([], "yields no batches"),
    }


TEXT_REFUSALS = [
    "strings",
    "a datasets text column",
    "a 3-tuple of ids",
    "float ids",
    "a label per sequence",
    "rows of Python lists",
    "a datasets table without set_format",
    "ragged rows without a padding collate_fn",
    "ids beyond the vocabulary",
    "padding by -100 in the ids, no mask",
    "images to a language model",
    "one-token rows",
    "nothing",
]


def test_the_refusal_names_are_the_loaders_built():
    assert list(_text_refusals()) == TEXT_REFUSALS


# refused while loading, whichever analyzers are chosen: those whose config is cheapest to build
REFUSED = ["analyzer=[performance,bitwidth,robustness]", *CHEAP[:-1]]


@pytest.fixture(scope="module")
def lm_object(gpt2, tmp_path_factory):
    return ModelAnalyzer(gpt2, REFUSED, output_dir=tmp_path_factory.mktemp("object"))


@pytest.mark.parametrize("shape", TEXT_REFUSALS)
def test_a_language_models_loader_that_cannot_work_is_one_line_before_any_analyzer(
    shape, gpt2, lm_object, tmp_path, no_analyzer_runs
):
    loader, expected = _text_refusals()[shape]
    with pytest.raises(ConfigError) as info:
        modelxray.analyze(REFUSED, model=gpt2, dataloader=loader, output_dir=tmp_path)
    message = str(info.value)
    assert message.startswith(f"dataloader: {expected}"), message
    assert "\n" not in message
    with pytest.raises(ConfigError) as info:  # ModelAnalyzer: the same line, under its argument's name
        lm_object.analyze_performance(_text_refusals()[shape][0])
    assert str(info.value) == message.replace("dataloader: ", "data_loader: ", 1)


# --- an image classifier ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 64, 3)
    ).eval()


def _pixels():
    g = torch.Generator().manual_seed(5)
    return torch.rand(12, 1, 8, 8, generator=g), torch.randint(0, 3, (12,), generator=g)


def _image_shapes():
    datasets = pytest.importorskip("datasets")
    x, y = _pixels()

    def table():
        t = datasets.Dataset.from_dict({"pixel_values": x.numpy(), "label": y.numpy()})
        t.set_format("torch")
        return t

    return {
        "TensorDataset(pixels, labels): [pixels, labels] lists": lambda: DataLoader(TensorDataset(x, y), batch_size=5),
        "(pixels, labels) tuples": lambda: DataLoader(TensorDataset(x, y), batch_size=5, collate_fn=_stacked()),
        "(pixels, labels, index) tuples": lambda: DataLoader(
            TensorDataset(x, y, torch.arange(12)), batch_size=5, collate_fn=_stacked()
        ),
        "dicts of pixel_values and labels": lambda: DataLoader(
            TensorDataset(x, y), batch_size=4, collate_fn=_stacked("pixel_values", "labels")
        ),
        "flat pixels and labels": lambda: DataLoader(TensorDataset(x.flatten(1), y), batch_size=6),
        "datasets set_format('torch') of pixel_values, label": lambda: DataLoader(table(), batch_size=6),
    }


IMAGE_SHAPES = [
    "TensorDataset(pixels, labels): [pixels, labels] lists",
    "(pixels, labels) tuples",
    "(pixels, labels, index) tuples",
    "dicts of pixel_values and labels",
    "flat pixels and labels",
    "datasets set_format('torch') of pixel_values, label",
]


def test_the_image_shape_names_are_the_loaders_built():
    assert list(_image_shapes()) == IMAGE_SHAPES


@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_an_image_classifiers_loader_of_every_shape_in_every_analyzer(shape, cnn, tmp_path):
    x, y = _pixels()
    model = cnn if shape != "flat pixels and labels" else _reshaping(cnn)
    loader = _image_shapes()[shape]()
    out = modelxray.analyze(IMAGES, model=model, dataloader=loader, image_shape=(1, 8, 8), output_dir=tmp_path)
    assert not out.failed, {n: r.error for n, r in out.results.items() if not r.ok}
    m = out.metrics
    with torch.no_grad():
        expected = (cnn(x).argmax(1) == y).float().mean().item()
    assert m["performance/examples_scored"] == 12
    for key in ("performance/accuracy", "bitwidth/reference_accuracy", "quant_impact/none_accuracy"):
        assert m[key] == pytest.approx(expected), key
    assert "robustness/fgsm_0.05_accuracy" in m
    assert out.results["inspect"].data["architecture"]["input"]["shape"][1:] == list(model_input(shape))


def _reshaping(cnn):
    """``cnn`` behind a reshape to (N, 1, 8, 8): it takes flat pixels and images alike."""
    from modelxray.models.hf_vision import ToImage

    return torch.nn.Sequential(ToImage((1, 8, 8)), cnn).eval()


def model_input(shape: str) -> tuple[int, ...]:
    return (64,) if shape == "flat pixels and labels" else (1, 8, 8)


def test_model_analyzer_calls_on_an_image_loader(cnn, tmp_path):
    x, y = _pixels()
    loader = _image_shapes()["dicts of pixel_values and labels"]
    analyzer = ModelAnalyzer(_reshaping(cnn), IMAGES, image_shape=(1, 8, 8), output_dir=tmp_path)
    with torch.no_grad():
        expected = (cnn(x).argmax(1) == y).float().mean().item()
    assert analyzer.analyze_performance(loader())["metrics"]["accuracy"] == pytest.approx(expected)
    assert analyzer.analyze_bit_widths(loader())["metrics"]["reference_accuracy"] == pytest.approx(expected)
    assert "fgsm_0.05_accuracy" in analyzer.analyze_robustness(loader())["metrics"]
    flat = _image_shapes()["flat pixels and labels"]()  # flat pixels: the model's C*H*W values stand for images
    assert analyzer.analyze_performance(flat)["metrics"]["accuracy"] == pytest.approx(expected)
    with pytest.raises(ConfigError, match=r"^data_loader: benchmark_inference_speed times a language model's"):
        analyzer.performance_analyzer.benchmark_inference_speed(loader())


def _image_refusals():
    x, y = _pixels()
    return {
        "pixels alone (TensorDataset)": (
            DataLoader(TensorDataset(x), batch_size=4),
            "yields lists of 1 item(s): 1 tensor (4, 1, 8, 8) float32; a classifier's DataLoader yields "
            "(inputs, labels)",
        ),
        "pixels alone (a tensor)": (
            DataLoader(x, batch_size=4),
            "yields tensors (4, 1, 8, 8) float32 alone; a classifier's DataLoader yields (inputs, labels)",
        ),
        "pixel_values without labels": (
            [{"pixel_values": x[:4]}],
            "yields mappings with ['pixel_values']; a classifier's DataLoader yields (inputs, labels)",
        ),
        "one-hot labels": (
            DataLoader(TensorDataset(x, F.one_hot(y, 3).float()), batch_size=4),
            "yields inputs (4, 1, 8, 8) torch.float32 and labels (4, 3) torch.float32; expected float inputs",
        ),
        "uint8 pixels": (
            DataLoader(TensorDataset((x * 255).to(torch.uint8), y), batch_size=4),
            "yields inputs (4, 1, 8, 8) torch.uint8 and labels (4,) torch.int64; expected float inputs",
        ),
        "token batches to a classifier": (
            [{"input_ids": torch.ones(2, 5, dtype=torch.long)}],
            "yields mappings with ['input_ids']; a classifier's DataLoader yields (inputs, labels)",
        ),
    }


IMAGE_REFUSALS = [
    "pixels alone (TensorDataset)",
    "pixels alone (a tensor)",
    "pixel_values without labels",
    "one-hot labels",
    "uint8 pixels",
    "token batches to a classifier",
]


def test_the_image_refusal_names_are_the_loaders_built():
    assert list(_image_refusals()) == IMAGE_REFUSALS


@pytest.mark.parametrize("shape", IMAGE_REFUSALS)
def test_an_image_loader_that_cannot_work_is_one_line_before_any_analyzer(shape, cnn, tmp_path, no_analyzer_runs):
    """Every classifier analyzer scores labels (accuracy, agreement on the labelled split), so a loader
    without labels is refused for all of them."""
    loader, expected = _image_refusals()[shape]
    with pytest.raises(ConfigError) as info:
        modelxray.analyze(REFUSED, model=cnn, dataloader=loader, image_shape=(1, 8, 8), output_dir=tmp_path)
    message = str(info.value)
    assert message.startswith(f"dataloader: {expected}"), message
    assert "\n" not in message


# --- a transformers image classifier, with its image processor -------------------------------------


@pytest.fixture(scope="module")
def vit():
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=16,
        patch_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=3,
    )
    processor = ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5] * 3, image_std=[0.25] * 3)
    return ViTForImageClassification(config).eval(), processor


def _vit_images():
    g = torch.Generator().manual_seed(6)
    return torch.rand(8, 3, 16, 16, generator=g), torch.randint(0, 3, (8,), generator=g)


VIT = [a for a in IMAGES if "inspect" not in a] + ["analyzer=[performance,bitwidth,robustness,quant_impact]"]


@pytest.mark.parametrize("given", ["processor", "image_shape"])
def test_a_transformers_image_classifier_on_a_loader_of_pixel_value_dicts(given, vit, tmp_path):
    """With its processor the model normalises pixels in [0, 1] itself (as a configured dataset's);
    with image_shape alone it takes the loader's pixels as they are. Every analyzer reads its logits."""
    net, processor = vit
    x, y = _vit_images()
    mean, std = (0.5, 0.25) if given == "processor" else (0.0, 1.0)
    loader = [{"pixel_values": x[:4], "labels": y[:4]}, {"pixel_values": x[4:], "labels": y[4:]}]
    kw = {"processor": processor} if given == "processor" else {"image_shape": (3, 16, 16)}
    out = modelxray.analyze(VIT, model=net, dataloader=loader, output_dir=tmp_path, **kw)
    assert not out.failed, {n: r.error for n, r in out.results.items() if not r.ok}
    with torch.no_grad():
        expected = (net(pixel_values=(x - mean) / std).logits.argmax(1) == y).float().mean().item()
    m = out.metrics
    assert m["performance/accuracy"] == pytest.approx(expected) == m["bitwidth/reference_accuracy"]
    assert "robustness/fgsm_0.05_accuracy" in m and "bitwidth/uniform_int8_accuracy" in m


def test_a_transformers_image_classifier_alone_reads_its_input_size_from_its_config(vit, tmp_path):
    """No loader, processor or image_shape: the configured images, fit to the config's 16 px."""
    net, _ = vit
    overrides = ["tracker=none", "analyzer=[performance]", "dataset=sample_images", "analyzer.performance.iters=2"]
    out = modelxray.analyze([*overrides, "analyzer.performance.layer_timing=false"], model=net, output_dir=tmp_path)
    assert not out.failed and 0.0 <= out.metrics["performance/accuracy"] <= 1.0


def test_a_processors_own_normalised_pixels_with_the_processor_are_one_line(vit, tmp_path, no_analyzer_runs):
    net, processor = vit
    x, y = _vit_images()
    normalised = processor(list(x), return_tensors="pt", do_rescale=False)
    loader = [{"pixel_values": normalised["pixel_values"], "labels": y}]
    with pytest.raises(ConfigError, match=r"^dataloader: yields pixels in \[-2, 1.98\]: normalised already, it seems"):
        modelxray.analyze(REFUSED, model=net, dataloader=loader, processor=processor, output_dir=tmp_path)


@pytest.mark.parametrize("kind", ["object_detection", "semantic_segmentation", "image_features"])
def test_a_detector_segmenter_or_backbone_loader_of_normalised_pixels_is_one_line(kind):
    """Their loaders give pixels in [0, 1] too; normalised ones would be clamped there silently."""
    from modelxray.kinds.table import named

    x = torch.rand(2, 3, 8, 8) * 4 - 2
    target = {
        "object_detection": [{"boxes": torch.tensor([[0.0, 0.0, 4.0, 4.0]]), "labels": torch.tensor([1])}] * 2,
        "semantic_segmentation": torch.zeros(2, 8, 8, dtype=torch.long),
        "image_features": torch.tensor([0, 1]),
    }[kind]
    with pytest.raises(ConfigError, match=r"^dataloader: yields images with pixels in \[-\d.*\]; a \w+'s DataLoader"):
        named(kind).images_from_loader([(x, target)], (3, 8, 8))
    assert named(kind).images_from_loader([((x + 2) / 4, target)], (3, 8, 8)).images.shape == (2, 3, 8, 8)
