"""Every performance figure checked against its neighbours from the same run: speed against the
quality pass, a latency against its samples, the memory peak against the current size, the
machine the figures were measured on; and the robustness plot saying why PGD stops early."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from modelxray.core.result import Result
from modelxray.metrics import consistency as check
from modelxray.metrics.measurements import Latency, Memory, Speed
from modelxray.plotting import style

# digits_vit at batch 1 on a busy machine: one fast call, four slow ones
BIMODAL_S = [0.00197, 0.193, 0.196, 0.200, 0.180]


def _speed(bs: int, tokens_per_s: float, seq_len: int = 256) -> Speed:
    return Speed(bs, seq_len, Latency.from_values([bs * seq_len / tokens_per_s] * 3))


# -- the machine ------------------------------------------------------------------------------------
def _machine(wait_share, load, threads=2, cpus=2):
    return check.machine_flag(*check.busy_machine(wait_share, load, threads, cpus), threads)


def test_threads_that_waited_for_a_cpu_are_a_busy_machine_with_advice():
    flag = _machine(wait_share=0.62, load=3.9)
    assert flag.check == "machine"
    assert "waited for a CPU 62% of the time (load average 3.9 on 2 CPUs)" in flag.text
    assert "threads=1" in flag.text
    assert _machine(wait_share=0.03, load=3.9) is None  # the wait decides
    # no run-queue waits (not Linux): other work's load beyond this process's own threads
    assert _machine(None, load=3.5) is not None
    assert _machine(None, load=2.2) is None
    assert check.busy_machine(None, None, 2, 2) == (None, None)  # nothing measured: not "idle"


def test_the_watch_reads_cpu_time_and_each_threads_run_queue_wait(tmp_path):
    from modelxray.measure.speed import CpuWatch, run_queue_wait_s

    for tid, line in (("1", "900 1500000000 7"), ("2", "10 500000000 1"), ("3", "")):  # 3: a thread that ended
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(line)
    assert run_queue_wait_s(tmp_path) == pytest.approx(2.0)
    assert run_queue_wait_s(tmp_path / "absent") is None  # not Linux: no evidence, not "no wait"
    with CpuWatch() as watch:
        end = time.process_time() + 0.05
        while time.process_time() < end:
            pass
    use = watch.use
    assert use.wall_s >= 0.05 and use.cpu_s >= 0.05 and use.threads == torch.get_num_threads() >= 1
    assert use.wait_s is None or use.wait_s >= 0
    assert set(use.to_dict()) >= {"wall_s", "cpu_s", "wait_s", "cpu_share", "wait_share", "load", "cpus"}


# -- throughput against the quality pass ---------------------------------------------------------------
def test_a_speed_far_below_the_perplexity_pass_of_the_same_run_is_flagged():
    """The README's default model: 15 tokens/s at batch 1 while the perplexity pass ran at 33."""
    speeds = [_speed(1, 15.0), _speed(4, 40.0)]
    rows = check.speed_ratios(speeds, eval_per_s=33.0, eval_batch=4, flat=True)
    assert [r["ratio"] for r in rows] == pytest.approx([15 / 33, 40 / 33])
    (flag,) = check.throughput_flags(rows, 33.0, 4, "perplexity pass", busy=True)
    assert flag.figure == "speed/bs1"
    assert flag.text.startswith("Batch 1 ran at 15 tokens/s, 0.45x the 33 tokens/s of the perplexity pass at batch 4")
    assert flag.text.endswith("the busy machine explains it.")
    (quiet,) = check.throughput_flags(rows, 33.0, 4, "perplexity pass", busy=False)
    assert "was not busy" in quiet.text
    (unknown,) = check.throughput_flags(rows, 33.0, 4, "perplexity pass", busy=None)
    assert "nothing measured says why" in unknown.text


def test_smaller_batches_are_held_to_the_quality_pass_on_a_cpu_only():
    """On an accelerator batching multiplies throughput: batch 1 far below batch 4 is expected."""
    speeds = [_speed(1, 100.0), _speed(4, 1000.0), _speed(8, 300.0)]
    rows = check.speed_ratios(speeds, eval_per_s=1000.0, eval_batch=4, flat=False)
    assert [r["held"] for r in rows] == [False, True, True]
    (flag,) = check.throughput_flags(rows, 1000.0, 4, "perplexity pass", busy=False)
    assert flag.figure == "speed/bs8"  # at or above the pass's batch it must keep up anywhere
    examples = Speed.of_examples(1, (64,), Latency.from_values([0.01] * 3))  # 100 examples/s
    (row,) = check.speed_ratios([examples], eval_per_s=1000.0, eval_batch=4, flat=True)
    assert not row["held"]  # a classifier's small batch is all overhead: not held, even on a CPU


