"""The architecture battery, text half: every causal and masked LM class from a random-weight
``save_pretrained`` directory, run as ``python run.py model=hf model.name_or_path=DIR quant=int8``
runs it: the run finishes, the Linear layers are quantized and the headline quality is finite. Text
classifiers, seq2seq, image, speech and vision-language classes are the other half
(``test_architecture_battery_vision_speech.py``): one file a worker."""

import pytest

from architectures import TEXT_HALF, run_battery


@pytest.mark.parametrize("name", TEXT_HALF)
def test_a_language_model_class_runs_quantized_with_a_finite_headline(name, tmp_path, cache_dir, monkeypatch):
    run_battery(name, tmp_path, cache_dir, monkeypatch)
