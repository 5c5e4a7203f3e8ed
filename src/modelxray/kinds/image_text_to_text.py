"""Generative vision-language models (LLaVA, Idefics3 / SmolVLM, PaliGemma, Qwen2-VL ...): an image and
a prompt in, text out; scored on the answer tokens given the image, teacher-forced."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.kinds.windows import WindowsKind


class ImageTextToText(WindowsKind):
    name: ClassVar[str] = "image_text_to_text"
    task: ClassVar[str] = "image_text_to_text"
    noun: ClassVar[str] = "generative vision-language model"
    models: ClassVar[str] = (
        "`digits_vlm`, `hf` with LLaVA, LLaVA-NeXT, Idefics3 / SmolVLM, PaliGemma, Qwen2-VL ... and its processor"
    )
    datasets: ClassVar[str] = (
        '`digits` asked "What digit is this?" (the default), `image_questions` (your JSONL of image, prompt, answer)'
    )
    quality: ClassVar[str] = (
        "answer perplexity, loss and token accuracy (standard errors); exact match of greedy answers (Wilson interval)"
    )
    # listed before causal LMs when a config is matched: some classes are both
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForImageTextToText"
    modalities: ClassVar[tuple[str, ...]] = ("images",)
    fitting: ClassVar[str] = "dataset=digits (each digit asked what it is), dataset=image_questions, or the default"
    headline: ClassVar[str] = "perplexity"
    perplexity_name: ClassVar[str] = "answer perplexity (teacher-forced)"
    needs_processor: ClassVar[str | None] = "processor"
    labels_predicted_next: ClassVar[bool] = True

    def generated_outputs(self) -> Any:
        from modelxray.measure.task_outputs import answer_outputs

        return answer_outputs

    def from_text(self, dataset: Any, loaded: Any, progress: bool) -> Any:
        """Questions about digit images: the text dataset's count and seed."""
        from modelxray.data.image_questions import digit_questions

        return digit_questions(loaded.processor, dataset.examples, dataset.task_seed, "digits")

    def from_dataset(self, dataset: Any, loaded: Any) -> Any:
        from modelxray.data.digits import Digits
        from modelxray.data.image_questions import digit_questions, user_questions
        from modelxray.data.user_text import ImageQuestions

        if isinstance(dataset, ImageQuestions):
            return user_questions(loaded.processor, dataset.read(), dataset.name, dataset.path)
        if isinstance(dataset, Digits):
            split = (dataset.test_fraction, dataset.split_seed)
            data = digit_questions(loaded.processor, dataset.max_test, 0, dataset.name, *split)
            data.make_calibration = lambda: questions_calibration(loaded, 128, 0, *split)
            return data
        return None

    def _calibration(self, data: Any, dataset: Any, loaded: Any, progress: bool):
        from modelxray.core.errors import ConfigError

        try:
            return questions_calibration(loaded, dataset.calibration_windows, dataset.task_seed + 1)
        except ConfigError:  # none to be made: GPTQ and AWQ say so
            return None


def questions_calibration(loaded: Any, n: int, seed: int, test_fraction: float = 0.25, split_seed: int = 0):
    """A vision-language model's calibration: ``n`` questions about digits of the train split."""
    from modelxray.data.image_questions import digit_questions

    data = digit_questions(loaded.processor, n, seed, "digits", test_fraction, split_seed, part="train")
    return data.windows, f"questions about digits of the train split (seed {seed})"
