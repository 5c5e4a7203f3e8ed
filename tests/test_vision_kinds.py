"""Detectors, semantic segmenters and vision backbones through model=hf: the kind comes from
transformers' task tables, each is scored on digit canvases (boxes, masks, labels) with its quality
and uncertainty, agrees or not with its unquantized self, and every analyzer runs or refuses in one
line. Each metric is checked against a hand computation."""

import math

import pytest
import torch

import vision_task_models
from conftest import mlflow_runs
from modelxray.analyzers.performance.plots import quality_intervals, quality_line
from modelxray.core.errors import ConfigError
from modelxray.data.digit_canvases import DigitCanvases
from modelxray.kinds.table import kind_of_config
from modelxray.metrics.detection import coco_map
from modelxray.metrics.embeddings import cosine_drift, knn_accuracy
from modelxray.metrics.segmentation import segmentation_scores
from modelxray.models.hf import HFSource
from report_checks import contradictions

SMALL = [
    "dataset=digit_canvases",
    "dataset.examples=6",
    "progress=false",
    "report.dashboard=false",
    "analyzer=performance",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing_iters=1",
    "analyzer.performance.speed_batch_sizes=[1]",
    "analyzer.performance.detection_bootstrap=5",
    "analyzer.performance.bootstrap=5",
]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vision_kinds")
    return {name: build(root / name) for name, build in vision_task_models.ALL.items()}


@pytest.mark.parametrize(
    "arch, kind",
    [
        ("DetrForObjectDetection", "object_detection"),
        ("YolosForObjectDetection", "object_detection"),
        ("RTDetrForObjectDetection", "object_detection"),
        ("SegformerForSemanticSegmentation", "semantic_segmentation"),
        ("UperNetForSemanticSegmentation", "semantic_segmentation"),
        ("Mask2FormerForUniversalSegmentation", "semantic_segmentation"),
        ("MaskFormerForInstanceSegmentation", "semantic_segmentation"),
        ("Dinov2Model", "image_features"),
        ("ConvNextModel", "image_features"),
        ("DeiTForImageClassificationWithTeacher", "image_classification"),
        ("LlavaForConditionalGeneration", "image_text_to_text"),
        ("Idefics3ForConditionalGeneration", "image_text_to_text"),
        ("PaliGemmaForConditionalGeneration", "image_text_to_text"),
    ],
)
def test_vision_kinds_come_from_transformers_task_tables(arch, kind):
    from transformers import PretrainedConfig

    assert kind_of_config(PretrainedConfig(architectures=[arch]), arch).name == kind


