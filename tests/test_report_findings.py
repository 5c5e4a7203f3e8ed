"""What a person reads of a run is readable: the sweep's Pareto plot (title whole, size ticks apart),
the report header's quantization in words, the config choices naming only what the run used."""

from __future__ import annotations

import io
import itertools
import logging

import pandas as pd
import pytest
import torch

SIZES = [270e6, 140e6, 80e6, 82e6, 81e6, 79e6]  # a quant sweep: the model as loaded and five strategies
NAMES = ["none", "int8", "int4 g64", "gptq_int4", "awq_int4", "bnb_nf4"]


def _sweep_runs(experiment: str):
    from modelxray.tracking.runs import RunCollection

    rows = [
        {
            "run_id": f"{i:032x}",
            "run_name": f"smollm2 perf {name}",
            "model/size_bytes": size,
            "performance/perplexity": 18.0 + i,
            "status": "FINISHED",
        }
        for i, (name, size) in enumerate(zip(NAMES, SIZES))
    ]
    return RunCollection(pd.DataFrame(rows), "sqlite:///unused.db", experiment)


def _saved_figure(monkeypatch, draw):
    """The figure ``draw`` saves, as laid out in the file (the save helper closes it afterwards)."""
    import modelxray.plotting

    saved, real_save = [], modelxray.plotting.save
    monkeypatch.setattr(modelxray.plotting, "save", lambda fig, path: saved.append(fig) or real_save(fig, path))
    draw()
    (fig,) = saved
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return fig, FigureCanvasAgg(fig).get_renderer()


def _inside(inner, outer) -> bool:
    return inner.x0 >= outer.x0 and inner.y0 >= outer.y0 and inner.x1 <= outer.x1 and inner.y1 <= outer.y1


@pytest.mark.parametrize("experiment", ["modelxray", "modelxray-smollm2-quantization-strategies-compared-on-cpu"])
def test_the_pareto_plot_keeps_its_title_whole_and_its_size_ticks_apart(experiment, monkeypatch, tmp_path):
    from modelxray.report.comparison import plot

    runs = _sweep_runs(experiment)
    path = tmp_path / "pareto.png"
    fig, renderer = _saved_figure(
        monkeypatch, lambda: plot(runs, "model/size_bytes", "performance/perplexity", "run_name", (), path)
    )
    assert path.stat().st_size > 10_000
    ax = fig.axes[0]
    assert _inside(ax.title.get_window_extent(renderer), fig.bbox)  # no clipped title
    low, high = ax.get_xlim()
    shown = [t for x, t in zip(ax.get_xticks(), ax.get_xticklabels()) if low <= x <= high]  # the drawn ticks
    labels = [t.get_window_extent(renderer) for t in shown]
    assert len(labels) >= 3 and all(_inside(b, fig.bbox) for b in labels)
    assert not any(a.overlaps(b) for a, b in itertools.combinations(labels, 2))
    assert all(t.get_text().endswith(" MiB") for t in shown)


# -- the report header ---------------------------------------------------------------------------------

FAST = [
    "tracker=none",
    "threads=1",
    "report.dashboard=false",
    "analyzer=[performance]",
    "analyzer.performance.iters=1",
    "analyzer.performance.layer_timing=false",
    "analyzer.performance.speed_batch_sizes=[1]",
]


@pytest.fixture(scope="module")
def model_and_loader():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=257, n_positions=64))
    ids = torch.randint(0, 257, (4, 32), generator=torch.Generator().manual_seed(1))
    return model, torch.utils.data.DataLoader(ids, batch_size=2)


def _header(folder) -> dict[str, str]:
    lines = (folder / "summary_report.md").read_text().split("\n\n")[1].splitlines()
    return dict(line.removeprefix("- **").split("**: ", 1) for line in lines)


