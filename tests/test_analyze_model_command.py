"""``python -m modelxray.analyze_model --model_path M --output_dir D`` (``modelxray-analyze``): the
model-file tool's flags mapped onto the Hydra config, the same report written into D."""

from __future__ import annotations

import json

import pytest

from modelxray.analyze_model import main, overrides_of, parser


def test_the_flags_are_the_hydra_overrides(tmp_path):
    args, rest = parser().parse_known_args(
        [
            "--model_path",
            str(tmp_path),
            "--output_dir",
            "out",
            "--dataset",
            "wikitext2",
            "--data_split",
            "test[:100]",
            "--analyzer",
            "performance,inspect",
            "--analyzer",
            "robustness",
            "--quant",
            "int8",
            "quant.skip=[lm_head]",
        ]  # fmt: skip
    )
    got = overrides_of(args, rest)
    assert got[:2] == ["model=file", f"model.path={tmp_path.resolve()}"]
    assert got[2].startswith("hydra.run.dir=/") and got[2].endswith("/out")
    assert got[3:] == ["dataset=wikitext2", "dataset.split=test[:100]", "analyzer=[performance,inspect,robustness]",
                       "quant=int8", "quant.skip=[lm_head]"]  # fmt: skip
    args, rest = parser().parse_known_args(["--model_path", "org/name-not-here", "--output_dir", "d"])
    assert overrides_of(args, rest)[0] == "model=hf"


def test_a_split_of_a_dataset_without_splits_is_one_line(capsys):
    assert main(["--model_path", "x", "--output_dir", "d", "--data_split", "validation[:100]"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("modelxray: error: --data_split: splits are read from dataset=hf") and "\n" not in err


def test_it_writes_the_report_into_the_output_dir(tiny_saved_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "report"
    code = main(["--model_path", str(tiny_saved_model), "--output_dir", str(out), "--analyzer", "performance",
                 "tracker=none", "progress=false", "report.dashboard=false", "dataset.max_tokens=512",
                 "dataset.seq_len=64", "analyzer.performance.iters=1", "analyzer.performance.layer_timing=false",
                 "analyzer.performance.speed_batch_sizes=[1]"])  # fmt: skip
    assert code == 0
    assert (out / "summary_report.md").exists() and (out / "insights.md").exists()
    results = json.loads((out / "analysis_results.json").read_text())["results"]
    assert results["performance"]["metrics"]["perplexity"] > 1


@pytest.fixture
def tiny_saved_model(tmp_path):
    """A two-layer GPT-2 directory with the byte-level tokenizer its config names."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    d = tmp_path / "gpt2"
    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=300, n_positions=128)).save_pretrained(d)
    return d