# -- latency ------------------------------------------------------------------------------------------
def test_a_mean_below_the_median_is_explained_by_calls_that_did_not_run_at_one_speed():
    lat = Latency.from_values(BIMODAL_S)
    assert lat.mean_ms < lat.p50_ms  # right: four slow calls and one fast one
    assert lat.mean_ms == pytest.approx(sum(BIMODAL_S) * 200) and lat.p50_ms == pytest.approx(193.0)
    assert check.latency_problems(lat.to_metrics(), lat.samples_ms) == []  # each statistic is what it says
    (flag,) = check.latency_flags("speed/bs1", "Batch 1", lat)
    assert flag.check == "latency"
    assert "fastest of 5 calls took 1.97 ms and the median one 193 ms" in flag.text
    assert "puts the mean (154 ms) below the median" in flag.text
    steady = Latency.from_values([0.0100, 0.0102, 0.0101, 0.0099, 0.0131])
    assert check.latency_flags("speed/bs1", "Batch 1", steady) == []


def test_latency_statistics_that_swap_or_break_order_are_problems():
    lat = Latency.from_values(BIMODAL_S)
    swapped = {**lat.to_metrics(), "latency_mean_ms": lat.p50_ms, "latency_p50_ms": lat.mean_ms}
    problems = check.latency_problems(swapped, lat.samples_ms)
    assert any("latency_mean_ms is 193" in p and "mean of its samples is 154" in p for p in problems)
    assert any("latency_p50_ms is 154" in p and "median of its samples is 193" in p for p in problems)
    disorder = {**lat.to_metrics(), "latency_p95_ms": 300.0}
    assert check.latency_problems(disorder, []) == [
        "percentiles out of order (min 1.97, p50 193, p95 300, p99 199.8, max 200)"
    ]


# -- memory ------------------------------------------------------------------------------------------
def _memory(peak: int, rss: int, **cuda) -> Memory:
    return Memory(param_bytes=1, buffer_bytes=0, num_parameters=1, peak_rss_bytes=peak, rss_bytes=rss, **cuda)


def test_a_peak_below_what_it_is_the_peak_of_is_flagged():
    (flag,) = check.memory_flags(_memory(peak=600 << 20, rss=601 << 20))
    assert "peak RSS (600.0 MiB) is below its current RSS (601.0 MiB)" in flag.text
    assert check.memory_flags(_memory(peak=601 << 20, rss=601 << 20)) == []
    (cuda,) = check.memory_flags(_memory(9, 9, cuda_max_allocated_bytes=5 << 20, cuda_max_reserved_bytes=4 << 20))
    assert "reserved memory (4.0 MiB) is below its peak allocated memory (5.0 MiB)" in cuda.text


