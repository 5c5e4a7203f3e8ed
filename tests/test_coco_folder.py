"""A user's COCO-format folder (images + instances.json) for detectors and segmenters: boxes scaled
to the model's input, categories mapped to the model's labels by name, masks drawn from polygons."""

import json

import pytest
import torch

import vision_task_models
from modelxray.core.errors import ConfigError
from modelxray.data.coco_folder import CocoFolder


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
    assert (data.masks[0][:40, :20] == 4).float().mean() > 0.8 and (data.masks[0][40:] == 0).all()
    assert (data.masks[1][40:, 40:] == 10).all()  # a box without a polygon fills its box


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
