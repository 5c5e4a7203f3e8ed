"""One analysis object over one model, call by call (``ModelAnalyzer``, part of modelxray's Python API)::

    from modelxray import ModelAnalyzer

    analyzer = ModelAnalyzer("model.pt")  # a model file or directory, a hub id, or an nn.Module
    performance_results = analyzer.analyze_performance(data_loader)
    bit_width_results = analyzer.analyze_bit_widths(data_loader)
    robustness_results = analyzer.analyze_robustness(data_loader)
    analyzer.generate_comprehensive_report("./results/")

    speed = analyzer.performance_analyzer.benchmark_inference_speed(data_loader)
    speed["tokens_per_second"]

The model loads (and, with a ``quant=`` override, is quantized) once; each call runs one of the
configured analyzers on it, on the DataLoader given (token-id batches: a (B, T) tensor or a mapping
with ``input_ids`` and optional ``labels``) or, without one, on the configured dataset. It is
``modelxray.analyze`` kept open: the same analyzers, configs (``overrides``, as on the command
line), files and MLflow logging. The object has one MLflow run; each call logs its analyzer's
metrics and files to it as the analyzer finishes and leaves the run FINISHED (FAILED if the analyzer
raised: the call then raises too, with the traceback saved in ``errors/``); the next call reopens it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SEED_ANALYZERS = "analyzer=[performance,bitwidth,robustness]"


def model_overrides(model: str | Path) -> list[str]:
    """A path or hub id as the model group's overrides: a local file or directory -> ``model=file``
    (an HF directory, a state dict with its config.json beside it, safetensors, TorchScript, GGUF),
    anything else -> a hub id (``model=hf``)."""
    path = Path(str(model)).expanduser()
    if path.exists():
        return ["model=file", f"model.path={path.resolve()}"]
    return ["model=hf", f"model.name_or_path={model}"]


class ModelAnalyzer:
    """One analysis object over one model; see the module docstring.

    ``overrides``: config overrides as on the command line (``"analyzer.robustness.pgd_steps=3"``,
    ``"tracker=none"``, ``"quant=int8"``); the analyzers are performance, bitwidth and robustness
    unless an ``analyzer=[...]`` override chooses others. ``output_dir``: where each analyzer's files
    go (default ``outputs/api/<date>/<time>``). ``tokenizer``, ``image_shape``, ``example_inputs``:
    ``processor``: as for ``modelxray.analyze`` with an in-memory model."""

    def __init__(
        self,
        model: Any,
        overrides: list[str] | None = None,
        *,
        tokenizer: Any = None,
        image_shape: tuple[int, int, int] | None = None,
        example_inputs: Any = None,
        processor: Any = None,
        output_dir: str | Path | None = None,
    ):
        import torch

        from modelxray.api import compose, default_output_dir
        from modelxray.app import JobInfo, choices_of
        from modelxray.config.components import build_components

        user = list(overrides or [])
        chosen = [] if any(o.split("=")[0].lstrip("+~") == "analyzer" for o in user) else [SEED_ANALYZERS]
        in_memory = isinstance(model, torch.nn.Module)
        self.name = type(model).__name__ if in_memory else Path(str(model)).name
        self.overrides = [*chosen, *([] if in_memory else model_overrides(model)), *user]
        cfg = compose(self.overrides)
        out = Path(output_dir) if output_dir else default_output_dir()
        self.job = JobInfo(output_dir=out, choices=choices_of(cfg.hydra), overrides=self.overrides)
        from omegaconf import open_dict

        with open_dict(cfg):
            del cfg["hydra"]
        self.cfg = cfg
        self.components = build_components(cfg, skip_model=in_memory)
        self.components.tracker.check()
        self._given = dict(model=model if in_memory else None, tokenizer=tokenizer, image_shape=image_shape)
        self._given["example_inputs"] = example_inputs
        self._given["processor"] = processor
        self._base = None  # the loaded (and quantized) subject for DataLoaders, loaded on first use
        self._with_dataset = None  # the same on the configured dataset, loaded on first use
        self._run = None
        self._tried: set[tuple[int, int]] = set()  # (model, data) pairs whose trial forward ran
        self.results: dict[str, Any] = {}  # analyzer -> Result, the latest call's
        self._written: dict[str, Any] = {}
        self.performance_analyzer = PerformanceCalls(self)
        self.bit_width_analyzer = BitWidthCalls(self)
        self.robustness_analyzer = RobustnessCalls(self)

    # -- the analysis calls -----------------------------------------------------------------------
    def analyze_performance(self, data_loader: Any = None) -> dict[str, Any]:
        """Loss, perplexity, accuracy and top-k, latency and throughput, memory, per-module time."""
        return self.analyze("performance", data_loader)

    def analyze_bit_widths(self, data_loader: Any = None, configs: dict | None = None) -> dict[str, Any]:
        """Uniform, mixed, progressive and custom bit-width plans, layer sensitivity, the recommended
        plan; ``configs``: extra plans, ``{name: rules}`` as ``analyzer.bitwidth.custom`` takes them."""
        return self.analyze("bitwidth", data_loader, custom=configs)

    def analyze_robustness(self, data_loader: Any = None) -> dict[str, Any]:
        """FGSM and PGD attacks, weight and quantization noise, token dropout and substitution."""
        return self.analyze("robustness", data_loader)

    def generate_comprehensive_report(self, output_dir: str | Path | None = None) -> dict[str, Path]:
        """``analysis_results.json``, ``summary_report.md``, ``insights.md`` and ``plots/`` (with the
        summary dashboard) of every analysis run so far, written to ``output_dir`` (default: this
        object's) and logged to its MLflow run. Returns the written files by name."""
        import dataclasses

        from modelxray.api import choices_used
        from modelxray.app import run_summary
        from modelxray.report.writer import write_reports

        if not self.results:
            raise RuntimeError("nothing to report yet: call analyze_performance/analyze_bit_widths/... first")
        out = Path(output_dir) if output_dir else Path(self.job.output_dir)
        subject = self._base or self._with_dataset
        run = self._tracker_run()
        job = dataclasses.replace(
            self.job, choices=choices_used(self.job.choices, dataset=self._with_dataset is not None)
        )
        info = run_summary(dict(self._config()), job, subject, run.describe())
        same_dir = out.resolve() == Path(self.job.output_dir).resolve()
        paths = write_reports(
            out,
            info,
            self.results,
            dashboard=bool(self.cfg.report.dashboard),
            written=self._written if same_dir else None,
        )
        run.log_files(out, [p for p in paths if p.exists()])
        self._finish()
        return {str(p.relative_to(out)): p for p in paths}

    # -- any configured analyzer -------------------------------------------------------------------
    def analyze(self, name: str, data_loader: Any = None, **keys: Any) -> dict[str, Any]:
        """Run the configured analyzer ``name`` (with ``keys`` replacing its config values for this
        call) on ``data_loader`` or the configured dataset; returns its result as a dict
        (``metrics``, ``tables``, ``insights``, ``data``...), also saved and logged."""
        import dataclasses

        from modelxray.app import check_task, check_trial_forward, keep_stage, preflight, run_stage
        from modelxray.core.errors import ConfigError
        from modelxray.core.result import RunContext

        if name not in self.components.analyzers:
            have = ", ".join(self.components.analyzers) or "none"
            raise ConfigError(
                "analyzer", f"{name!r} is not configured here (configured: {have}); add it with analyzer=[...]"
            )
        analyzer = self.components.analyzers[name]
        keys = {k: v for k, v in keys.items() if v is not None}
        if keys:
            try:
                analyzer = dataclasses.replace(analyzer, **keys)  # re-validated: a bad plan is one line
                analyzer.validate()
            except ConfigError as exc:
                raise exc.under(f"analyzer.{name}") from None
        subject = self._subject(data_loader)
        check_task(subject, {name: analyzer})
        preflight(subject, {name: analyzer})
        tried = (id(subject.model), id(subject.data if subject.data is not None else subject.batches))
        if tried not in self._tried:  # once per model and data: every later call runs the same example
            check_trial_forward(subject)
            self._tried.add(tried)
        run = self._tracker_run()
        from omegaconf import OmegaConf

        ctx = RunContext(
            output_dir=Path(self.job.output_dir),
            seed=self.cfg.seed,
            progress=self.cfg.progress,
            original_weights=OmegaConf.select(self.cfg, "runtime.original_weights", default="auto"),
        )
        result = run_stage(name, analyzer, subject, ctx)
        self.results[name] = result
        keep_stage(name, result, Path(self.job.output_dir), run, self._written)
        self._finish()
        if not result.ok:
            raise RuntimeError(f"analyzer {name} failed:\n{result.error}")
        return result.to_json()

    # -- internals ---------------------------------------------------------------------------------
    def _config(self) -> dict:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(self.cfg, resolve=True)

    def _subject(self, data_loader: Any):
        """The loaded (and quantized) model on ``data_loader``; without one, on the configured dataset
        (a generic model: its example inputs). Each is loaded once, the model through the process
        cache (so a file is read once)."""
        import dataclasses

        if data_loader is not None:
            if self._base is None:
                self._base = self._load(load_dataset=False)
            from modelxray.app.loading import user_batches

            data, batches = user_batches(self._base, data_loader, "data_loader", self._given["image_shape"])
            if data is None:  # a language model (its token batches, read once) or a generic module
                return dataclasses.replace(self._base, batches=batches)
            shape = self._given["image_shape"] or getattr(self._base.model, "image_shape", None)
            from modelxray.data.base import ClassificationData

            if isinstance(data, ClassificationData) and shape is not None:  # a classifier's split: its images
                from modelxray.data.images import fit_images

                data = fit_images(data, tuple(shape), self.name)
            return dataclasses.replace(self._base, data=data)
        if self._with_dataset is None:
            self._with_dataset = self._load(load_dataset=True)
        return self._with_dataset

    def _load(self, load_dataset: bool):
        from modelxray.app import load_subject

        subject, _ = load_subject(self.cfg, self.components, load_dataset=load_dataset, **self._given)
        subject, report = self.components.quant.apply(subject, progress=self.cfg.progress)
        if report is not None:
            self.results["quant"] = report
        return subject

    def _tracker_run(self):
        """The object's MLflow run: started (params logged) on first use, reopened afterwards."""
        from modelxray.app import config_fingerprint, flatten
        from modelxray.tracking.run_tags import run_tags, store_key

        if self._run is None:
            config = self._config()
            tags = {
                **run_tags(self.overrides, None, None, store_key(self.components.tracker)),
                "modelxray.entry": "ModelAnalyzer",
                "modelxray.config_hash": config_fingerprint(config),
            }
            self._run = self.components.tracker.start(f"ModelAnalyzer {self.name}", tags)
            Path(self.job.output_dir).mkdir(parents=True, exist_ok=True)
            self._run.record(Path(self.job.output_dir))
            params = {**flatten(config), **{k: str(v) for k, v in self.job.choices.items()}}
            loaded = self._base or self._with_dataset
            if loaded is not None:
                params.update(loaded.info.as_params())
            self._run.log_params(params)
        else:
            self._run.reopen()
        return self._run

    def _finish(self) -> None:
        failed = any(not r.ok for r in self.results.values())
        self._run.finish("FAILED" if failed else "FINISHED")


class _Calls:
    """A sub-analyzer (``analyzer.performance_analyzer`` ...) over the same loaded model."""

    def __init__(self, owner: ModelAnalyzer):
        self._owner = owner


class PerformanceCalls(_Calls):
    def benchmark_inference_speed(self, data_loader: Any, iters: int | None = None) -> dict[str, float]:
        """Latency (mean, p50, p95, p99) and throughput of forward passes on the loader's batches:
        ``tokens_per_second``, ``batches_per_second``; each batch timed once after a warm-up of the
        first, up to ``iters`` batches (default ``analyzer.performance.iters``). Logged as
        ``speed/<metric>``."""
        from modelxray.core.errors import ConfigError
        from modelxray.measure.loader_speed import time_loader

        owner = self._owner
        subject = owner._subject(data_loader)
        from modelxray.kinds.table import kind_of

        if not kind_of(subject).reads_token_batches:
            raise ConfigError(
                "data_loader",
                f"benchmark_inference_speed times a language model's token batches; {owner.name} is a "
                f"{subject.task} model: analyze_performance(data_loader) reports its speed",
            )
        perf = owner.components.analyzers.get("performance")
        # a language model's batches as read once for the subject (a generator is not read twice)
        batches = subject.batches if subject.batches is not None else data_loader
        speed = time_loader(subject.model, batches, iters or (perf.iters if perf else 10), owner.cfg.progress)
        metrics = speed.to_metrics(prefix="")
        out = {
            **metrics,
            "tokens_per_second": metrics["tokens_per_s"],
            "batches_per_second": metrics["batches_per_s"],
            "batch_size": float(speed.batch_size),
            "seq_len": float(speed.seq_len),
        }
        run = owner._tracker_run()
        run.log_metrics({f"speed/{k}": v for k, v in out.items()})
        owner._finish()
        return out


class BitWidthCalls(_Calls):
    def analyze_layer_sensitivity(self, data_loader: Any = None) -> list[dict]:
        """Per block and component (attention, MLP), the quality lost when only it is quantized to
        ``analyzer.bitwidth.sensitivity_bits``, most sensitive first (the ``layer_sensitivity`` table)."""
        out = self._owner.analyze("bitwidth", data_loader, sensitivity=True)
        rows = out["tables"].get("layer_sensitivity", [])
        key = "loss_increase" if rows and "loss_increase" in rows[0] else "kl"
        return sorted(rows, key=lambda r: -(r.get(key) or 0.0))

    def test_configurations(self, data_loader: Any, custom_configs: dict) -> dict[str, Any]:
        """Evaluate ``custom_configs`` (``{name: plan}``) beside the analyzer's own plans; returns the
        bitwidth result (its ``configurations`` table has a row ``custom_<name>`` per plan)."""
        return self._owner.analyze("bitwidth", data_loader, custom=custom_configs)


class RobustnessCalls(_Calls):
    def evaluate(self, data_loader: Any = None) -> dict[str, Any]:
        """The robustness analysis (``analyze_robustness``)."""
        return self._owner.analyze("robustness", data_loader)