class _GrowingProcess:
    """A process at its high point: every current-size reading allocates first (psutil's Process
    object), and the peak is the largest size so far."""

    def __init__(self):
        self.size, self.peak = 600 << 20, 600 << 20

    def memory_info(self):
        self.size += 256 << 10
        self.peak = max(self.peak, self.size)
        return SimpleNamespace(rss=self.size)

    def getrusage(self, _who):
        return SimpleNamespace(ru_maxrss=self.peak // 1024)


def test_the_recorded_peak_is_never_below_the_current_size(monkeypatch):
    from modelxray.analyzers.performance.run import _memory
    from modelxray.measure import process_memory

    proc = _GrowingProcess()
    monkeypatch.setattr(process_memory.psutil, "Process", lambda: proc)
    monkeypatch.setattr(process_memory.resource, "getrusage", proc.getrusage)
    monkeypatch.setattr(process_memory.sys, "platform", "linux")
    subject = SimpleNamespace(model=torch.nn.Linear(2, 2), info=SimpleNamespace(file_bytes=0))
    result = Result("performance")
    _memory(None, subject, result)
    mem = result.measurements["memory"]
    assert mem.peak_rss_bytes >= mem.rss_bytes > 600 << 20
    assert check.memory_flags(mem) == []


# -- the analyzer --------------------------------------------------------------------------------------
class _SlowAtBatch1(torch.nn.Module):
    """A language model whose batch-1 forward waits 0.15 s: slow where the speed is timed, fast in
    the perplexity pass (batches of 4 and 2)."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(97, 16), torch.nn.Linear(16, 97)

    def forward(self, ids):
        if ids.shape[0] == 1:
            time.sleep(0.15)
        return self.head(self.embed(ids))


def test_the_analyzer_flags_a_speed_its_own_perplexity_pass_contradicts(tmp_path):
    from modelxray.analyzers.performance import PerformanceAnalyzer
    from modelxray.core.result import RunContext
    from modelxray.core.subject import ModelInfo, Subject

    torch.manual_seed(0)
    ids = torch.randint(0, 97, (6, 32), generator=torch.Generator().manual_seed(1))
    info = ModelInfo("slow at batch 1", "in-memory", "float32")
    subject = Subject(_SlowAtBatch1(), None, None, info, batches=list(ids.split(2)))
    analyzer = PerformanceAnalyzer(iters=2, layer_timing=False)
    perf = analyzer.run(subject, RunContext(output_dir=tmp_path, progress=False))
    consistency = perf.data["consistency"]
    flags = {f["figure"]: f for f in consistency["flags"] if f["check"] == "throughput"}
    assert list(flags) == ["speed/bs1"]
    assert "of the perplexity pass at batch 4 in the same run" in flags["speed/bs1"]["text"]
    assert flags["speed/bs1"]["text"] in perf.insights
    assert perf.metrics["consistency_flags"] == len(consistency["flags"]) >= 1
    cpu = consistency["cpu"]
    assert cpu["threads"] == torch.get_num_threads() and cpu["wall_s"] > 0.45 and cpu["cpu_share"] >= 0
    mem = perf.measurements["memory"]
    assert mem.peak_rss_bytes >= mem.rss_bytes


# -- robustness: why PGD stops before FGSM's strongest radius ------------------------------------------
def _attacks(pgd_eps: list[float]) -> Result:
    """FGSM and PGD-5 on the same 16 samples, FGSM to eps 0.1, PGD at ``pgd_eps``."""
    result = Result("robustness")
    config = {"pgd_steps": 5, "fgsm_eps": [0.01, 0.03, 0.1], "pgd_eps": pgd_eps}
    data = {"task": "classification", "quality": "accuracy", "clean": {"accuracy": 0.95}, "config": config}
    result.data.update(data)
    rows = [
        {"family": "fgsm", "level": e, "samples": 16, "accuracy": a, "accuracy_drop": 0.95 - a}
        for e, a in ((0.01, 0.9), (0.03, 0.7), (0.1, 0.3))
    ]
    rows += [
        {"family": "pgd", "level": e, "samples": 16, "accuracy": 0.5, "accuracy_drop": 0.45, "clean_accuracy": 0.95}
        for e in pgd_eps
    ]
    result.tables["robustness"] = rows
    return result


def test_the_attack_plot_and_the_insights_say_why_pgd_stops_before_the_largest_radius():
    from modelxray.analyzers.robustness import plots
    from modelxray.analyzers.robustness.insights import pgd_short_note

    result = _attacks([0.01, 0.03])
    note = pgd_short_note(result.tables["robustness"], result.data["config"], "samples")
    assert note == (
        "PGD-5 ran at eps 0.01 and 0.03 only, FGSM also at 0.1: analyzer.robustness.pgd_eps stops at 0.03 "
        "(each PGD level takes 5 gradient steps per sample where FGSM takes one); add 0.1 to it to run PGD there too."
    )
    with style():
        fig = plots.figures(result)["adversarial_robustness.png"]
    assert "analyzer.robustness.pgd_eps stops at 0.03" in fig._suptitle.get_text()
    full = _attacks([0.01, 0.03, 0.1])
    assert pgd_short_note(full.tables["robustness"], full.data["config"], "samples") is None
    with style():
        fig = plots.figures(full)["adversarial_robustness.png"]
    assert "pgd_eps" not in fig._suptitle.get_text()
    asked = {**result.data["config"], "pgd_eps": [0.01, 0.03, 0.1]}  # asked for, yet no row: no reason made up
    assert pgd_short_note(result.tables["robustness"], asked, "samples").endswith("PGD has no result at 0.1.")


def test_the_robustness_insights_carry_the_pgd_note():
    from modelxray.analyzers.robustness import RobustnessAnalyzer

    result = _attacks([0.01, 0.03])
    said = RobustnessAnalyzer().insights(result, {})
    assert any(s.startswith("PGD-5 ran at eps 0.01 and 0.03 only, FGSM also at 0.1") for s in said)
