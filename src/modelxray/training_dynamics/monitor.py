"""``DynamicsMonitor``: call it after every optimizer step of any training loop.

It owns the snapshot lifecycle: the first call (or ``start(model)``) snapshots the trainable
parameters; every ``interval`` steps it runs each metric computer against that snapshot, returns
their metrics (an empty dict between intervals) and re-snapshots. A computer that raises (or returns
something that is not a number) is reported once, by name, and skipped from then on; training goes on.

    monitor = DynamicsMonitor.create(DynamicsConfig(interval=100))
    for batch in loader:
        loss.backward(); optimizer.step()
        metrics = monitor.on_optimizer_step(model, inputs=batch, optimizer=optimizer)
        optimizer.zero_grad()
"""

from __future__ import annotations

import inspect
import logging
import time
import traceback
from typing import Any

from torch import nn

from modelxray.training_dynamics.base import MetricComputer, MetricContext, ParameterDelta
from modelxray.training_dynamics.config import DynamicsConfig
from modelxray.training_dynamics.grad_flow import GradientMetrics
from modelxray.training_dynamics.optim_stats import OptimizerMetrics
from modelxray.training_dynamics.param_change import ParameterChangeMetrics
from modelxray.training_dynamics.snapshot import DynamicsError, Snapshot

log = logging.getLogger("modelxray.training_dynamics")

_ARGS = ("delta", "snapshot", "context")


def label(computer: MetricComputer) -> str:
    """How warnings, timings and ``monitor.errors`` name a computer: its ``name``, else its class."""
    return getattr(computer, "name", "") or type(computer).__name__


def call_style(computer: MetricComputer) -> str:
    """``keyword`` when ``compute`` takes ``delta=, snapshot=, context=`` by name (so ``compute(self,
    **kwargs)`` and ``compute(self, delta, context, **kwargs)`` work), else ``positional``; a TypeError
    when it takes neither, so a computer that could never run fails when it is added."""
    try:
        sig = inspect.signature(computer.compute)
    except (TypeError, ValueError):  # a callable without a signature: assume the documented order
        return "positional"
    for style, args, kwargs in (("keyword", (), dict.fromkeys(_ARGS)), ("positional", (None,) * 3, {})):
        try:
            sig.bind(*args, **kwargs)
            return style
        except TypeError:
            pass
    raise TypeError(f"{type(computer).__name__}.compute{sig} cannot take (delta, snapshot, context)")


def run_computer(computer: MetricComputer, delta: ParameterDelta, snapshot: Snapshot, context: MetricContext):
    """The computer's metrics as ``{"<name>/<metric>": float}`` (keys as returned when it has no name)."""
    args = (delta, snapshot, context)
    if call_style(computer) == "keyword":
        values = computer.compute(**dict(zip(_ARGS, args)))
    else:
        values = computer.compute(*args)
    name = getattr(computer, "name", "")
    prefix = f"{name}/" if name else ""
    return {f"{prefix}{k}": float(v) for k, v in (values or {}).items()}


