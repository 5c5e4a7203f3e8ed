"""A user's own labelled images for the vision kinds: a COCO-format folder (images + instances.json)
for detectors and segmenters (boxes scaled to the model's input, categories mapped to the model's
labels by name, masks drawn from polygons), a folder of images and masks for segmenters, and a
folder per class for backbones."""

import json

import pytest
import torch

import vision_task_models
from modelxray.core.errors import ConfigError
from modelxray.data.coco_folder import CocoFolder
from modelxray.data.mask_folder import MaskFolder


@pytest.fixture
def coco(tmp_path):
    from PIL import Image

    root = tmp_path / "scenes"
    root.mkdir()
    for i in range(3):
        Image.new("RGB", (40, 20), (10 * i, 0, 0)).save(root / f"{i}.png")
    spec = {
        "images": [{"id": i + 1, "file_name": f"{i}.png", "width": 40, "height": 20} for i in range(3)],
        "categories": [{"id": 7, "name": "Three"}, {"id": 9, "name": "cat"}],
        "annotations": [
            # image 1: a polygon of the top-left 10 x 10 pixels, category "Three" (the model's label 3)
            {
                "id": 1,
                "image_id": 1,
                "category_id": 7,
                "bbox": [0, 0, 10, 10],
                "area": 100,
                "iscrowd": 0,
                "segmentation": [[0, 0, 10, 0, 10, 10, 0, 10]],
            },
            # image 2: a box only, category "cat" (unknown to the model: its COCO id 9)
            {"id": 2, "image_id": 2, "category_id": 9, "bbox": [20, 10, 20, 10], "area": 200, "iscrowd": 0},
        ],
    }
    (root / "instances.json").write_text(json.dumps(spec))
    return root


def test_boxes_labels_and_masks_follow_the_model_input(coco):
    data = CocoFolder(root=str(coco)).load(canvas_size=80, channels=3, label2id={"three": 3})
    assert data.images.shape == (2, 3, 80, 80)  # the image without annotations is left out
    assert torch.allclose(data.boxes[0], torch.tensor([[0.0, 0.0, 20.0, 40.0]]))  # x scaled 2x, y 4x
    assert data.labels[0].tolist() == [3] and data.labels[1].tolist() == [9]
    # masks hold the model's class ids, as its class maps do; unannotated pixels are not scored (-1)
    assert (data.masks[0][:40, :20] == 3).float().mean() > 0.8 and (data.masks[0][40:] == -1).all()
    assert (data.masks[1][40:, 40:] == 9).all()  # a box without a polygon fills its box


def test_unannotated_pixels_are_the_models_background_class_when_it_names_one(coco):
    data = CocoFolder(root=str(coco)).load(canvas_size=80, channels=3, label2id={"three": 3, "Background": 0})
    assert (data.masks[0][40:] == 0).all() and (data.masks[0][:40, :20] == 3).float().mean() > 0.8


def test_gptq_calibrates_on_images_held_out_of_the_users_folder(coco, tmp_path):
    detr = vision_task_models.detr(tmp_path / "detr")
    args = ["model=hf", f"model.name_or_path={detr}", "dataset=coco_folder", f"dataset.root={coco}"]
    out = _fast_run(
        tmp_path, [*args, "dataset.calibration_images=1", "quant=gptq_int4", "quant.calibration_examples=1"]
    )
    assert out.results["performance"].metrics["images_scored"] == 1  # the held-out image is not scored
    notes = " ".join(out.results["quant"].insights)
    assert "1 images of coco_folder:scenes held out of the scoring" in notes, notes
    with pytest.raises(ConfigError, match=r"^calibration_images: holds out 2 of 2 images, leaving none"):
        CocoFolder(root=str(coco), calibration_images=2).load(canvas_size=80)


def test_a_missing_or_foreign_annotations_file_is_one_line(coco, tmp_path):
    with pytest.raises(ConfigError, match=r"^annotations: .*nope.json does not exist"):
        CocoFolder(root=str(coco), annotations="nope.json")
    (coco / "bad.json").write_text(json.dumps({"images": []}))
    with pytest.raises(ConfigError, match=r"^annotations: .*bad.json has no 'annotations' list"):
        CocoFolder(root=str(coco), annotations="bad.json").read()