def test_a_python_run_on_its_own_batches_reads_well_and_keeps_its_log(model_and_loader, tmp_path, capsys):
    """modelxray.analyze on a DataLoader: the quantization in words, no configured dataset among the
    choices, progress as lines on a stderr that is not a terminal, and the run's log in run.log."""
    import modelxray

    model, loader = model_and_loader
    out = modelxray.analyze([*FAST, "quant=int8", "progress=true"], model=model, dataloader=loader, output_dir=tmp_path)
    assert not out.failed
    header = _header(tmp_path)
    assert header["Dataset"] == "user-supplied batches"
    assert "dataset=" not in header["Config choices"] and "quant=int8" in header["Config choices"]
    quant = header["Quantization"]
    assert (
        quant.startswith("int8 (symmetric, per-channel), round-to-nearest: ") and "effective bits per weight" in quant
    )
    assert "{" not in quant and "'" not in quant
    err = capsys.readouterr().err
    assert "\r" not in err and "\nperformance: perplexity: starting, 1 step\n" in err
    assert "\nperformance: perplexity: 1/1 step in " in err
    log = (tmp_path / "run.log").read_text()
    assert "[modelxray.progress][INFO] - performance: perplexity: 1/1 step in " in log
    assert "[modelxray.report.writer][INFO] - performance finished in " in log and "report written: " in log
    assert "parameters were left float" in log  # the run's warnings too


def test_model_analyzer_names_no_dataset_it_did_not_read(model_and_loader, tmp_path):
    from modelxray import ModelAnalyzer

    model, loader = model_and_loader
    analyzer = ModelAnalyzer(model, [*FAST, "progress=false"], output_dir=tmp_path)
    analyzer.analyze_performance(loader)
    analyzer.generate_comprehensive_report(tmp_path / "report")
    header = _header(tmp_path / "report")
    assert header["Dataset"] == "user-supplied batches" and "dataset=" not in header["Config choices"]


@pytest.mark.parametrize(
    ("steps", "text"),
    [
        (
            [{"method": "rtn", "default": "int4 asym g64", "effective_bits": 4.5, "params_left_float": "2.0%"}],
            "int4 (asymmetric, groups of 64), round-to-nearest: 4.50 effective bits per weight, 2.0% of the "
            "parameters left float",
        ),
        ([{"method": "cast", "dtype": "float16"}], "cast to float16"),
        (
            [{"method": "bnb", "config": "nf4"}, {"method": "hqq", "bits": 4, "group_size": 64}],
            "bitsandbytes nf4; HQQ: 4-bit, groups of 64",
        ),
        ([{"method": "gguf", "type": "Q4_K_M"}], "llama.cpp Q4_K_M"),
        ([], "none (weights as loaded)"),
    ],
)
def test_the_quantization_line_is_words(steps, text):
    from modelxray.report.markdown import quant_text

    assert quant_text(steps) == text


# -- progress and the run's log ------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_line_per_step_off_a_terminal_and_a_bar_on_one():
    from modelxray.core.progress import bar

    file = io.StringIO()
    for _ in bar(range(3), desc="reference", file=file):
        pass
    with bar(total=64, desc="performance: perplexity", unit="tok", file=file) as b:
        b.update(64)
    for _ in bar(range(3), desc="off", enabled=False, file=file):
        pass
    lines = file.getvalue().splitlines()
    assert "\r" not in file.getvalue() and len(lines) == 4
    assert lines[0] == "reference: starting, 3 steps" and lines[1].startswith("reference: 3/3 steps in ")
    assert lines[2] == "performance: perplexity: starting, 64 tok"
    terminal = _Terminal()
    for _ in bar(range(3), desc="reference", file=terminal):
        pass
    assert "\r" in terminal.getvalue()  # a terminal redraws its bar in place


