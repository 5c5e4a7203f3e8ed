"""Typed measurements (Latency, Throughput, Speed, Memory, Quality): statistics against numpy and hand
computations, pooling invariants, JSON round trips, and the metric names logged before they existed."""

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from modelxray.core.result import Measurement, Result
from modelxray.metrics.measurements import Latency, Memory, Quality, Speed, Throughput, t_critical_95

SECONDS = [0.0102, 0.0121, 0.0099, 0.0154, 0.0118, 0.0347, 0.0110]
LATENCY_NAMES = ["latency_mean_ms", "latency_std_ms", "latency_min_ms", "latency_max_ms"] + [
    f"latency_p{p}_ms" for p in (50, 95, 99)
]


# -- latency -----------------------------------------------------------------------------------
def test_latency_statistics_match_numpy_and_hand_computation():
    lat = Latency.from_values(SECONDS)
    ms = np.asarray(SECONDS) * 1e3
    assert lat.count == len(SECONDS)
    assert lat.samples_ms == pytest.approx(list(ms))
    assert lat.mean_ms == pytest.approx(sum(SECONDS) * 1e3 / len(SECONDS))
    assert lat.std_ms == pytest.approx(statistics.stdev(ms))  # sample std, ddof=1
    assert (lat.min_ms, lat.max_ms) == pytest.approx((9.9, 34.7))
    for p in (50, 90, 95, 99):
        assert getattr(lat, f"p{p}_ms") == pytest.approx(np.percentile(ms, p, method="linear"))
    # linear interpolation by hand: p50 of 7 sorted values is the 4th; p90 sits 0.4 of the way 6th -> 7th
    s = sorted(ms)
    assert lat.p50_ms == pytest.approx(s[3])
    assert lat.p90_ms == pytest.approx(s[5] + 0.4 * (s[6] - s[5]))
    # 95% CI of the mean: mean +- t(0.975, n-1) * s / sqrt(n), t(0.975, 6) = 2.446911851
    half = 2.446911851 * statistics.stdev(ms) / math.sqrt(len(ms))
    assert lat.ci95_ms == pytest.approx((ms.mean() - half, ms.mean() + half))
    assert lat.ci95_half_ms == pytest.approx(half)
    assert lat.mean_s == pytest.approx(ms.mean() / 1e3)
    assert lat.seconds == pytest.approx(SECONDS)


def test_latency_metrics_are_the_names_and_values_logged_before():
    lat = Latency.from_values(SECONDS)
    ms = np.asarray(SECONDS) * 1e3
    assert lat.to_metrics() == pytest.approx(
        {
            "latency_mean_ms": ms.mean(),
            "latency_std_ms": ms.std(ddof=1),
            "latency_min_ms": ms.min(),
            "latency_max_ms": ms.max(),
            **{f"latency_p{p}_ms": np.percentile(ms, p) for p in (50, 95, 99)},
        }
    )
    assert list(lat.to_metrics()) == LATENCY_NAMES
    assert list(lat.to_metrics("bs4_")) == [f"bs4_{k}" for k in LATENCY_NAMES]


def test_one_call_has_no_spread_and_no_interval():
    lat = Latency.from_values([0.02])
    assert lat.std_ms == 0.0 and lat.p99_ms == lat.p50_ms == pytest.approx(20.0)
    assert all(math.isnan(x) for x in lat.ci95_ms)
    assert Latency.from_values([0.02]) == lat  # equal by samples, though the NaN bounds are not
    assert "one call" in lat.ci_text()
    with pytest.raises(ValueError, match="no timings"):
        Latency.from_values([])


def test_t_critical_values():
    assert t_critical_95(1) == pytest.approx(12.706204736)
    assert t_critical_95(30) == pytest.approx(2.042272456)
    assert t_critical_95(10**9) == pytest.approx(1.959963985)
    with pytest.raises(ValueError):
        t_critical_95(0)
    stats = pytest.importorskip("scipy.stats")
    for df in [*range(1, 60), 100, 250, 1000, 5000]:
        assert t_critical_95(df) == pytest.approx(stats.t.ppf(0.975, df), abs=1e-7), df