RUNS = {
    # directory: (kind, quality metric, its uncertainty, agreement with the unquantized model)
    "detr": ("object_detection", "map", "map_se", "unquantized_map_50"),
    "yolos": ("object_detection", "map_50", "map_50_se", "unquantized_map"),
    "segformer": ("semantic_segmentation", "miou", "miou_se", "pixel_agree"),
    "dinov2": ("image_features", "knn_accuracy", "knn_accuracy_ci_low", "embedding_drift"),
    "llava": ("image_text_to_text", "perplexity", "loss_se", "kl"),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_every_vision_kind_runs_quantized_with_quality_uncertainty_and_agreement(name, dirs, tmp_path, tracking_uri):
    import modelxray

    kind, quality, error, agreement = RUNS[name]
    exp = f"vision_{name}"
    args = ["model=hf", f"model.name_or_path={dirs[name]}", "quant=int8", f"tracker.uri={tracking_uri}"]
    small = [a for a in SMALL if a != "dataset=digit_canvases"] if kind == "image_text_to_text" else SMALL
    out = modelxray.analyze(
        [*args, f"tracker.experiment={exp}", *small, "analyzer.performance.max_new_tokens=3"], output_dir=tmp_path
    )
    perf = out.results["performance"]
    assert perf.data.get("degenerate"), "a random-weight model must be flagged"
    assert quality_intervals(perf) and quality_line(perf)  # plot, line
    assert not contradictions(perf.metrics, (tmp_path / "insights.md").read_text(), perf.data["degenerate"])
    _, (run,) = mlflow_runs(tracking_uri, exp)
    assert run.info.status == "FINISHED"
    assert run.data.tags["modelxray.kind"] == kind and run.data.tags["modelxray.task"] == kind
    m = run.data.metrics
    for key in (quality, error, agreement):
        assert f"performance/{key}" in m, sorted(m)
    assert m[f"performance/{error}"] >= 0
    if kind == "image_text_to_text":  # answers generated, and matched with the unquantized model's
        assert {"performance/exact_match_ci_high", "performance/unquantized_exact_match"} <= set(m)
    else:
        assert 0 <= m[f"performance/{quality}"] <= 1


def test_inspect_runs_and_the_others_refuse_in_one_line(dirs, tmp_path):
    import modelxray

    args = ["model=hf", f"model.name_or_path={dirs['segformer']}", "tracker=none", "progress=false"]
    out = modelxray.analyze([*args, "analyzer=inspect", "report.dashboard=false"], output_dir=tmp_path)
    inspect = out.results["inspect"].metrics
    assert inspect["parameters"] > 0 and "compute_failed" not in inspect
    with pytest.raises(ConfigError, match=r"^analyzer.learning_dynamics: .*semantic_segmentation") as e:
        modelxray.analyze([*args, "analyzer=learning_dynamics"])
    assert "\n" not in str(e.value)


ROBUST = {
    # directory: metrics that must be logged (the kind's quality under corruptions and noise, agreement)
    "detr": ("clean_map_50", "gaussian_noise_0.2_map_50", "blur_1_agree_map_50", "weight_noise_0.1_map"),
    "segformer": ("clean_miou", "gaussian_noise_0.2_miou", "occlusion_0.5_pixel_agree", "quant_noise_4bit_miou"),
    "dinov2": (
        "clean_knn_accuracy",
        "blur_1_knn_accuracy",
        "occlusion_0.5_embedding_drift",
        "weight_noise_0.1_knn_accuracy",
    ),
}


@pytest.mark.parametrize("name", list(ROBUST))
def test_robustness_scores_image_corruptions_and_noise_by_the_task(name, dirs, tmp_path):
    import modelxray

    args = ["model=hf", f"model.name_or_path={dirs[name]}", "analyzer=robustness", "tracker=none", "progress=false"]
    levels = [
        "analyzer.robustness.seeds=1",
        "analyzer.robustness.weight_noise_levels=[0.1]",
        "analyzer.robustness.quant_noise_bits=[4]",
        "analyzer.robustness.gaussian_noise_sigmas=[0.2]",
        "analyzer.robustness.blur_sigmas=[1]",
        "analyzer.robustness.occlusion_sides=[0.5]",
        "analyzer.robustness.fgsm_eps=[0.03]",
        "analyzer.robustness.pgd_eps=[0.03]",
        "analyzer.robustness.pgd_steps=2",
    ]
    out = modelxray.analyze([*args, *levels, "dataset.examples=6", "report.dashboard=false"], output_dir=tmp_path)
    result = out.results["robustness"]
    assert result.ok, result.error
    for key in ROBUST[name]:
        assert key in result.metrics, sorted(result.metrics)
    assert {r["images"] for r in result.tables["robustness"]} <= {6}
    quality = ROBUST[name][0].removeprefix("clean_")
    assert f"fgsm_0.03_{quality}" in result.metrics and f"pgd_0.03_{quality}" in result.metrics  # on the task loss
    moved = {
        "detr": "fgsm_0.03_agree_map_50",
        "segformer": "fgsm_0.03_pixel_agree",
        "dinov2": "fgsm_0.03_embedding_drift",
    }
    value = result.metrics[moved[name]]
    assert (value > 0) if name == "dinov2" else (value <= 1)  # the attack moved the outputs (a zero step would not)


def test_answer_loss_is_the_models_own_loss_on_the_answer_tokens(dirs):
    """The window's scored positions give the loss transformers computes from ``labels`` (the answer
    tokens and the end token, shifted inside the model)."""
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.kinds.table import named
    from modelxray.measure.scoring import score_windows
    from modelxray.metrics.windows import IGNORE

    loaded = HFSource(name_or_path=str(dirs["llava"]), device="cpu").load()
    data = named("image_text_to_text").examples_for(PydocTopics(examples=3), loaded, False)
    w = data.windows[0]
    inputs = {k: v[None] for k, v in w.inputs.items()}
    labels = torch.full_like(inputs["input_ids"], IGNORE)
    scored = (w.targets != IGNORE).nonzero()[:, 0]
    labels[0, scored + 1] = inputs["input_ids"][0, scored + 1]  # HF shifts labels by one inside
    with torch.no_grad():
        expected = loaded.model(**inputs, labels=labels).loss
    score, _ = score_windows(loaded.model, [w], 1, [1], False, "")
    assert score.result()["loss"] == pytest.approx(float(expected), rel=1e-5)
    answer = loaded.tokenizer.decode(inputs["input_ids"][0, scored + 1], skip_special_tokens=True)
    assert answer.strip() == data.meta["references"][0].strip()  # the scored tokens are the answer


def test_a_vision_language_dataloader_with_hf_labels_scores_the_models_own_loss(dirs):
    """Batches as transformers' Trainer takes them (``labels`` aligned with ``input_ids``, shifted
    inside the model) give the windows whose loss is the model's own."""
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.kinds.table import kind_of, named
    from modelxray.measure.scoring import score_windows
    from modelxray.metrics.windows import IGNORE

    loaded = HFSource(name_or_path=str(dirs["llava"]), device="cpu").load()
    w = named("image_text_to_text").examples_for(PydocTopics(examples=1), loaded, False).windows[0]
    batch = {k: v[None] for k, v in w.inputs.items()}
    labels = torch.full_like(batch["input_ids"], IGNORE)
    scored = (w.targets != IGNORE).nonzero()[:, 0]
    labels[0, scored + 1] = batch["input_ids"][0, scored + 1]
    with torch.no_grad():
        expected = loaded.model(**batch, labels=labels).loss
    data = kind_of(loaded).data_from_batches(loaded, [{**batch, "labels": labels}], "dataloader")
    score, _ = score_windows(loaded.model, data.windows, 1, [1], False, "")
    assert score.result()["loss"] == pytest.approx(float(expected), rel=1e-5)


def test_every_analyzer_runs_on_a_vision_language_model(dirs, tmp_path):
    import modelxray

    args = ["model=hf", f"model.name_or_path={dirs['llava']}", "tracker=none", "progress=false", "dataset.examples=4"]
    analyzers = "analyzer=[inspect,quant_impact,bitwidth,robustness]"
    fast = [
        "analyzer.quant_impact.strategies=[none,int8,gptq_int4]",
        "dataset.calibration_windows=8",
        "analyzer.bitwidth.max_windows=4",
        "analyzer.bitwidth.sensitivity_windows=2",
        "analyzer.robustness.seeds=1",
        "analyzer.robustness.pgd_eps=[]",
        "report.dashboard=false",
    ]
    out = modelxray.analyze([*args, analyzers, *fast], output_dir=tmp_path)
    assert all(r.ok for r in out.results.values()), {k: r.error for k, r in out.results.items() if not r.ok}
    assert not out.results["quant_impact"].tables["unsupported"]  # GPTQ on questions about train digits
    tables = out.results["bitwidth"].tables.values()
    towers = {row["tower"] for rows in tables for row in rows if isinstance(row, dict) and "tower" in row}
    assert {"vision", "text"} <= towers  # each tower's blocks apart
    robust = out.results["robustness"]
    assert robust.data["attack_space"] == "pixels" and "fgsm_0.1_kl" in robust.metrics


def test_vision_language_attacks_step_in_pixels_inside_the_range(dirs):
    """The harness undoes the processor's normalisation exactly, and FGSM moves every pixel by at
    most eps inside [0, 1], raising the answer loss."""
    from modelxray.api import compose
    from modelxray.app.loading import load_subject
    from modelxray.config.components import build_components
    from modelxray.perturb.vision_language_harness import VisionLanguageHarness

    cfg = compose(["model=hf", f"model.name_or_path={dirs['llava']}", "dataset.examples=2"])
    subject, _ = load_subject(cfg, build_components(cfg))
    harness = VisionLanguageHarness(
        subject.model, subject.data.windows[:2], subject.tokenizer, subject.processor, 2, 2, False
    )
    inputs, targets = harness.ref.batches[0]
    x0 = harness._pixels(inputs)
    assert torch.allclose(harness._with_pixels(inputs, x0)["pixel_values"], inputs["pixel_values"], atol=1e-5)
    grad = harness._pixel_grad_fn(inputs, targets)(x0)
    from modelxray.perturb.attacks import fgsm

    x = fgsm(x0, grad, 0.05, (0.0, 1.0))
    assert (x - x0).abs().max() <= 0.05 + 1e-6 and x.min() >= 0 and x.max() <= 1
    m = harness.attack([0.05], 0, None, False, torch.Generator().manual_seed(0), 2, "")[0.05]["fgsm"]
    assert m["loss"] > harness.clean["loss"]


@pytest.mark.parametrize("name, quality", [("dinov2", "knn_accuracy"), ("segformer", "miou")])
def test_quant_impact_compares_strategies_by_the_task_and_calibrates_on_train_canvases(name, quality, dirs, tmp_path):
    import modelxray

    args = ["model=hf", f"model.name_or_path={dirs[name]}", "analyzer=quant_impact", "tracker=none", "progress=false"]
    fast = ["analyzer.quant_impact.strategies=[none,int8,gptq_int4]", "analyzer.quant_impact.iters=1"]
    out = modelxray.analyze([*args, *fast, "dataset.examples=6", "report.dashboard=false"], output_dir=tmp_path)
    result = out.results["quant_impact"]
    assert result.ok, result.error
    rows = {r["strategy"]: r for r in result.tables["strategies"]}
    assert rows["none"]["top1_agree"] == pytest.approx(1.0) and quality in rows["int8"]
    assert rows["int8"]["accuracy"] == rows["int8"][quality]  # the task's quality is the compared axis
    # GPTQ calibrates on canvases of the train split, block by block; SegFormer's decode head is
    # parallel projections (each reads its own encoder stage), calibrated in a whole-model forward
    assert not result.tables["unsupported"] and 0 < rows["gptq_int4"]["top1_agree"] <= 1
    # scored as a classifier is (accuracy, examples/s), its speed-vs-quality figure is drawn
    assert (tmp_path / "plots" / "quant_impact_speed_vs_quality.png").is_file()


def test_parallel_heads_are_calibrated_on_their_own_inputs(dirs):
    """A ModuleList whose blocks each read their own input (SegFormer's decode head) is not a chain:
    GPTQ quantizes its first block from the captured inputs and the rest from a forward of the whole
    model, and says so; every planned Linear is quantized."""
    from modelxray.quant.calibration import Calibration
    from modelxray.quant.gptq import GPTQQuantizer

    loaded = HFSource(name_or_path=str(dirs["segformer"]), device="cpu").load()
    images = torch.rand(4, *loaded.image_shape)
    q = GPTQQuantizer(bits=4, group_size=16)
    model, report = q.quantize(loaded.model, Calibration([images], "random images", progress=False))
    notes = " ".join(report.insights)
    assert "Not chains of blocks" in notes and "decode_head.linear_projections" in notes
    heads = [r for r in report.tables["layers"] if ".decode_head.linear_projections." in r["module"]]
    assert len(heads) == 2 and all(r["bits"] == 4 for r in heads)


@pytest.mark.parametrize("name", ["segformer", "dinov2"])
def test_bitwidth_ranks_blocks_by_agreement_and_budgets_the_task_quality(name, dirs, tmp_path):
    import modelxray

    args = ["model=hf", f"model.name_or_path={dirs[name]}", "analyzer=bitwidth", "tracker=none", "progress=false"]
    fast = ["analyzer.bitwidth.uniform_bits=[8,2]", "dataset.examples=6", "report.dashboard=false"]
    out = modelxray.analyze([*args, *fast], output_dir=tmp_path)
    result = out.results["bitwidth"]
    assert result.ok, result.error
    sens = result.tables["layer_sensitivity"]
    assert sens and all(0 <= r["disagreement"] <= 1 for r in sens)
    rows = {r["config"]: r for r in result.tables["configurations"]}
    assert rows["uniform_int8"]["top1_agree"] > rows["uniform_int2"]["top1_agree"]  # 2 bits moves more
    assert any("agreement with the unquantized outputs" in s for s in result.sentences())


def test_the_quantization_analyzer_benchmarks_a_vision_language_model_directory(dirs, tmp_path):
    """``get_quantization_analyzer(DIR).run_benchmark(...)`` gives the same result fields on a LLaVA
    directory as on a CLIP-style model."""
    from modelxray.quantization_api import get_quantization_analyzer

    config = ["dataset.examples=4", "tracker=none", "progress=false", "report.dashboard=false"]
    bench = get_quantization_analyzer(dirs["llava"], config, tmp_path).run_benchmark(["none", "int8"])
    assert bench.task == "image_text_to_text" and bench.quality_metric == "answer perplexity (teacher-forced)"
    assert [r.strategy for r in bench.results] == ["none", "int8"] and bench.recommended in ("none", "int8")
    int8 = bench.results[1]
    assert int8.perplexity > 0 and 0 <= int8.top1_agree <= 1 and int8.memory_used_gb < bench.results[0].memory_used_gb


def test_a_users_questions_about_images_score_a_vision_language_model(dirs, tmp_path):
    import json

    from PIL import Image

    import modelxray

    folder = tmp_path / "vqa"
    folder.mkdir()
    rows = []
    for i, colour in enumerate(("red", "green", "blue")):
        Image.new("RGB", (20, 20), {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}[colour]).save(
            folder / f"{i}.png"
        )
        rows.append({"image": f"{i}.png", "prompt": "What colour is this?", "answer": colour})
    (folder / "q.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    args = [
        "model=hf",
        f"model.name_or_path={dirs['llava']}",
        "dataset=image_questions",
        f"dataset.path={folder / 'q.jsonl'}",
    ]
    fast = ["analyzer=performance", "analyzer.performance.iters=1", "analyzer.performance.max_new_tokens=3"]
    out = modelxray.analyze(
        [*args, *fast, "tracker=none", "progress=false", "report.dashboard=false"], output_dir=tmp_path
    )
    m = out.results["performance"].metrics
    assert m["windows_scored"] == 3 and m["loss_se"] >= 0 and "exact_match" in m
    (folder / "bad.jsonl").write_text(json.dumps({"image": "nope.png", "prompt": "?", "answer": "x"}))
    with pytest.raises(ConfigError, match=r"^dataset.path: .*bad.jsonl row 1: image 'nope.png' is not in"):
        modelxray.analyze([*args[:3], f"dataset.path={folder / 'bad.jsonl'}", "tracker=none"])


@pytest.mark.parametrize("name, key", [("detr", "map_50"), ("segformer", "miou"), ("llava", "perplexity")])
def test_any_transformers_vision_model_in_memory_is_analyzed_as_its_kind(name, key, dirs, tmp_path):
    """``modelxray.analyze(model=..., processor=...)`` on the objects a user already holds."""
    import transformers

    import modelxray

    auto = {"detr": "AutoModelForObjectDetection", "segformer": "AutoModelForSemanticSegmentation"}
    auto["llava"] = "AutoModelForImageTextToText"
    net = getattr(transformers, auto[name]).from_pretrained(dirs[name])
    loader = transformers.AutoProcessor if name == "llava" else transformers.AutoImageProcessor
    processor = loader.from_pretrained(dirs[name])
    args = ["analyzer=performance", "analyzer.performance.iters=1", "analyzer.performance.max_new_tokens=2"]
    args += ["dataset.examples=4", "tracker=none", "progress=false", "report.dashboard=false"]
    out = modelxray.analyze(args, model=net, processor=processor, output_dir=tmp_path)
    assert key in out.results["performance"].metrics
    if name == "detr":
        with pytest.raises(
            ConfigError, match=r"^processor: DetrForObjectDetection is an object detector: pass its image processor"
        ):
            modelxray.analyze(args, model=net)


def _vision_loader(kind: str):
    """Two batches of 2 canvases at 48 px (the models read 64): torchvision-style detection targets,
    masks, or one label per image."""
    from modelxray.data.digit_canvases import DigitCanvases

    d = DigitCanvases(examples=4, max_digits=2).load(canvas_size=48, channels=3)
    batches = []
    for rows in (slice(0, 2), slice(2, 4)):
        if kind == "object_detection":
            target = [{"boxes": b, "labels": lab} for b, lab in zip(d.boxes[rows], d.labels[rows])]
        else:
            target = d.masks[rows] if kind == "semantic_segmentation" else d.image_labels[rows]
        batches.append((d.images[rows], target))
    return d, batches


@pytest.mark.parametrize("name, kind", [("detr", "object_detection"), ("segformer", "semantic_segmentation")])
def test_a_dataloader_of_labelled_images_is_what_a_vision_kind_scores(name, kind, dirs, tmp_path):
    from modelxray import ModelAnalyzer
    from modelxray.kinds.table import named

    d, batches = _vision_loader(kind)
    data = named(kind).images_from_loader(batches, (3, 64, 64))
    assert data.images.shape == (4, 3, 64, 64)
    if kind == "object_detection":  # boxes scaled with the images, 48 -> 64 px
        assert torch.allclose(data.boxes[0], d.boxes[0] * 64 / 48) and data.labels[0].tolist() == d.labels[0].tolist()
    else:
        assert data.masks.shape == (4, 64, 64) and set(data.masks.unique().tolist()) <= set(d.masks.unique().tolist())
    fast = ["analyzer=performance", "analyzer.performance.iters=1", "analyzer.performance.bootstrap=3"]
    fast += ["analyzer.performance.detection_bootstrap=3", "tracker=none", "progress=false", "report.dashboard=false"]
    analyzer = ModelAnalyzer(dirs[name], fast, output_dir=tmp_path)
    m = analyzer.analyze_performance(batches)["metrics"]
    assert m["examples"] == 4 and ("map_50" in m if kind == "object_detection" else "miou" in m)
    with pytest.raises(
        ConfigError, match=r"^data_loader: yields .* a detector's DataLoader yields \(images, targets\)"
    ):
        ModelAnalyzer(dirs["detr"], fast, output_dir=tmp_path).analyze_performance([torch.zeros(2, 3, 8, 8)])


def test_a_detector_without_its_image_processor_is_one_line(dirs, tmp_path):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(dirs["detr"], bare)
    (bare / "preprocessor_config.json").unlink()
    with pytest.raises(ConfigError, match=r"^model.name_or_path: .* has no preprocessor_config.json: a detector"):
        HFSource(name_or_path=str(bare), device="cpu").load()


def test_a_text_dataset_becomes_canvases_and_a_foreign_one_is_one_line(dirs, tmp_path):
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.data.user_text import LabelledText
    from modelxray.kinds.table import named

    loaded = HFSource(name_or_path=str(dirs["dinov2"]), device="cpu").load()
    data = named("image_features").examples_for(PydocTopics(), loaded)
    assert data.images.shape[1:] == (3, 64, 64) and all(len(lab) == 1 for lab in data.labels)  # one digit each
    with pytest.raises(ConfigError, match=r"^dataset: labelled_text:l.csv does not fit a image_features model"):
        (tmp_path / "l.csv").write_text("text,label\na,0\n")
        named("image_features").examples_for(LabelledText(path=str(tmp_path / "l.csv")), loaded)


# -- the canvases -------------------------------------------------------------------------------
def test_canvases_are_seeded_and_every_box_holds_its_digits_pixels():
    a, b = DigitCanvases(examples=12, seed=3).load(), DigitCanvases(examples=12, seed=3).load()
    assert torch.equal(a.images, b.images) and all(torch.equal(x, y) for x, y in zip(a.boxes, b.boxes))
    for img, boxes, labels, mask in zip(a.images, a.boxes, a.labels, a.masks):
        assert 1 <= len(labels) <= 3
        inside = torch.zeros_like(mask, dtype=torch.bool)
        for (x0, y0, x1, y1), lab in zip(boxes.int().tolist(), labels.tolist()):
            region = mask[y0:y1, x0:x1]
            assert (region == lab + 1).any()
            inside[y0:y1, x0:x1] = True
        assert not (mask[~inside] > 0).any()  # no labelled pixel outside every box
    bigger = DigitCanvases(examples=2).load(canvas_size=128)
    assert bigger.images.shape[-1] == 128 and "digits of 32 px" in bigger.description  # digits scale too


# -- each metric against a hand computation ----------------------------------------------------
def _boxes(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_coco_map_of_hand_made_boxes():
    truth = [
        {"boxes": _boxes([0, 0, 10, 10], [20, 20, 30, 30]), "labels": torch.tensor([1, 2])},
        {"boxes": _boxes([5, 5, 15, 15]), "labels": torch.tensor([3])},
    ]
    perfect = [{"boxes": t["boxes"], "scores": torch.ones(len(t["labels"])), "labels": t["labels"]} for t in truth]
    m = coco_map(perfect, truth, bootstrap=5)
    assert m["map"] == pytest.approx(1.0) and m["map_50"] == pytest.approx(1.0) and m["map_se"] < 1e-9
    # image 2's box labelled 2 and scored above the true class-2 box: class 2 has precision 1/2 at
    # full recall (AP 0.5), class 3 is never found (AP 0), class 1 is perfect: mean 0.5
    wrong = [perfect[0], {"boxes": _boxes([5, 5, 15, 15]), "scores": torch.tensor([2.0]), "labels": torch.tensor([2])}]
    assert coco_map(wrong, truth, bootstrap=0)["map"] == pytest.approx(0.5)
    # a box shifted to IoU 0.626 with its truth counts at IoU .5, .55 and .6 only: 3 of the 10 thresholds
    shifted = [
        {"boxes": _boxes([0, 0, 10, 10], [20, 20, 30, 30]), "scores": torch.ones(2), "labels": torch.tensor([1, 2])},
        {"boxes": _boxes([7.5, 5, 17.5, 15]), "scores": torch.ones(1), "labels": torch.tensor([3])},
    ]
    iou = (7.5 * 10) / (10 * 10 * 2 - 7.5 * 10)
    assert iou == pytest.approx(0.6)
    m = coco_map(shifted, truth, bootstrap=0)
    assert m["map_50"] == pytest.approx(1.0) and m["map"] == pytest.approx((1 + 1 + 3 / 10) / 3)


def test_mean_iou_and_pixel_accuracy_by_hand():
    truth = torch.tensor([[[0, 0], [1, 1]], [[2, 2], [2, 0]]])
    pred = torch.tensor([[[0, 1], [1, 1]], [[2, 2], [0, 0]]])
    m = segmentation_scores(pred, truth, 3, bootstrap=20)
    # class 0: inter 2 (img1 (0,0), img2 (1,1)), union 2+1+1 = 4 -> 0.5 ... counted by hand:
    # truth 0 pixels: img1 (0,0),(0,1); img2 (1,1) -> 3; pred 0: img1 (0,0); img2 (1,0),(1,1) -> 3; both: 2
    iou0 = 2 / (3 + 3 - 2)
    iou1 = 2 / (2 + 3 - 2)  # truth 1: img1 row 1; pred 1: img1 (0,1), row 1
    iou2 = 2 / (3 + 2 - 2)
    assert m["miou"] == pytest.approx((iou0 + iou1 + iou2) / 3)
    assert m["pixel_accuracy"] == pytest.approx(6 / 8) and m["miou_se"] >= 0
    # ignored truth pixels (-1) are not scored: here every wrong pixel is ignored
    ignored = truth.masked_fill(pred != truth, -1)
    m = segmentation_scores(pred, ignored, 3, bootstrap=20)
    assert m["miou"] == 1.0 and m["pixel_accuracy"] == 1.0


def test_knn_accuracy_and_drift_by_hand():
    z = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.8, 0.2], [0.0, 1.0], [0.1, 0.9], [0.2, 0.8]])
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    m = knn_accuracy(z, labels, k=2)
    assert m["knn_accuracy"] == 1.0 and m["knn_accuracy_ci_high"] == pytest.approx(1.0)
    flipped = torch.tensor([0, 0, 1, 1, 1, 1])  # the third point's two nearest are class 0: wrong
    assert knn_accuracy(z, flipped, k=2)["knn_accuracy"] == pytest.approx(5 / 6)
    d = cosine_drift(z, z)
    assert d["embedding_drift"] == pytest.approx(0.0, abs=1e-12)
    rotated = torch.tensor([[0.0, 1.0]]).expand(6, 2)
    d = cosine_drift(torch.tensor([[1.0, 0.0]]).expand(6, 2), rotated)
    assert d["embedding_drift"] == pytest.approx(1.0) and math.isclose(d["embedding_drift_se"], 0.0, abs_tol=1e-12)


