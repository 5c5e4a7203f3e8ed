"""CTC speech recognisers (Wav2Vec2, HuBERT): a character distribution per audio frame, scored by the
error rates of their greedy transcripts."""

from __future__ import annotations

from typing import Any, ClassVar

from modelxray.core.errors import ConfigError
from modelxray.kinds.speech import SpeechRecognizer


class SpeechCTC(SpeechRecognizer):
    name: ClassVar[str] = "speech_ctc"
    hf_tables: ClassVar[tuple[str, ...]] = ("MODEL_FOR_CTC_MAPPING_NAMES",)
    auto_class: ClassVar[str] = "AutoModelForCTC"

    def from_utterances(self, utterances: Any, loaded: Any, name: str) -> Any:
        from modelxray.data.speech_tasks import ctc_examples

        return ctc_examples(utterances, name)

    def generated_outputs(self) -> Any:
        from modelxray.measure.task_outputs import transcript_outputs

        return transcript_outputs

    def data_from_batches(self, loaded: Any, batches: Any, key: str, image_shape: Any = None) -> Any:
        raise ConfigError(key, "a CTC speech model is scored by transcripts: use dataset=audio_folder")

    def refuse_position_scoring(self, key: str, name: str) -> None:
        raise ConfigError(
            key,
            f"{name} is a CTC speech model, scored by its transcripts (word error rate), which "
            "analyzer=performance measures with and without quant=...; this analyzer scores token predictions",
        )
