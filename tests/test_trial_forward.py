"""A trial forward before any analyzer: a model that cannot run one example of its own inputs (a wrong
width, a processor that disagrees with it, a forward that raises) is one line naming the model's own
error, exit 2, before it is quantized and before a run enters the store."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import modelxray
from conftest import run_cli
from modelxray.core.errors import ConfigError

QUICK = ["progress=false", "threads=1", "report.dashboard=false", "analyzer.performance.iters=1"]


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fa, self.fb, self.head = nn.Linear(16, 8), nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, a, b):
        return self.head(self.fa(a) + self.fb(b))


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    path = tmp_path_factory.mktemp("trial") / "two.pt"
    torch.manual_seed(0)
    torch.jit.trace(TwoInputs().eval(), (torch.rand(2, 16), torch.rand(2, 8))).save(str(path))
    return path


def test_declared_inputs_of_the_wrong_width_are_one_line_before_quantizing(two_inputs, tmp_path, tracking_uri):
    overrides = [*QUICK, "model=file", f"model.path={two_inputs}", "model.inputs={a:[1,16],b:[1,7]}", "quant=int8",
                 "tracker=mlflow", f"tracker.uri={tracking_uri}", "tracker.experiment=trial_forward"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"^model: two.pt cannot run one example of its own inputs") as err:
        modelxray.analyze(overrides, output_dir=tmp_path)
    line = str(err.value)
    assert "\n" not in line and "a [1, 16], b [1, 7]" in line
    assert not (tmp_path / "results").exists()  # nothing was quantized or analyzed
    from mlflow.tracking import MlflowClient

    exp = MlflowClient(tracking_uri).get_experiment_by_name("trial_forward")
    assert exp is None or not MlflowClient(tracking_uri).search_runs([exp.experiment_id])  # no run was left


class RaisingLM(nn.Module):
    """A causal LM whose own forward fails on any input (as a checkpoint built with a wrong width)."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = nn.Embedding(64, 8), nn.Linear(7, 64)

    def forward(self, ids):
        return self.head(self.embed(ids))


def test_an_in_memory_model_whose_forward_raises_names_its_error(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(64)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")))
    ids = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(ids, batch_size=2)
    with pytest.raises(ConfigError, match=r"RaisingLM cannot run .*\(inputs \[1, 12\]\): RuntimeError: mat1 and mat2"):
        modelxray.analyze([*QUICK, "tracker=none"], model=RaisingLM(), tokenizer=tok, dataloader=loader,
                          output_dir=tmp_path)  # fmt: skip


@pytest.mark.slow  # a run.py process (the in-process test above covers the check)
def test_the_command_line_exits_2_with_the_models_error(two_inputs, tmp_path):
    proc = run_cli([*QUICK, "tracker=none", "model=file", f"model.path={two_inputs}", "model.inputs={a:[1,16],b:[1,7]}"],
                   cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "cannot run one example of its own inputs" in last and "Traceback" not in proc.stderr


class FixedLengthLM(nn.Module):
    """A causal LM that runs one sequence length only, as one traced at that length does."""

    def __init__(self, length: int):
        super().__init__()
        self.length, self.embed, self.head = length, nn.Embedding(64, 8), nn.Linear(8, 64)

    def forward(self, ids):
        if ids.shape[1] != self.length:
            raise RuntimeError(f"traced for {self.length} tokens, got {ids.shape[1]}")
        return self.head(self.embed(ids))


def test_a_model_fixed_to_its_window_length_passes_on_its_full_window(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(64)}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")))
    ids = torch.randint(0, 64, (4, 24), generator=torch.Generator().manual_seed(0))
    loader = torch.utils.data.DataLoader(ids, batch_size=2)
    out = modelxray.analyze([*QUICK, "tracker=none", "analyzer.performance.layer_timing=false",
                             "analyzer.performance.speed_batch_sizes=[1]"],
                            model=FixedLengthLM(24), tokenizer=tok, dataloader=loader, output_dir=tmp_path)  # fmt: skip
    assert not out.failed