def test_pixels_are_normalised_as_the_image_processor_says():
    from modelxray.models.hf_vision import normalisation

    imagenet = {"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
    assert normalisation(imagenet, 3)[:2] == (imagenet["image_mean"], imagenet["image_std"])
    # RT-DETR's processor carries ImageNet statistics but does not apply them
    assert normalisation({**imagenet, "do_normalize": False}, 3) == ([0.0] * 3, [1.0] * 3, [])
    mean, std, notes = normalisation({}, 1)
    assert (mean, std) == ([0.0], [1.0]) and "No image processor" in notes[0]
    assert normalisation({"image_mean": [0.5], "image_std": [0.5]}, 3)[:2] == ([0.5] * 3, [0.5] * 3)


def test_a_plan_quantizes_each_tower_and_the_projector_of_a_vision_language_model(dirs, tmp_path):
    import modelxray

    rules = "quant.rules=[{component: vision, bits: 8}, {component: projection, bits: 6}, {component: text, bits: 4}]"
    args = ["model=hf", f"model.name_or_path={dirs['llava']}", "quant=custom", rules, "analyzer=inspect"]
    out = modelxray.analyze([*args, "tracker=none", "progress=false", "report.dashboard=false"], output_dir=tmp_path)
    bits = {}
    for row in out.results["quant"].tables["layers"]:
        part = "projector" if "multi_modal_projector" in row["module"] else row["module"].split(".")[1]
        bits.setdefault(part, set()).add(row["bits"])
    assert bits["vision_tower"] == {8} and bits["projector"] == {6}
    assert bits["language_model"] == {4}  # the text tower


def test_a_mask_query_segmenter_is_scored_by_its_semantic_maps(dirs, tmp_path):
    """Mask2Former's per-pixel classes are those its image processor's semantic post-processing
    gives, and it runs as a segmenter: mean IoU, and agreement after quant=."""
    from transformers import Mask2FormerImageProcessor

    import modelxray

    loaded = HFSource(name_or_path=str(dirs["mask2former"]), device="cpu").load()
    assert str(loaded.kind) == "semantic_segmentation"
    x = torch.rand(2, *loaded.image_shape)
    with torch.no_grad():
        ours = loaded.model(x).logits
        raw = loaded.model.net(pixel_values=(x - loaded.model.mean) / loaded.model.std)
    processor = Mask2FormerImageProcessor.from_pretrained(dirs["mask2former"])
    theirs = processor.post_process_semantic_segmentation(raw, target_sizes=[tuple(ours.shape[-2:])] * 2)
    assert torch.equal(ours.argmax(1), torch.stack(theirs))
    args = ["model=hf", f"model.name_or_path={dirs['mask2former']}", "quant=int8", "tracker=none", *SMALL]
    m = modelxray.analyze(args, output_dir=tmp_path).results["performance"].metrics
    assert 0 <= m["miou"] <= 1 and m["miou_se"] >= 0 and "pixel_agree" in m


@pytest.fixture(scope="module")
def vlm_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlms")
    names = ("idefics3", "paligemma", "llava_next", "blip2")
    return {name: vision_task_models.ALL_VLMS[name](root / name) for name in names}


# the four architectures' checks run in pytest -m slow, LLaVA-NeXT's in every run of the suite
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) for n in ("idefics3", "paligemma", "blip2")] + ["llava_next"]
)
def test_smolvlm_paligemma_llava_next_and_blip2_run_every_analyzer(name, vlm_dirs, tmp_path):
    """SmolVLM's architecture (Idefics3: image tiles, row and column tokens, a chat template),
    PaliGemma (answer passed as the processor's suffix), LLaVA-NeXT (any-resolution tiles) and
    BLIP-2 (a Q-Former whose query tokens its processor places): quality with its uncertainty and
    agreement after quant=; robustness with pixel attacks and prompt substitution; GPTQ in
    quant_impact; BLIP-2's FLOP count."""
    import modelxray

    base = ["model=hf", f"model.name_or_path={vlm_dirs[name]}", "tracker=none", "progress=false", "dataset.examples=3"]
    base += ["report.dashboard=false"]
    perf = [
        "quant=int8",
        "analyzer=[performance,inspect]" if name == "blip2" else "analyzer=performance",  # BLIP-2: its FLOP count
        "analyzer.performance.iters=1",
        "analyzer.performance.max_new_tokens=2",
    ]
    first = modelxray.analyze([*base, *perf], output_dir=tmp_path / "p")
    m = first.results["performance"].metrics
    assert m["loss_se"] >= 0 and m["kl"] >= 0 and "top1_agree" in m and "exact_match" in m
    if name == "blip2":
        assert first.results["inspect"].ok and not first.results["inspect"].metrics.get("compute_failed")
    rest = [
        "analyzer=[robustness,quant_impact]",
        "analyzer.robustness.seeds=1",
        "analyzer.robustness.pgd_eps=[]",
        "analyzer.robustness.substitution_rates=[0.5]",
        "analyzer.quant_impact.strategies=[none,gptq_int4]",
        "analyzer.quant_impact.iters=1",
        "dataset.calibration_windows=3",
    ]
    out = modelxray.analyze([*base, *rest], output_dir=tmp_path / "r")
    assert all(r.ok for r in out.results.values()), {k: r.error for k, r in out.results.items() if not r.ok}
    assert not out.results["quant_impact"].tables["unsupported"]
    assert "token_substitution_0.5_kl" in out.results["robustness"].metrics