def test_latency_aggregate_pools_samples():
    a, b = Latency.from_values(SECONDS[:3]), Latency.from_values(SECONDS[3:])
    pooled = Latency.aggregate([a, b])
    assert pooled.count == a.count + b.count
    assert pooled == Latency.from_values(SECONDS)  # statistics of the pooled samples, not of the stats
    assert pooled.mean_ms == pytest.approx((a.count * a.mean_ms + b.count * b.mean_ms) / (a.count + b.count))
    assert pooled.p95_ms == pytest.approx(np.percentile(np.asarray(SECONDS) * 1e3, 95))
    assert (pooled.min_ms, pooled.max_ms) == (min(a.min_ms, b.min_ms), max(a.max_ms, b.max_ms))
    with pytest.raises(ValueError):
        Latency.aggregate([])


def test_latency_round_trip_and_rendering():
    lat = Latency.from_values(SECONDS)
    d = json.loads(json.dumps(lat.to_dict()))
    assert list(d) == [*LATENCY_NAMES, "samples_ms"]
    assert Latency.from_dict(d) == lat
    assert Latency.from_dict(d).p90_ms == lat.p90_ms
    with pytest.raises(ValueError, match="samples_ms"):
        Latency.from_dict({"latency_mean_ms": 1.0})
    assert str(Latency.from_values([0.0123, 0.0141, 0.018])) == "14.1 ms p50 (p95 17.6, p99 17.9), n=3"
    assert str(Latency.from_values([0.0005])) == "0.5 ms p50 (p95 0.5, p99 0.5), n=1"
    md = lat.markdown()
    assert md.startswith(f"**{lat.p50_ms:.1f} ms** p50") and "95% CI" in md and md.endswith("n=7")


# -- throughput and speed ----------------------------------------------------------------------
def test_throughput_from_latency_by_hand():
    lat = Latency.from_values([0.5, 0.5])
    thr = Throughput.from_latency(lat, batch_size=4, seq_len=256)
    assert thr.to_metrics() == pytest.approx({"tokens_per_s": 4 * 256 / 0.5, "batches_per_s": 1 / 0.5})
    assert list(thr.to_metrics()) == ["tokens_per_s", "batches_per_s"]
    assert Throughput.from_dict(json.loads(json.dumps(thr.to_dict()))) == thr
    assert str(thr) == "2,048 tokens/s (2 batches/s)"


def test_speed_metrics_table_row_and_json_keep_the_old_layout():
    sp = Speed(4, 128, Latency.from_values(SECONDS))
    mean_s = sum(SECONDS) / len(SECONDS)
    old = {**Latency.from_values(SECONDS).to_metrics(), "tokens_per_s": 4 * 128 / mean_s, "batches_per_s": 1 / mean_s}
    metrics = sp.to_metrics()
    assert list(metrics) == [f"bs4_{k}" for k in old]
    assert metrics == pytest.approx({f"bs4_{k}": v for k, v in old.items()})
    assert list(sp.row()) == ["batch_size", "seq_len", *old]  # the columns of the "speed" table
    d = sp.to_dict()
    assert list(d) == ["batch_size", "seq_len", *old, "samples_ms"]  # the rows of data["speed"]
    assert d["samples_ms"] == pytest.approx([s * 1e3 for s in SECONDS])
    back = Speed.from_dict(json.loads(json.dumps(d)))
    assert back == sp and back.throughput == sp.throughput
    assert str(sp).startswith("batch 4 x 128 tokens: ") and "tokens/s" in str(sp)


def test_speed_aggregate_pools_one_workload_only():
    a = Speed(1, 64, Latency.from_values(SECONDS[:4]))
    b = Speed(1, 64, Latency.from_values(SECONDS[4:]))
    pooled = Speed.aggregate([a, b])
    assert pooled.latency.count == a.latency.count + b.latency.count
    # pooled throughput = total tokens over total time
    assert pooled.throughput.tokens_per_s == pytest.approx(64 * len(SECONDS) / sum(SECONDS))
    with pytest.raises(ValueError, match="different workloads"):
        Speed.aggregate([a, Speed(2, 64, a.latency)])


