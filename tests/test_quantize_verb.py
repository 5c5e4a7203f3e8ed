"""``modelxray.quantize`` on a plain nn.Module: the same weights and report as the run's quant stage."""

import copy

import pytest
import torch

import modelxray
from modelxray.api import compose
from modelxray.core.errors import ConfigError
from modelxray.core.instantiate import build_component
from modelxray.core.subject import Subject
from modelxray.models.tiny_gpt2 import TinyGPT2Source
from modelxray.quant.weight import WeightQuantizer


@pytest.fixture(scope="module")
def loaded():
    return TinyGPT2Source(device="cpu").load()  # random weights from a config, seed 0


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _without_seconds(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k != "seconds"}


def test_int4_by_name_equals_the_run_stage_and_leaves_the_model_alone(loaded):
    model = loaded.model
    before = copy.deepcopy(model.state_dict())
    q_model, report = modelxray.quantize(model, "int4")

    stage = build_component(compose(["quant=int4"]).quant, "quant")
    subject, stage_report = stage.apply(Subject(model, loaded.tokenizer, None, loaded.info))

    assert _same_weights(q_model, subject.model)
    assert report.analyzer == stage_report.analyzer == "quant"
    assert _without_seconds(report.metrics) == _without_seconds(stage_report.metrics)
    assert report.tables == stage_report.tables
    assert report.metrics["modules_quantized"] == 8 and report.metrics["effective_bits"] > 4
    assert isinstance(report.source, WeightQuantizer)
    assert q_model is not model and not _same_weights(q_model, model)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the input is unchanged


def test_object_and_dict_configs(loaded):
    by_object, report = modelxray.quantize(loaded.model, WeightQuantizer(bits=4, group_size=128))
    by_dict, _ = modelxray.quantize(loaded.model, {"_target_": "modelxray.quant.weight.WeightQuantizer", "bits": 4})
    by_name, _ = modelxray.quantize(loaded.model, "int4")
    assert _same_weights(by_object, by_name) and _same_weights(by_dict, by_name)
    _, report8 = modelxray.quantize(loaded.model, {"_target_": "modelxray.quant.weight.WeightQuantizer", "bits": 8})
    assert report8.metrics["effective_bits"] > report.metrics["effective_bits"] + 3


def test_a_plain_sequential_of_linears():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    q_model, report = modelxray.quantize(model, WeightQuantizer(bits=3, granularity="channel"))
    assert report.metrics["modules_quantized"] == 2
    assert all(len(torch.unique(row)) <= 7 for row in q_model[0].weight)  # symmetric 3-bit levels per row


def test_bad_values_are_config_errors(loaded):
    with pytest.raises(ConfigError, match=r"^quant\.bits: bits must be an integer from 2 to 16, got 1$"):
        modelxray.quantize(loaded.model, {"_target_": "modelxray.quant.weight.WeightQuantizer", "bits": 1})
    with pytest.raises(ConfigError, match=r"^quant\.rules\[0\]: matches no module"):
        modelxray.quantize(loaded.model, WeightQuantizer(rules=[{"name": "no.such.*", "bits": 8}]))


def test_a_bad_name_lists_the_valid_ones(loaded):
    with pytest.raises(ConfigError) as info:
        modelxray.quantize(loaded.model, "int5")
    message = str(info.value)
    assert "\n" not in message and "int5" in message
    assert "valid" in message and "int4" in message and "gptq_int4" in message


def test_gptq_needs_calibration(loaded):
    with pytest.raises(ConfigError, match=r"^calibration: gptq calibrates on token ids"):
        modelxray.quantize(loaded.model, "gptq_int4")


def test_gptq_with_a_few_calibration_batches(loaded):
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 256, (4, 32), generator=gen) for _ in range(2)]
    before = copy.deepcopy(loaded.model.state_dict())
    q_model, report = modelxray.quantize(loaded.model, "gptq_int4", calibration=batches)
    assert report.metrics["modules_quantized"] == 8
    assert report.insights[0].startswith("Warning: 34% of the parameters were left float")  # the embeddings
    assert report.insights[1].startswith("GPTQ calibrated on 256 tokens (8 calibration sequences)")
    assert not _same_weights(q_model, loaded.model)
    assert all(torch.equal(v, loaded.model.state_dict()[k]) for k, v in before.items())
    # a list of batches, one tensor cut into batches of batch_size, or a DataLoader: the same weights
    gptq = {"_target_": "modelxray.quant.gptq.GPTQQuantizer", "bits": 4, "batch_size": 4}
    as_list, _ = modelxray.quantize(loaded.model, gptq, calibration=batches)
    as_tensor, _ = modelxray.quantize(loaded.model, gptq, calibration=torch.cat(batches))
    loader = torch.utils.data.DataLoader(torch.cat(batches), batch_size=4)
    as_loader, _ = modelxray.quantize(loaded.model, gptq, calibration=loader)
    assert _same_weights(as_tensor, as_list) and _same_weights(as_loader, as_list)


def test_none_returns_the_model_as_is(loaded):
    model, report = modelxray.quantize(loaded.model, "none")
    assert model is loaded.model and report is None


def test_the_report_names_what_no_target_covers():
    """An LSTMCell (98% of this model) is no target of round-to-nearest: the report says it stayed as
    loaded, with its share of the parameters, instead of leaving it unnamed."""
    import modelxray

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = torch.nn.LSTMCell(64, 64)
            self.head = torch.nn.Linear(64, 10)

        def forward(self, x):
            return self.head(self.cell(x)[0])

    _, report = modelxray.quantize(Tagger(), "int8")
    (said,) = [s for s in report.insights if s.startswith("Left as loaded")]
    share = 4 * 64 * (64 + 64 + 2) / (4 * 64 * (64 + 64 + 2) + 64 * 10 + 10)
    assert f"LSTMCell {share:.1%} of the parameters (cell)" in said