def test_paligemma_scores_its_answer_causally_on_its_own_prompt_layout(vlm_dirs):
    """PaliGemma reads its prefix both ways and its answer causally: a later answer token must not
    move the scores of the positions before it, and the prompt is the image, then the question."""
    from modelxray.data.image_questions import answer_windows, digit_images, prompt_for
    from modelxray.metrics.windows import IGNORE

    loaded = HFSource(name_or_path=str(vlm_dirs["paligemma"]), device="cpu").load()
    prompt = prompt_for(loaded.processor, "What digit is this?")
    assert prompt.startswith(loaded.processor.image_token) and "USER" not in prompt
    images, _ = digit_images(1, 0)
    (w,) = answer_windows(loaded.processor, images, [prompt], [" 7 7"], "t", "").windows
    scored = (w.targets != IGNORE).nonzero().flatten()
    assert "labels" not in w.inputs and len(scored) >= 2
    inputs = {k: v[None] for k, v in w.inputs.items()}
    changed = {**inputs, "input_ids": inputs["input_ids"].clone()}
    changed["input_ids"][0, -1] = (changed["input_ids"][0, -1] + 1) % loaded.model.config.text_config.vocab_size
    with torch.no_grad():
        a = loaded.model(**inputs).logits[0, scored[:-1]]
        b = loaded.model(**changed).logits[0, scored[:-1]]
    assert torch.equal(a, b)