# -- memory ------------------------------------------------------------------------------------
MEM_CPU = Memory(
    param_bytes=4000,
    buffer_bytes=16,
    num_parameters=1000,
    peak_rss_bytes=900_000,
    rss_bytes=800_000,
    by_dtype={"params": {"float32": 4000}, "buffers": {"int64": 16}},
)


def test_memory_metrics_are_the_names_logged_before():
    assert list(MEM_CPU.to_metrics()) == [
        "param_bytes",
        "buffer_bytes",
        "num_parameters",
        "peak_rss_bytes",
        "rss_bytes",
    ]
    assert all(isinstance(v, float) for v in MEM_CPU.to_metrics().values())
    gpu = Memory(1, 2, 3, 4, 5, cuda_max_allocated_bytes=6, cuda_max_reserved_bytes=7, file_bytes=8)
    assert list(gpu.to_metrics()) == [
        "param_bytes",
        "buffer_bytes",
        "num_parameters",
        "peak_rss_bytes",
        "rss_bytes",
        "cuda_max_allocated_bytes",
        "cuda_max_reserved_bytes",
        "file_bytes",
    ]
    assert MEM_CPU.weight_bytes == 4000


def test_memory_round_trip_and_aggregate_is_the_max():
    d = json.loads(json.dumps(MEM_CPU.to_dict()))
    assert list(d) == ["param_bytes", "buffer_bytes", "num_parameters", "peak_rss_bytes", "rss_bytes", "by_dtype"]
    assert all(isinstance(v, int) for k, v in d.items() if k != "by_dtype")  # the JSON keeps integers
    assert Memory.from_dict(d) == MEM_CPU
    other = Memory(
        4000,
        16,
        1000,
        peak_rss_bytes=950_000,
        rss_bytes=700_000,
        cuda_max_allocated_bytes=123,
        by_dtype={"params": {"float32": 4000, "int8": 10}},
    )
    agg = Memory.aggregate([MEM_CPU, other])
    assert (agg.peak_rss_bytes, agg.rss_bytes) == (950_000, 800_000)
    assert agg.cuda_max_allocated_bytes == 123 and agg.cuda_max_reserved_bytes is None and agg.file_bytes is None
    assert agg.by_dtype == {"params": {"float32": 4000, "int8": 10}, "buffers": {"int64": 16}}
    assert "weights 3.9 KiB (1,000 parameters)" in str(MEM_CPU) and "CUDA" not in str(MEM_CPU)
    assert "CUDA peak 123 B allocated" in str(other)


# -- quality -----------------------------------------------------------------------------------
def test_quality_from_lm_score_logs_the_same_metrics():
    torch = pytest.importorskip("torch")
    from modelxray.metrics.lm import LMScore

    g = torch.Generator().manual_seed(0)
    score = LMScore(ks=[1, 5, 10])
    score.update(torch.randn(2, 16, 50, generator=g), torch.randint(0, 50, (2, 16), generator=g))
    old = score.result(n_bytes=100)
    q = Quality.from_dict(old)
    new = q.to_metrics()
    assert {k: new[k] for k in old} == old  # the same names and values ...
    derived = {"perplexity_se", "perplexity_ci_low", "perplexity_ci_high", "perplexity_se_per_token"}
    derived |= {"accuracy_ci_low", "accuracy_ci_high"}  # a Wilson interval at the windows' effective count
    assert set(new) - set(old) == derived  # ... and derived
    assert list(old) == [
        "loss",
        "perplexity",
        "tokens_scored",
        "accuracy",
        "top5_accuracy",
        "top10_accuracy",
        "bits_per_byte",
        "windows_scored",
        "loss_se",
        "loss_se_per_token",
        "accuracy_se",
    ]
    assert Quality.from_dict(json.loads(json.dumps(q.to_dict()))) == q
    assert q.accuracy == old["accuracy"] and q.n_scored == 32


