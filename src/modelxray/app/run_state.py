"""What one run's stages hand each other (``RunState``): its own module, so that the stages kept
elsewhere (``run_tracking``) and the orchestration that runs them import it one way."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from modelxray.app.given import Given
from modelxray.app.job import JobInfo, RunOutcome
from modelxray.app.reference_model import ReferenceOutputs
from modelxray.config.components import Components
from modelxray.core.result import Result
from modelxray.core.subject import Subject
from modelxray.report.writer import Written


@dataclass
class RunState:
    """What one run's stages hand each other, from the composed config to the tracked run."""

    cfg: DictConfig
    job: JobInfo
    given: Given
    components: Components
    config: dict[str, Any]  # the resolved config, as logged
    out_dir: Path
    run_name: str
    tags: dict[str, str]
    config_hash: str
    resume_id: str | None = None  # the run this one continues
    done: Any = ()  # the analyzers that run finished (or, when skipped, its id and metrics)
    tracker_run: Any = None  # started once the model and data are loaded and checked
    subject: Subject | None = None
    params: dict[str, str] = field(default_factory=dict)
    earlier: dict[str, Result] = field(default_factory=dict)  # results a resumed run finished before
    results: dict[str, Result] = field(default_factory=dict)
    written: dict[str, Written] = field(default_factory=dict)
    reference_error: str | None = None  # the unquantized outputs failed: performance fails, the rest run
    metrics: dict[str, float] = field(default_factory=dict)
    skipped: RunOutcome | None = None  # FINISHED before: nothing runs
    reference: ReferenceOutputs | None = None  # reference=file|hf|gguf: the other model's outputs
    stage: str = ""  # the stage running now
    offload: Any = None  # app.offload.OffloadChoice: the model in memory, or streamed block by block