def test_a_detector_runs_on_a_coco_folder(coco, tmp_path):
    import modelxray

    detr = vision_task_models.detr(tmp_path / "detr")
    args = ["model=hf", f"model.name_or_path={detr}", "dataset=coco_folder", f"dataset.root={coco}", "quant=int8"]
    fast = ["analyzer=performance", "analyzer.performance.iters=1", "analyzer.performance.detection_bootstrap=3"]
    out = modelxray.analyze(
        [*args, *fast, "tracker=none", "progress=false", "report.dashboard=false"], output_dir=tmp_path
    )
    m = out.results["performance"].metrics
    assert m["objects"] == 2 and m["images_scored"] == 2 and "unquantized_map_50" in m


def _fast_run(tmp_path, args):
    import modelxray

    fast = ["analyzer=performance", "analyzer.performance.iters=1", "analyzer.performance.bootstrap=3"]
    return modelxray.analyze(
        [*args, *fast, "tracker=none", "progress=false", "report.dashboard=false"], output_dir=tmp_path
    )


@pytest.fixture
def segments(tmp_path):
    """Two 20 x 20 images: a palette mask (VOC-style, 255 borders) and a greyscale one."""
    import numpy as np
    from PIL import Image

    root = tmp_path / "segments"
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True)
    for i in range(2):
        Image.new("RGB", (20, 20), (100 * i, 0, 0)).save(root / "images" / f"{i}.jpg")
    first = np.zeros((20, 20), dtype=np.uint8)
    first[:10] = 3
    first[10] = 255
    palette = Image.fromarray(first, mode="P")
    palette.putpalette([v for c in range(256) for v in (c, 255 - c, 0)])
    palette.save(root / "masks" / "0.png")
    Image.fromarray(np.full((20, 20), 5, dtype=np.uint8), mode="L").save(root / "masks" / "1.png")
    Image.new("RGB", (20, 20)).save(root / "images" / "unmasked.png")  # no mask: left out
    return root


def test_masks_are_class_ids_with_ignored_pixels_unscored(segments):
    data = MaskFolder(root=str(segments)).load(canvas_size=40, channels=3)
    assert data.images.shape == (2, 3, 40, 40) and data.masks.shape == (2, 40, 40)
    assert (data.masks[0][:18] == 3).all() and (data.masks[0][20:22] == -1).all() and (data.masks[0][24:] == 0).all()
    assert (data.masks[1] == 5).all() and data.image_labels.tolist() == [3, 5]  # each image's most common class
    reduced = MaskFolder(root=str(segments), reduce_labels=True).load(canvas_size=40, channels=3)
    assert (reduced.masks[0][:18] == 2).all() and (reduced.masks[0][24:] == -1).all()  # ADE20K: 0 is not scored


def test_a_mask_folder_without_masks_is_one_line(segments):
    with pytest.raises(ConfigError, match=r"^masks: folder .*nope does not exist"):
        MaskFolder(root=str(segments), masks="nope")
    for f in (segments / "masks").iterdir():
        f.unlink()
    with pytest.raises(ConfigError, match=r"^masks: no image in .* has a mask of the same name"):
        MaskFolder(root=str(segments))


def test_a_segmenter_runs_on_a_mask_folder(segments, tmp_path):
    segformer = vision_task_models.segformer(tmp_path / "segformer")
    args = [
        "model=hf",
        f"model.name_or_path={segformer}",
        "dataset=mask_folder",
        f"dataset.root={segments}",
        "quant=int8",
    ]
    m = _fast_run(tmp_path, args).results["performance"].metrics
    assert m["images_scored"] == 2 and 0 <= m["miou"] <= 1 and "miou_se" in m and "pixel_agree" in m


def test_a_backbone_runs_on_a_folder_per_class(tmp_path):
    from test_configs import _image_folder

    root = _image_folder(tmp_path / "classes")
    dinov2 = vision_task_models.dinov2(tmp_path / "dinov2")
    args = ["model=hf", f"model.name_or_path={dinov2}", "dataset=image_folder", f"dataset.root={root}", "quant=int8"]
    out = _fast_run(tmp_path, args)
    m = out.results["performance"].metrics
    assert m["examples"] == 6 and 0 <= m["knn_accuracy"] <= 1 and "embedding_drift" in m
