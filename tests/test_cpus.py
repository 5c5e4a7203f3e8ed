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
