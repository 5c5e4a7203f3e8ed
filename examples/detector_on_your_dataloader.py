"""A transformers detector on your own DataLoader: what int8 and int4 do to its detections.

The DataLoader yields what torchvision's detection datasets give: a batch of images in [0, 1] and,
per image, a dict of its boxes (x0, y0, x1, y1 in pixels) and labels. modelxray resizes both to
the detector's input, scores mAP against your boxes (pycocotools, with bootstrap errors) and, after
``quant=``, the quantized detections against the unquantized model's own, a comparison that means
something even before the model is trained (as here: a small RT-DETR with random weights).

    python examples/detector_on_your_dataloader.py
"""

import tempfile

import torch
from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrImageProcessor, RTDetrResNetConfig

import modelxray


def rectangles(n: int, side: int = 96, seed: int = 0):
    """Images with one to three bright rectangles each, their boxes and labels (0 = wide, 1 = tall)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.zeros(n, 3, side, side)
    targets = []
    for i in range(n):
        boxes, labels = [], []
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            w, h = (int(v) for v in torch.randint(12, 40, (2,), generator=g))
            x, y = (
                int(torch.randint(0, side - w, (1,), generator=g)),
                int(torch.randint(0, side - h, (1,), generator=g)),
            )
            images[i, :, y : y + h, x : x + w] = 0.9
            boxes.append([x, y, x + w, y + h])
            labels.append(0 if w >= h else 1)
        targets.append({"boxes": torch.tensor(boxes, dtype=torch.float32), "labels": torch.tensor(labels)})
    return images, targets


def loader(n: int = 16, batch_size: int = 4):
    images, targets = rectangles(n)
    return [(images[i : i + batch_size], targets[i : i + batch_size]) for i in range(0, n, batch_size)]


torch.manual_seed(0)
backbone = RTDetrResNetConfig(
    embedding_size=16, hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], layer_type="basic",
    out_features=["stage2", "stage3", "stage4"],
)  # fmt: skip
config = RTDetrConfig(
    backbone_config=backbone, encoder_in_channels=[32, 48, 64], encoder_hidden_dim=32, encoder_ffn_dim=64,
    d_model=32, decoder_in_channels=[32, 32, 32], decoder_ffn_dim=64, decoder_layers=2, num_queries=10,
    encoder_attention_heads=2, decoder_attention_heads=2, id2label={0: "wide", 1: "tall"},
)  # fmt: skip
detector = RTDetrForObjectDetection(config).eval()
processor = RTDetrImageProcessor(size={"height": 64, "width": 64})  # it decodes the boxes

out_dir = tempfile.mkdtemp()
for quant in ("int8", "int4"):
    overrides = [f"quant={quant}", "analyzer=performance", "tracker=none", "progress=false", "report.dashboard=false"]
    out = modelxray.analyze(overrides, model=detector, processor=processor, dataloader=loader(), output_dir=out_dir)
    m = out.results["performance"].metrics
    print(
        f"{quant}: mAP@.5 against your boxes {m['map_50']:.3f} ± {m['map_50_se']:.3f}; "
        f"against the unquantized detections {m['unquantized_map_50']:.3f} ± {m['unquantized_map_50_se']:.3f} "
        f"({int(m['objects'])} objects in {int(m['images_scored'])} images)"
    )
    assert m["images_scored"] == 16 and 0 <= m["unquantized_map_50"] <= 1
    if quant == "int8":
        int8_agreement = m["unquantized_map_50"]
assert int8_agreement >= m["unquantized_map_50"] - 0.05, "int8 should move the detections no more than int4"
print(f"report: {out.output_dir}/summary_report.md")
