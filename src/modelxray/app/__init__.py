"""One run: validate, build the subject, quantize, analyze, report, track. Nothing else.

``run(cfg)`` is a plain function of the composed config (the CLI, the Python API and the tests
all call it), following lightning-hydra-template's ``train(cfg)``.

The stages live in modules with one job each: :mod:`.orchestration` (``run``, the stages in order),
:mod:`.loading` (the model and its data), :mod:`.run_tracking` (the run in the store: opened,
ended, recorded when it fails), :mod:`.checks` (what must fit before any analyzer works),
:mod:`.resume` (where a run starts), :mod:`.reference_model` (another model's outputs to compare
with), :mod:`.quant_stage` (quantizing in place or a copy), :mod:`.stage_results` (one analyzer run
and kept), :mod:`.summary` (what a run says of itself), :mod:`.given` (a Python caller's own model)
and :mod:`.job` (what a job is and gives back). The names other modules import from ``modelxray.app``
are re-exported here.
"""

from __future__ import annotations

from modelxray.app.checks import check_task, check_trial_forward, preflight
from modelxray.app.job import JobInfo, RunOutcome, choices_of, config_fingerprint, flatten
from modelxray.app.loading import _bind_class_prompts as _bind_class_prompts
from modelxray.app.loading import _fit_images as _fit_images
from modelxray.app.loading import load_subject
from modelxray.app.orchestration import run
from modelxray.app.stage_results import keep_stage, run_stage
from modelxray.app.summary import run_summary
from modelxray.models import process_cache as process_cache  # the tests patch its lookup through app

__all__ = [
    "JobInfo",
    "RunOutcome",
    "check_task",
    "check_trial_forward",
    "choices_of",
    "config_fingerprint",
    "flatten",
    "keep_stage",
    "load_subject",
    "preflight",
    "run",
    "run_summary",
    "run_stage",
]
