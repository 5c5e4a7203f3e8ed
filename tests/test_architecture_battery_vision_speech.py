"""The architecture battery, second half: text classifier, seq2seq, image classifier, speech and
vision-language classes from random-weight ``save_pretrained`` directories (the speech and LLaVA
processors saved the transformers 5 way, in one ``processor_config.json``), run as
``python run.py model=hf model.name_or_path=DIR quant=int8`` runs them: the run finishes, the Linear
and convolution layers are quantized and the headline quality is finite. Causal and masked LMs are the
text half (``test_architecture_battery_text.py``): one file a worker."""

import pytest

from architectures import VISION_SPEECH_HALF, run_battery


@pytest.mark.parametrize("name", VISION_SPEECH_HALF)
def test_a_task_model_class_runs_quantized_with_a_finite_headline(name, tmp_path, cache_dir, monkeypatch):
    run_battery(name, tmp_path, cache_dir, monkeypatch)