def test_calibration_replays_carry_no_growing_kv_cache(dirs):
    """GPTQ replays each block on its captured inputs twice: a KV cache among them would grow at
    every replay (PaliGemma's masks then fail; Llama's silently read stale keys)."""
    from transformers.cache_utils import Cache

    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.kinds.table import named
    from modelxray.quant.calibration import BlockInputs, Calibration, block_stacks

    loaded = HFSource(name_or_path=str(dirs["llava"]), device="cpu").load()
    w = named("image_text_to_text").examples_for(PydocTopics(examples=1), loaded, False).windows[0]
    calibration = Calibration([w.inputs.stack([w.inputs])], "one question", progress=False)
    for _, blocks in block_stacks(loaded.model):
        inputs = BlockInputs(loaded.model, blocks, calibration, 1)
        assert not any(isinstance(v, Cache) for kw in inputs.kwargs for v in kw.values())
        before = [h.shape for h in inputs.hidden]
        inputs.run(blocks[0], update=True)
        inputs.run(blocks[0], update=False)
        assert [h.shape for h in inputs.hidden] == before


def test_a_processor_that_needs_a_missing_package_is_one_line(dirs, monkeypatch):
    """Qwen2-VL's processor needs torchvision (its video processor): one line naming it, not a traceback."""
    import transformers

    from modelxray.models.hf_tasks import load_multimodal_processor

    def missing(*_a, **_k):
        raise ImportError("Qwen2VLVideoProcessor requires the Torchvision library but it was not found")

    monkeypatch.setattr(transformers.AutoProcessor, "from_pretrained", missing)
    with pytest.raises(ConfigError, match=r"^model.name_or_path: cannot load the processor .*requires the Torchvision"):
        load_multimodal_processor(str(dirs["llava"]), {})


