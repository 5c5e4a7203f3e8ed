"""The report's title names the model, not the path it was loaded from."""

import pytest


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("/models/clip-vit-base", "clip-vit-base"),
        ("/models/clip-vit-base/", "clip-vit-base"),
        ("./checkpoints/run-3", "run-3"),
        ("~/weights/m.safetensors", "m.safetensors"),
        ("runs/a/final", "final"),
        ("C:\\models\\bert", "bert"),
        ("openai/clip-vit-base-patch32", "openai/clip-vit-base-patch32"),  # a hub id, not a path
        ("tiny-gpt2", "tiny-gpt2"),
    ],
)
def test_report_titles_name_a_model_directory_by_its_last_component(name, shown):
    from modelxray.report.markdown import display_name, insights_report, summary_report

    assert display_name(name) == shown
    run = {
        "model": {"name": name, "source_format": "hf", "source_dtype": "float32"},
        **{k: "x" for k in ("dataset", "quant", "tracking", "host")},
        "choices": {},
        "overrides": [],
        "versions": {},
    }
    text = summary_report(run, {}, [])
    assert text.splitlines()[0] == f"# modelxray report: {shown}"
    assert f"- **Model**: {name} (hf" in text  # the full path stays in the body
    assert insights_report(name, {}, []).splitlines()[0] == f"# Insights: {shown}"
