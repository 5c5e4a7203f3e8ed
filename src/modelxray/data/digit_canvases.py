"""Scenes for detectors, segmenters and vision backbones, offline: scikit-learn's handwritten digits
pasted onto larger black canvases, with each digit's box and its pixels as labels.

Each canvas holds 1 to ``max_digits`` digits (8x8 images scaled up to ``digit_size`` pixels) at
seeded positions that do not overlap. A digit's box is the tight box around its ink (pixels above
``ink``), in pixel coordinates (x0, y0, x1, y1) of the canvas; its mask is those ink pixels, labelled
with the digit's class + 1 (0 is the background), as semantic segmentation datasets count. The
digits come from the test part of the digits split (``test_fraction``, ``split_seed``), so a model
trained on canvases of the train part is evaluated on digits it never saw.

Why our own: no detection or segmentation dataset ships with the environment, and these scenes
give real boxes, masks and labels that a small detector learns in minutes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from modelxray.core.configurable import Configurable
from modelxray.core.errors import ConfigError

if TYPE_CHECKING:
    import torch


@dataclass
class VisionTaskData:
    """Images (N, C, H, W) in [0, 1] with what a vision task scores them against: boxes (a list of
    (k, 4) xyxy pixel tensors) and their labels, masks (N, H, W) of the segmenter's class ids (-1:
    a pixel not scored; the canvases' segmenter counts 0 = background, c + 1 = digit c), and one label
    per image (its first digit) for k-NN accuracy of embeddings."""

    name: str
    images: torch.Tensor
    boxes: list[torch.Tensor]
    labels: list[torch.Tensor]
    masks: torch.Tensor
    image_labels: torch.Tensor
    class_names: list[str]
    description: str
    meta: dict[str, Any] = field(default_factory=dict)
    calibration: torch.Tensor | None = None  # images kept out of the scoring for GPTQ/AWQ (None: canvases)

    @property
    def n_examples(self) -> int:
        return int(self.images.shape[0])

    def first(self, n: int, **changes: Any) -> VisionTaskData:
        """The first ``n`` images with their labels (and ``changes`` to the other fields)."""
        import dataclasses

        return dataclasses.replace(
            self,
            images=self.images[:n],
            boxes=self.boxes[:n],
            labels=self.labels[:n],
            masks=self.masks[:n],
            image_labels=self.image_labels[:n],
            **changes,
        )

    def hold_out(self, n: int, key: str = "calibration_images") -> VisionTaskData:
        """The last ``n`` images kept for calibration only, the rest scored (``n`` = 0: all scored)."""
        if n <= 0:
            return self
        if n >= self.n_examples:
            raise ConfigError(key, f"holds out {n} of {self.n_examples} images, leaving none to score; lower it")
        keep = self.n_examples - n
        held = f"{self.description}; its last {n} images held out for calibration"
        return self.first(keep, description=held, calibration=self.images[keep:])


def paste_digits(
    digits: torch.Tensor,
    classes: torch.Tensor,
    n: int,
    canvas_size: int,
    digit_size: int,
    max_digits: int,
    seed: int,
    ink: float = 0.25,
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """``n`` grey canvases (n, 1, S, S) with their boxes, labels and masks, from ``digits`` (m, 8, 8)
    in [0, 1] of classes ``classes``; seeded by ``seed``."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(seed)
    big = F.interpolate(digits[:, None], size=(digit_size, digit_size), mode="bilinear", align_corners=False)[:, 0]
    big = big.clamp(0, 1)
    images = torch.zeros(n, 1, canvas_size, canvas_size)
    masks = torch.zeros(n, canvas_size, canvas_size, dtype=torch.long)
    boxes, labels = [], []
    for i in range(n):
        want = rng.randint(1, max_digits)
        placed: list[tuple[int, int]] = []
        b, lab = [], []
        for _ in range(50 * want):
            if len(placed) == want:
                break
            x, y = rng.randrange(canvas_size - digit_size + 1), rng.randrange(canvas_size - digit_size + 1)
            if any(abs(x - px) < digit_size and abs(y - py) < digit_size for px, py in placed):
                continue
            placed.append((x, y))
            k = rng.randrange(digits.shape[0])
            patch = big[k]
            images[i, 0, y : y + digit_size, x : x + digit_size] = patch
            on = patch > ink
            masks[i, y : y + digit_size, x : x + digit_size][on] = int(classes[k]) + 1
            rows, cols = on.any(1).nonzero(), on.any(0).nonzero()
            b.append([x + int(cols.min()), y + int(rows.min()), x + int(cols.max()) + 1, y + int(rows.max()) + 1])
            lab.append(int(classes[k]))
        boxes.append(torch.tensor(b, dtype=torch.float32).reshape(-1, 4))
        labels.append(torch.tensor(lab, dtype=torch.long))
    return images, boxes, labels, masks


@dataclass
class DigitCanvases(Configurable):
    modality: ClassVar[str] = "images"  # what its examples are: a model of another kind cannot use them
    examples: int = 64  # canvases
    canvas_size: int = 64  # side in pixels (a model that names its own input size gets canvases of that size)
    digit_size: int = 16  # side of each pasted digit (8x8 scaled up)
    max_digits: int = 3  # digits per canvas: 1 to this many
    channels: int = 3  # grey replicated to this many channels (null-free: most vision models take 3)
    seed: int = 0  # the positions and digits of every canvas
    test_fraction: float = 0.25  # the digits split: canvases are built from its test part
    split_seed: int = 0

    def validate(self) -> None:
        self.require_positive("examples", "canvas_size", "digit_size", "max_digits", "channels")
        if self.digit_size > self.canvas_size:
            raise ConfigError("digit_size", f"must fit the canvas ({self.canvas_size} px), got {self.digit_size}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ConfigError("test_fraction", f"must lie strictly between 0 and 1, got {self.test_fraction}")

    @property
    def name(self) -> str:
        return "digit_canvases"

    def load(
        self, tokenizer=None, canvas_size: int | None = None, channels: int | None = None, part: str = "test"
    ) -> VisionTaskData:
        """The canvases at ``canvas_size`` and ``channels`` (a model's own input; default: the keys),
        from the ``test`` part of the digits split (``train``: calibration canvases, never evaluated)."""
        import torch

        from modelxray.data.digits import load_digits_split

        size = canvas_size or self.canvas_size
        digit = min(max(4, round(self.digit_size * size / self.canvas_size)), size)  # digits scale with the canvas
        split = load_digits_split(self.test_fraction, self.split_seed)
        x, y = (split.x_train, split.y_train) if part == "train" else (split.x_test, split.y_test)
        grey, boxes, labels, masks = paste_digits(
            x.view(-1, 8, 8), y, self.examples, size, digit, self.max_digits, self.seed
        )
        images = grey.expand(-1, channels or self.channels, -1, -1).contiguous()
        n_obj = sum(len(lab) for lab in labels)
        desc = (
            f"{self.examples} canvases of {size}x{size} px with {n_obj} handwritten digits of {digit} px "
            f"(1 to {self.max_digits} each, seed {self.seed}) from the digits {part} split, with boxes and masks"
        )
        first = torch.tensor([int(lab[0]) for lab in labels])
        split_keys = {"test_fraction": self.test_fraction, "split_seed": self.split_seed}
        return VisionTaskData(
            self.name, images, boxes, labels, masks, first, [str(i) for i in range(10)], desc, {"split": split_keys}
        )