def test_unquantized_outputs_that_cannot_be_computed_fail_performance_only(dirs, tmp_path, monkeypatch):
    import modelxray
    from modelxray.measure import reference_outputs

    def broken(*_a, **_k):
        raise RuntimeError("the model cannot run its reference pass")

    monkeypatch.setattr(reference_outputs, "capture", broken)
    args = ["model=hf", f"model.name_or_path={dirs['dinov2']}", "quant=int8", "analyzer=[performance,inspect]"]
    args += ["analyzer.inspect.compute=false"]  # weights only: quick
    out = modelxray.analyze([*args, "tracker=none", "progress=false", "report.dashboard=false"], output_dir=tmp_path)
    assert out.failed == ["performance"] and out.results["inspect"].ok
    assert "unquantized model's outputs could not be computed" in out.results["performance"].error
    assert (tmp_path / "summary_report.md").is_file()


def test_the_dashboard_headline_of_a_vision_task_is_its_quality_with_uncertainty():
    from modelxray.analyzers.performance.plots import quality_line
    from modelxray.core.result import Result

    detector = Result("performance", metrics={"map": 0.7, "map_50": 0.92, "map_50_se": 0.022})
    assert quality_line(detector, short=True) == "mAP@.5 0.920 ± 0.022"
    backbone = Result(
        "performance", metrics={"knn_accuracy": 0.44, "knn_accuracy_ci_low": 0.32, "knn_accuracy_ci_high": 0.56}
    )
    assert quality_line(backbone) == "k-NN accuracy 0.440 (0.32-0.56)"