def test_quality_aggregate_weights_by_tokens_and_takes_perplexity_of_the_pooled_loss():
    a = Quality(loss=2.0, n_scored=100, accuracy_at={1: 0.5, 5: 0.8}, bits_per_byte=1.0)
    b = Quality(loss=4.0, n_scored=300, accuracy_at={1: 0.1}, bits_per_byte=1.5)
    pooled = Quality.aggregate([a, b])
    assert pooled.n_scored == 400
    assert pooled.loss == pytest.approx((100 * 2.0 + 300 * 4.0) / 400)
    assert pooled.perplexity == pytest.approx(math.exp(3.5))
    assert pooled.perplexity != pytest.approx((a.perplexity + b.perplexity) / 2)
    assert pooled.accuracy_at == pytest.approx({1: 0.2})  # top-5 was not measured by both
    # bits per byte = total bits / total bytes: a has 200 nats over 200/(1.0 ln2) bytes ...
    nats = 100 * 2.0 + 300 * 4.0
    nbytes = (100 * 2.0) / (1.0 * math.log(2)) + (300 * 4.0) / (1.5 * math.log(2))
    assert pooled.bits_per_byte == pytest.approx(nats / (math.log(2) * nbytes))
    equal = Quality.aggregate([a, b], weights=[1, 1])
    assert equal.loss == pytest.approx(3.0) and equal.perplexity == pytest.approx(math.exp(3.0))
    with pytest.raises(ValueError, match="n_scored"):
        Quality.aggregate([a, Quality(loss=1.0)])
    with pytest.raises(ValueError, match="nothing was scored"):
        Quality.aggregate([Quality(loss=1.0, n_scored=0)])


def test_quality_edge_cases_and_rendering():
    assert Quality(loss=800.0).perplexity == math.inf
    assert math.isnan(Quality(loss=float("nan")).perplexity)
    clf = Quality.from_dict({"loss": 0.3, "accuracy": 0.9, "samples": 50.0, "kl": 0.01})
    assert clf.to_metrics() == {
        "loss": 0.3,
        "perplexity": pytest.approx(math.exp(0.3)),
        "samples": 50.0,
        "accuracy": 0.9,
    }
    q = Quality(loss=math.log(12.5), n_scored=10240, accuracy_at={1: 0.412})
    assert str(q) == "perplexity 12.5 (loss 2.5257 nats, top-1 accuracy 0.412), 10,240 tokens scored"
    assert q.markdown().startswith("**perplexity 12.5**")


# -- on a Result -------------------------------------------------------------------------------
def test_result_records_measurements_and_the_json_is_unchanged(tmp_path):
    r = Result("performance")
    sp = Speed(1, 8, Latency.from_values(SECONDS))
    r.record("speed/bs1", sp)
    r.record("memory", MEM_CPU)
    r.data["speed"] = [sp.to_dict()]
    assert isinstance(sp, Measurement) and isinstance(MEM_CPU, Measurement)
    assert r.metrics == {**sp.to_metrics(), **MEM_CPU.to_metrics()}
    assert r.measurements_of(Speed) == {"speed/bs1": sp}
    assert set(r.to_json()) == {"analyzer", "ok", "seconds", "metrics", "tables", "data", "insights", "error"}
    json.dumps(r.to_json())

    from modelxray.report.markdown import summary_report

    run = {
        "model": {"name": "m", "source_format": "config", "source_dtype": "float32"},
        "dataset": "d",
        "quant": "none",
        "choices": {},
        "overrides": [],
        "tracking": "none",
        "host": "h",
        "versions": {},
    }
    text = summary_report(run, {"performance": r}, [])
    assert f"- **speed/bs1**: {sp.markdown()}" in text
    assert f"- **memory**: {MEM_CPU.markdown()}" in text