def test_the_run_log_changes_nothing_else_a_caller_sees(tmp_path):
    """Inside run_log, INFO lines reach the file; the caller's own handlers get the warnings as before
    and no INFO line; after it, the logger is as it was. A run that logs nothing leaves no folder."""
    from modelxray.core.progress import run_log

    class Caller(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger, root, seen, caller = logging.getLogger("modelxray"), logging.getLogger(), [], Caller()
    before = logger.level, logger.propagate, list(logger.handlers)
    root.addHandler(caller)
    try:
        with run_log(tmp_path / "quiet" / "run.log"):
            pass
        with run_log(tmp_path / "run" / "run.log"):
            logging.getLogger("modelxray.app").info("loaded")
            logging.getLogger("modelxray.app").warning("47% left float")
    finally:
        root.removeHandler(caller)
    assert not (tmp_path / "quiet").exists()
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    log = (tmp_path / "run" / "run.log").read_text()
    assert "[modelxray.app][INFO] - loaded" in log and "[modelxray.app][WARNING] - 47% left float" in log
    assert seen == ["47% left float"]


def test_the_readme_says_where_the_python_api_writes():
    from conftest import REPO
    from modelxray.api import default_output_dir

    folder = default_output_dir()
    assert folder.parts[:2] == ("outputs", "api") and len(folder.parts) == 4  # outputs/api/<date>/<time>
    readme = (REPO / "README.md").read_text()
    outputs = " ".join(readme[readme.index("## Where the outputs go") :].split())
    assert "the Python API, `modelxray.analyze` and `ModelAnalyzer`: `outputs/api/<date>/<time>/`" in outputs


# -- MLflow's charts view ------------------------------------------------------------------------------


def _locale_key(name: str):
    """Close to ICU's root collation, which the UI's localeCompare uses: punctuation before digits
    before letters, case aside."""
    return [(0 if not c.isalnum() else 1 if c.isdigit() else 2, c.casefold()) for c in name]


def test_the_charts_view_opens_on_the_headline_whatever_else_the_store_holds():
    """MLflow makes a section of each metric prefix and sorts the sections (JavaScript's sort when the
    view opens, localeCompare after): the headline's comes first beside every other kind of run."""
    from modelxray.report.headline import headline_metrics

    ours = {*headline_metrics([("perplexity", 19.9, 0.4), ("size_bytes", 1e6, None)])}
    others = ["bitwidth/w4_perplexity", "classify/accuracy", "dynamics/grad_norm", "energy/joules", "eval/acc"]
    others += ["inspect/num_parameters", "lm_eval/hellaswag/acc", "performance/perplexity", "quant/effective_bits"]
    others += ["a/b", "aaa/x", "speed/tokens_per_second", "train/loss", "system/cpu_utilization_percentage"]
    sections = {k.rsplit("/", 1)[0] for k in [*ours, *others]}
    (headline,) = {k.rsplit("/", 1)[0] for k in ours}
    assert sorted(sections)[0] == headline  # JavaScript's sort: by code unit, as Python's
    assert sorted(sections, key=_locale_key)[0] == headline


# -- quant_impact's sentences --------------------------------------------------------------------------


def _no_strategy_fits(priority_rows):
    from modelxray.analyzers.quant_impact.insights import strategy_insights

    data = {
        "scoring": {"classifier": False, "throughput": "tokens_per_s", "unit": "tokens/s"},
        "hardware": {"gpus": [], "cpu_model": "cpu", "physical_cores": 2, "ram_bytes": 8 * 2**30, "torch": "2"},
        "quality_metric": "perplexity",
        "budget": {"max_latency_ms": 1.0},
    }
    return strategy_insights("balanced", priority_rows, data)


def test_the_budget_names_the_strategy_none_as_the_unquantized_model():
    from modelxray.analyzers.quant_impact.insights import over_budget

    rows = [
        {"strategy": s, "within_budget": False, "weight_bytes": b, "latency_p50_ms": ms}
        for s, b, ms in (("none", 4e6, 2.0), ("int8", 1e6, 3.0))
    ]
    said = _no_strategy_fits(rows)
    assert said[1] == (
        "Budget: median latency within 1 ms; the strategies none (the model unquantized) and int8 exceed it "
        "and are not recommended."
    )
    assert said[2].endswith("the fastest none (the model unquantized) (2.0 ms).")
    assert over_budget(["none"]) == "the strategy none (the model unquantized) exceeds it and is not recommended."
    assert over_budget(["int4", "int2"]) == "the strategies int4 and int2 exceed it and are not recommended."
    assert over_budget([]) == "every strategy fits it."
