"""An analyzer from outside the package (tests/weight_norms.py) gets its plots, dashboard panel,
insights and files through its class, under any YAML key, and its bad values fail in preflight."""

import json

import pytest

import modelxray
from modelxray.core.errors import ConfigError

TINY = ["debug=tiny", "dataset.max_tokens=512", "dataset.seq_len=64"]


def test_out_of_tree_analyzer_gets_plots_insights_and_files(tmp_path):
    key = "norms_renamed"  # the YAML key is the user's choice; presentation follows the class
    out = modelxray.analyze(
        [
            *TINY,
            "analyzer=[]",
            f"+analyzer.{key}._target_=weight_norms.WeightNormsAnalyzer",
            f"+analyzer.{key}.large_norm=0.5",
        ],
        output_dir=tmp_path,
    )
    assert out.metrics[f"{key}/matrices"] > 0
    assert (tmp_path / "plots" / "weight_norms.png").is_file()
    assert (tmp_path / "plots" / "analysis_summary_dashboard.png").is_file()
    assert "above 0.5" in (tmp_path / "insights.md").read_text()
    assert (tmp_path / "weight_norms.csv").read_text().startswith("tensor,norm")
    assert json.loads((tmp_path / "analysis_results.json").read_text())["results"][key]["ok"]


def test_out_of_tree_analyzer_bad_value_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="analyzer.norms.top: must be positive"):
        modelxray.analyze(
            [
                *TINY,
                "analyzer=[]",
                "+analyzer.norms._target_=weight_norms.WeightNormsAnalyzer",
                "+analyzer.norms.top=0",
            ],
            output_dir=tmp_path,
        )