@pytest.mark.parametrize(
    ("name", "same", "moved"), [("dinov2", "embedding_drift", None), ("segformer", "pixel_agree", 1.0)]
)
def test_a_vision_model_compares_with_a_reference_model(name, same, moved, dirs, tmp_path):
    """reference= on a vision kind: the reference's outputs on the same images (the same directory:
    no drift, every pixel agreeing; another set of weights: drift), cached by content."""
    import shutil

    import modelxray
    from modelxray.core.errors import ConfigError

    other = tmp_path / "other"
    shutil.copytree(dirs[name], other)
    from transformers import AutoModel

    model = AutoModel.from_pretrained(other) if name == "dinov2" else None
    args = ["model=hf", f"model.name_or_path={dirs[name]}", "tracker=none", "progress=false", *SMALL]
    args += [f"runtime.reference_cache_dir={tmp_path / 'cache'}"]
    out = modelxray.analyze([*args, "reference=hf", f"reference.name_or_path={other}"], output_dir=tmp_path / "a")
    m = out.metrics
    assert not out.failed, out.results["performance"].error
    if name == "dinov2":
        assert m["performance/embedding_drift"] == pytest.approx(0, abs=1e-6)
        torch.manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        model.save_pretrained(other)
        out = modelxray.analyze([*args, "reference=hf", f"reference.name_or_path={other}"], output_dir=tmp_path / "b")
        assert out.metrics["performance/embedding_drift"] > 1e-3
        assert "cosine drift from the embeddings of the reference" in " ".join(out.results["performance"].sentences())
    else:
        assert m["performance/pixel_agree"] == pytest.approx(moved)
    assert list((tmp_path / "cache").glob("*.pt"))  # kept for the next run of the sweep
    with pytest.raises(
        ConfigError, match=r"^reference: the .* is a image_features model and .* a semantic_segmentation"
    ):  # a backbone is no reference for a segmenter
        modelxray.analyze(
            [
                *args,
                "reference=hf",
                f"reference.name_or_path={dirs['dinov2']}",
                f"model.name_or_path={dirs['segformer']}",
            ],
            output_dir=tmp_path / "c",
        )