def _detach_batch(batch: Any) -> Any:
    import torch

    if torch.is_tensor(batch):
        return batch.detach().clone()
    if isinstance(batch, dict):
        return {k: _detach_batch(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_detach_batch(v) for v in batch)
    return batch


class DynamicsMonitor:
    def __init__(self, config: DynamicsConfig | None = None, probe: Any = None):
        self.config = config or DynamicsConfig()
        self.probe = probe
        self.computers: list[MetricComputer] = []
        self.snapshot: Snapshot | None = None
        self.step = 0
        self.errors: dict[str, str] = {}  # computer name -> first traceback
        self.warnings: list[str] = []
        self.timings: dict[str, float] = {}  # computer name -> seconds, summed over measurements
        self.snapshot_seconds = 0.0
        self.measurements = 0

    @classmethod
    def create(cls, config: DynamicsConfig | None = None, probe: Any = None) -> DynamicsMonitor:
        """A monitor with the computers the config enables (parameter change, sparse quality,
        gradients, optimizer state)."""
        from modelxray.training_dynamics.landscape import ActivationMetrics, SharpnessMetrics
        from modelxray.training_dynamics.sparse_quality import SparseQualityMetrics

        monitor = cls(config, probe)
        cfg = monitor.config
        for enabled, computer in (
            (cfg.param_change.enabled, ParameterChangeMetrics()),
            (cfg.sparse.enabled, SparseQualityMetrics()),
            (cfg.grad.enabled, GradientMetrics()),
            (cfg.optim.enabled, OptimizerMetrics()),
            (cfg.activations.enabled, ActivationMetrics()),
            (cfg.sharpness.enabled, SharpnessMetrics()),
        ):
            if enabled:
                monitor.add_metric(computer)
        return monitor

    def add_metric(self, computer: MetricComputer) -> DynamicsMonitor:
        """Add a computer: any object with ``compute(delta, snapshot, context) -> dict``. With a ``name``
        its metrics are logged as ``<name>/<metric>``; without one, under the keys it returns."""
        if not callable(getattr(computer, "compute", None)):
            raise TypeError(f"{type(computer).__name__} has no compute(delta, snapshot, context) method")
        call_style(computer)
        self.computers.append(computer)
        return self

    def reset(self) -> None:
        """Forget the snapshot (after the architecture or the set of trainable parameters changed);
        the next call snapshots again."""
        self.snapshot = None

    def start(self, model: nn.Module, step: int = 0) -> None:
        """Snapshot now (before the first optimizer step, so the first interval counts every step)."""
        self.step = step
        self._snapshot(model)

    def _snapshot(self, model: nn.Module) -> None:
        t0 = time.perf_counter()
        pc = self.config.param_change
        self.snapshot = Snapshot(
            model,
            self.step,
            self.config.snapshot_dtype,
            quantile_sample=pc.quantile_sample if pc.quantiles else 0,
            seed=self.step,
            device=self.config.snapshot_device,
        )
        self.snapshot_seconds += time.perf_counter() - t0

    def due(self, step: int | None = None) -> bool:
        """Whether the call for ``step`` (default: the next one) will measure."""
        step = self.step + 1 if step is None else step
        return self.snapshot is not None and step - self.snapshot.step >= self.config.interval

    def on_optimizer_step(
        self,
        model: nn.Module,
        inputs: Any = None,
        optimizer=None,
        step: int | None = None,
        lr: float | None = None,
        final: bool = False,
        grad_scale: float = 1.0,
    ) -> dict[str, float]:
        """Call once per optimizer step, after ``optimizer.step()`` and before ``zero_grad()``.

        ``step`` defaults to counting calls. Returns ``{"<computer>/<metric>": value}`` on measuring
        steps and ``{}`` otherwise. ``final=True`` (a loop's last step) measures whatever is left of
        the interval, and runs every computer (``sparse.every`` does not skip it). ``grad_scale``: if the
        loop clipped the gradients by a factor c (``p.grad`` = c x raw gradient), pass c and the
        ``grad/`` norms are those of the raw gradients."""
        self.step = self.step + 1 if step is None else step
        probing = self.config.sparse.enabled or self.config.activations.enabled or self.config.sharpness.enabled
        if self.probe is None and inputs is not None and probing:
            self.probe = _detach_batch(inputs)  # the first batch seen is the fixed probe from now on
        if self.snapshot is None:
            self._snapshot(model)
            return {}
        if self.step - self.snapshot.step < self.config.interval and not (final and self.step > self.snapshot.step):
            return {}
        self.snapshot.check(model)
        if lr is None and optimizer is not None:
            lr = float(optimizer.param_groups[0]["lr"])
        delta = ParameterDelta(model, self.snapshot, self.step - self.snapshot.step)
        context = MetricContext(
            model=model,
            step=self.step,
            config=self.config,
            optimizer=optimizer,
            lr=lr,
            inputs=inputs,
            probe=self.probe,
            measurement=self.measurements + 1,
            final=final,
            grad_scale=grad_scale,
        )
        metrics: dict[str, float] = {}
        for computer in self.computers:
            name = label(computer)
            if name in self.errors:
                continue
            t0 = time.perf_counter()
            try:
                values = run_computer(computer, delta, self.snapshot, context)
            except DynamicsError:
                raise
            except Exception as exc:  # noqa: BLE001 - a broken metric must not stop training
                self.errors[name] = traceback.format_exc()
                log.warning(
                    "modelxray: dynamics metric %r failed and is skipped from now on: %s: %s",
                    name,
                    type(exc).__name__,
                    exc,
                )
                continue
            finally:
                self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0
            metrics.update(values)
        for w in context.cache.get("warnings", []):
            if w not in self.warnings:
                self.warnings.append(w)
                log.warning("modelxray: %s", w)
        self.measurements += 1
        self._snapshot(model)
        return metrics
