"""The threads a run uses by default: the CPUs the process may really use (affinity mask, cgroup
quota), said in the report's header."""

import os

from modelxray.core.cpus import cgroup_quota, cpu_budget


def test_cgroup_quota_v2_and_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota(tmp_path) is None
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_quota(tmp_path) is None
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    assert cgroup_quota(tmp_path) == 3.0
    assert cgroup_quota(tmp_path / "missing") is None


def test_the_budget_is_the_smaller_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: two threads may run
    budget = cpu_budget(tmp_path)
    assert (budget.cpus, budget.affinity, budget.quota) == (2, 4, 1.5)
    assert budget.describe() == "2 usable CPUs (affinity 4, cgroup quota 1.5 CPUs)"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert cpu_budget(tmp_path).cpus == 1 and cpu_budget(tmp_path).describe().startswith("1 usable CPU (")


def test_a_configured_thread_count_is_said_as_set(monkeypatch):
    import torch

    from modelxray.app.summary import threads_line

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert threads_line(1) == "1 (threads=1)"
    assert threads_line(None).startswith(f"1, from the {cpu_budget().describe()}")


def test_the_report_header_says_the_threads_used(tmp_path, monkeypatch):
    import modelxray

    monkeypatch.chdir(tmp_path)
    args = ["debug=tiny", "model.n_layer=1", "dataset.max_tokens=256", "dataset.seq_len=32", "report.dashboard=false"]
    args += ["analyzer.performance.iters=1", "analyzer.performance.layer_timing=false"]
    out = modelxray.analyze(args, output_dir=tmp_path / "run")
    header = (tmp_path / "run" / "summary_report.md").read_text()
    (line,) = [ln for ln in header.splitlines() if ln.startswith("- **Threads**")]
    from modelxray.app.orchestration import default_threads

    assert line.startswith(f"- **Threads**: {default_threads()}, from the {cpu_budget().cpus} usable CPU")
    assert out.failed == []


def test_cpu_sample_reads_proc_stat(tmp_path):
    from modelxray.core.cpus import cpu_sample

    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal: busy = user + nice + system + irq + softirq
    stat.write_text(f"cpu  {hz} {hz} {hz} {50 * hz} {hz} {hz} {hz} {9 * hz}\ncpu0 1 2 3\ncpu1 1 2 3\nintr 5\n")
    sample = cpu_sample(stat)
    assert sample.busy == 5.0 and sample.cpus == 2
    assert cpu_sample(tmp_path / "missing").busy is None


def test_busy_elsewhere_leaves_out_this_process_and_short_windows():
    from modelxray.core.cpus import CpuSample, busy_elsewhere, free_threads

    start = CpuSample(wall=10.0, busy=100.0, cpus=2, own=1.0)
    # 2 s on 2 CPUs: 3.5 CPU-seconds busy, 0.5 of them this process's: others held 3.0 of 4.0
    assert busy_elsewhere(start, CpuSample(12.0, 103.5, 2, 1.5)) == 0.75
    assert busy_elsewhere(start, CpuSample(12.0, 100.5, 2, 1.5)) == 0.0  # all of it this process's
    assert busy_elsewhere(start, CpuSample(10.1, 103.5, 2, 1.5)) is None  # too short to tell
    assert busy_elsewhere(start, CpuSample(12.0, None, 2, 1.5)) is None
    assert [free_threads(2, b) for b in (None, 0.0, 0.2, 0.3, 0.75, 1.0)] == [2, 2, 2, 1, 1, 1]
    assert free_threads(16, 0.25) == 12


def test_a_busy_machine_means_fewer_default_threads(monkeypatch):
    import psutil

    from modelxray.app import orchestration, summary

    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 2)
    monkeypatch.setattr(orchestration, "cpu_budget", lambda: cpu_budget().__class__(2, 2, None))
    monkeypatch.setattr(orchestration, "busy_at_start", lambda: 0.0)
    assert orchestration.default_threads() == 2
    monkeypatch.setattr(orchestration, "busy_at_start", lambda: 0.9)
    assert orchestration.default_threads() == 1
    monkeypatch.setattr(summary, "busy_at_start", lambda: 0.9)
    assert "90% of the machine's CPUs busy with other processes" in summary.threads_line(None)


def test_other_processes_running_are_seen_as_busy():
    import subprocess
    import sys
    import time

    from modelxray.core.cpus import busy_elsewhere, cpu_sample

    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 1.0: pass"])
    time.sleep(0.2)  # the child is running
    start = cpu_sample()
    time.sleep(0.6)
    share = busy_elsewhere(start, cpu_sample())
    busy.wait()
    assert share is not None and share >= 0.8 / start.cpus  # one CPU of the machine's, nearly all the time


def test_a_first_look_long_after_the_import_measures_afresh(monkeypatch):
    import time

    from modelxray.core import cpus

    samples = iter([cpus.CpuSample(100.0, 50.0, 2, 0.0), cpus.CpuSample(101.0, 51.0, 2, 0.0)])
    monkeypatch.setattr(cpus, "_START", cpus.CpuSample(0.0, 0.0, 2, 0.0))  # imported long ago
    monkeypatch.setattr(cpus, "_busy_at_start", [])
    monkeypatch.setattr(cpus, "cpu_sample", lambda: next(samples))
    monkeypatch.setattr(time, "sleep", lambda s: None)
    assert cpus.busy_at_start() == 0.5  # the fresh second (1 of 2 CPUs), not the average since the import
    assert cpus.busy_at_start() == 0.5  # and the same on every call
