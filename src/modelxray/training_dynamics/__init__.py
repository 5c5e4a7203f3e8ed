"""Training dynamics: how far weights move, where, and whether a sparse or low-rank update would do.

Use in any training loop::

    from modelxray.training_dynamics import DynamicsMonitor, DynamicsConfig
    monitor = DynamicsMonitor.create(DynamicsConfig(interval=100))
    ...
    metrics = monitor.on_optimizer_step(model, inputs=batch, optimizer=optimizer)

Code written for ``ModelAnalysisManager`` / ``AnalysisConfig`` (flat keys such as
``param_change_enabled``) runs unchanged on the same monitor: see :mod:`modelxray.training_dynamics.aliases`.

The names below are imported on first use, so ``modelxray.training_dynamics.config`` (imported when configs
are validated) does not pull in torch through this package.
"""

from __future__ import annotations

from modelxray.core.lazy import lazy_exports

_EXPORTS = {
    "MetricComputer": "base",
    "MetricContext": "base",
    "ParameterDelta": "base",
    "DynamicsConfig": "config",
    "GradConfig": "config",
    "OptimConfig": "config",
    "ParamChangeConfig": "config",
    "SparseConfig": "config",
    "GradientMetrics": "grad_flow",
    "DynamicsMonitor": "monitor",
    "OptimizerMetrics": "optim_stats",
    "ParameterChangeMetrics": "param_change",
    "DynamicsError": "snapshot",
    "Snapshot": "snapshot",
    "SparseQualityMetrics": "sparse_quality",
    # the ModelAnalysisManager names of the same classes (see modelxray.training_dynamics.aliases)
    "AnalysisConfig": "aliases",
    "AnalysisContext": "aliases",
    "ModelAnalysisManager": "aliases",
    "ParameterSnapshot": "aliases",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)  # the names above, imported on first use
