"""Results draw themselves from the plotting module their source names, imported only when drawn."""

import sys

from modelxray.analyzers.bitwidth import BitwidthAnalyzer
from modelxray.analyzers.learning_dynamics import CheckpointDynamicsAnalyzer
from modelxray.core.presentation import PlotsFromModule
from modelxray.quant.weight import WeightQuantizer
from modelxray.report.dashboard import _draws_panel
from modelxray.training.config import TrainConfig


def test_every_built_in_source_names_a_plots_module_with_figures():
    import importlib

    for cls in (BitwidthAnalyzer, CheckpointDynamicsAnalyzer, WeightQuantizer, TrainConfig):
        module = importlib.import_module(cls.plots_module)
        assert callable(module.figures), cls


def test_dashboard_panels_only_for_sources_that_draw_one():
    assert _draws_panel(BitwidthAnalyzer()) and _draws_panel(WeightQuantizer())
    assert not _draws_panel(CheckpointDynamicsAnalyzer())  # its plots module has figures, no panel

    class Overrides(PlotsFromModule):
        def panel(self, ax, result) -> bool:
            return True

    assert _draws_panel(Overrides()) and not _draws_panel(PlotsFromModule())
    assert PlotsFromModule().figures(None) == {}


def test_importing_an_analyzer_imports_no_plotting_library():
    import subprocess

    code = "import modelxray.analyzers.performance, sys; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_summary_shows_sizes_in_mib_counts_as_integers_and_measurements_once():
    from modelxray.core.result import Result
    from modelxray.metrics.measurements import Quality
    from modelxray.report.markdown import fmt_metric, summary_report

    assert fmt_metric("param_bytes", 538060032.0) == "513.1 MiB"
    assert fmt_metric("tokens_scored", 8160.0) == "8,160" and fmt_metric("loss", 2.92501) == "2.925"
    result = Result("performance")
    result.record("quality", Quality(loss=2.0, n_scored=100))
    result.metrics["param_bytes"] = 2.0 * 2**20
    run = {
        "model": {"name": "m", "source_format": "config", "source_dtype": "float32"},
        **{k: "x" for k in ("dataset", "quant", "tracking", "host")},
        "choices": {},
        "overrides": [],
        "versions": {},
    }
    text = summary_report(run, {"performance": result}, [])
    assert "| param_bytes | 2.0 MiB |" in text
    assert "| perplexity |" not in text and "perplexity 7.389" in text  # rendered once, by the measurement


def test_quant_impact_summary_shows_a_compact_strategies_table_with_readable_sizes():
    from modelxray.analyzers.quant_impact import QuantImpactAnalyzer
    from modelxray.core.result import Result
    from modelxray.report.markdown import summary_tables, table

    analyzer = QuantImpactAnalyzer()
    result = Result("quant_impact", source=analyzer)
    row = {"strategy": "int4", "method": "rtn", "support": "simulated ...", "accuracy": 0.9, "kl": 0.01,
           "weight_bytes": 69252.0, "rss_at_load": 681037824, "score_speed": 0.5, "efficiency_score": 0.96}  # fmt: skip
    result.tables = {"strategies": [row], "memory_timeline": [{"t_s": 0.0}], "unsupported": []}
    result.metrics = {"int4_accuracy": 0.9, "int4_kl": 0.01}
    shown = summary_tables(result)
    assert list(shown) == ["strategies"]  # no raw timeline, no empty table
    assert list(shown["strategies"][0]) == ["strategy", "method", "accuracy", "kl", "weight_bytes", "efficiency_score"]
    assert analyzer.headline(result) == {}  # per-strategy metrics are the table's columns, not repeated
    assert "67.6 KiB" in table(shown["strategies"])


def test_text_in_a_table_cell_stays_in_its_cell():
    """A prompt's newline or pipe would break the Markdown table; ``<image>`` would render as a tag."""
    from modelxray.report.markdown import _cell

    assert _cell("prompt", "USER: <image>\nWhat | is it?") == "USER: &lt;image&gt; What \\| is it?"
    assert _cell("weight_bytes", 2048) == "2.0 KiB" and _cell("module", "model.layers.0") == "model.layers.0"
