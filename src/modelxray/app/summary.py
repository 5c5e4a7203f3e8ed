"""What a run says of itself: the report header (model, dataset, quantization, training, choices)
and the tags the store filters runs by (kind, task)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from modelxray.app.job import JobInfo
from modelxray.core.cpus import busy_at_start, cpu_budget
from modelxray.core.provenance import host, versions
from modelxray.core.subject import Subject
from modelxray.kinds.table import kind_of
from modelxray.report.markdown import quant_text


def kind_tags(subject: Subject, run_name: str, resumed: bool = False) -> dict[str, str]:
    """``modelxray.kind`` and ``modelxray.task`` (the UI filters runs by them); the run of an encoder,
    seq2seq or speech model also says its kind in its name (a resumed run keeps its name)."""
    kind = kind_of(subject)
    tags = {"modelxray.kind": kind.name, "modelxray.task": subject.task}
    if kind.named_in_run and not resumed:
        tags["mlflow.runName"] = f"{run_name} {kind}"
    return tags


def threads_line(configured: int | None) -> str:
    """The torch threads the run used and why: set by ``threads``, or the CPUs the process may use."""
    import torch

    used = torch.get_num_threads()
    if configured:
        return f"{used} (threads={configured})"
    busy = busy_at_start()
    shown = busy is not None and busy >= 0.05
    elsewhere = f", {busy:.0%} of the machine's CPUs busy with other processes as the run started" if shown else ""
    return f"{used}, from the {cpu_budget().describe()}{elsewhere}; threads=N sets it"


def run_summary(config: dict, job: JobInfo, subject: Subject, tracking: str) -> dict[str, Any]:
    """What the report's header says of the run: model, dataset, quantization, training, choices."""
    from modelxray.data.example_inputs import ExampleInputs

    data = subject.data
    if data is None:
        dataset = "user-supplied batches"
    elif isinstance(data, ExampleInputs):  # a generic model's own inputs
        dataset = f"{data.name}: {data.description}; from {data.source}"
    elif hasattr(data, "windows") or hasattr(data, "images"):  # a text, speech or vision task's own examples
        dataset = f"{data.name}: {data.description}"
    elif hasattr(data, "n_tokens"):
        dataset = f"{data.name}: {data.n_tokens:,} of {data.available_tokens:,} tokens, windows of {data.seq_len}"
        if getattr(data, "note", None):  # e.g. a text shorter than one window
            dataset += f" ({data.note})"
    else:
        dataset = (
            f"{data.name}: {data.n_samples:,} test samples of shape {tuple(data.input_shape)}, "
            f"{data.n_classes} classes (trained on {len(data.y_train):,})"
        )
    quant = quant_text([s for s in subject.applied if s.get("kind") != "train"])
    trained = [s for s in subject.applied if s.get("kind") == "train"]
    training = (
        (
            f"{trained[0]['steps']} {trained[0]['optimizer']} steps at lr {trained[0]['lr']:g}"
            + (" (LoRA)" if trained[0]["lora"] else "")
            + " before the analyzers ran"
        )
        if trained
        else None
    )
    return {
        "model": asdict(subject.info),
        "dataset": dataset,
        "quant": quant,
        "training": training,
        "choices": job.choices,
        "overrides": job.overrides,
        "tracking": tracking,
        "host": host(),
        "threads": threads_line(config.get("threads")),
        "versions": versions(),
        "output_dir": str(job.output_dir),
        "config": config,
    }