def test_performance_analyzer_logs_the_same_names_and_draws_from_measurements(tmp_path):
    pytest.importorskip("torch")
    from modelxray.analyzers.performance import PerformanceAnalyzer
    from modelxray.core.result import RunContext
    from modelxray.core.subject import Subject
    from modelxray.data.pydoc_topics import PydocTopics
    from modelxray.models.tiny_gpt2 import TinyGPT2Source

    loaded = TinyGPT2Source(device="cpu", seed=5).load()
    data = PydocTopics(seq_len=32, max_tokens=300, cache_dir=str(tmp_path)).load(loaded.tokenizer)
    subject = Subject(loaded.model, loaded.tokenizer, data, loaded.info)
    a = PerformanceAnalyzer(speed_batch_sizes=[1, 2], iters=2, warmup=0, layer_timing=False, tail_ratio=1.0)
    r = a.run(subject, RunContext(output_dir=Path(tmp_path), progress=False))
    lat = [*LATENCY_NAMES, "tokens_per_s", "batches_per_s"]
    quality = ["loss", "perplexity", "tokens_scored", "accuracy", "accuracy_ci_low", "accuracy_ci_high"]
    quality += ["top5_accuracy", "top10_accuracy"]
    memory = ["param_bytes", "buffer_bytes", "num_parameters", "peak_rss_bytes", "rss_bytes"]
    errors = ["loss_se", "perplexity_se", "perplexity_ci_low", "perplexity_ci_high", "accuracy_se"]
    errors += ["loss_se_per_token", "perplexity_se_per_token", "windows_scored"]
    expected = [*quality, "bits_per_byte", *errors, "eval_tokens_per_s", *(f"bs{b}_{k}" for b in (1, 2) for k in lat)]
    if subject.info.file_bytes:
        memory.append("file_bytes")
    assert list(r.metrics) == [*expected, *memory, "consistency_flags"]  # figures against their neighbours last
    # random weights: a perplexity near the vocabulary's size is flagged (the report leads with it)
    assert list(r.data) == ["quality", "speed", "degenerate", "memory", "consistency"]
    assert "no better than guessing uniformly" in r.data["degenerate"][0]
    assert list(r.data["quality"]) == [
        *quality,
        "bits_per_byte",
        *errors,
        "eval_tokens_per_s",
        "protocol",
        "protocol_description",
        "windows",
        "top_k",
    ]
    assert [list(row) for row in r.data["speed"]] == [["batch_size", "seq_len", *lat, "samples_ms"]] * 2
    assert [list(row) for row in r.tables["speed"]] == [["batch_size", "seq_len", *lat]] * 2
    assert list(r.data["memory"]) == [*memory, "by_dtype"]
    assert list(r.measurements) == ["quality", "speed/bs1", "speed/bs2", "memory"]
    assert r.measurements["quality"].perplexity == r.metrics["perplexity"] == pytest.approx(math.exp(r.metrics["loss"]))
    assert r.measurements["speed/bs2"].latency.p95_ms == r.metrics["bs2_latency_p95_ms"]
    assert r.data["speed"][0]["samples_ms"] == list(r.measurements["speed/bs1"].latency.samples_ms)
    json.dumps(r.to_json())
    lines = a.insights(r, {"performance": r})
    assert any(s.startswith("Perplexity ") for s in lines)
    assert any(s.startswith("Batch 1: tail latency") for s in lines)  # tail_ratio 1.0: always jittery
    assert any(s.startswith("Real-time: p95 latency at batch 1") and "2 runs" in s for s in lines)
    assert any(s.startswith("Server: best throughput") for s in lines)
    figs = a.figures(r)
    assert sorted(figs) == ["performance_memory.png", "performance_quality.png", "performance_speed.png"]
    import matplotlib.pyplot as plt

    for fig in figs.values():
        plt.close(fig)


def test_memory_timeline_samples_stay_in_time_order_with_phase_edges():
    from modelxray.measure.memory_timeline import MemoryTimeline

    with MemoryTimeline(interval_s=0.0005) as timeline:
        for i in range(200):
            with timeline.phase(f"p{i % 3}"):
                pass
    times = [s.t for s in timeline.samples]
    assert times == sorted(times) and len(times) > 400
