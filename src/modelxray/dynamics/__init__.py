"""Training dynamics: how far weights move, where, and whether a sparse or low-rank update would do.

Use in any training loop::

    from modelxray.dynamics import DynamicsMonitor, DynamicsConfig
    monitor = DynamicsMonitor.create(DynamicsConfig(interval=100))
    ...
    metrics = monitor.on_optimizer_step(model, inputs=batch, optimizer=optimizer)
"""

from modelxray.dynamics.base import MetricComputer, MetricContext, ParameterDelta
from modelxray.dynamics.config import DynamicsConfig, GradConfig, OptimConfig, ParamChangeConfig, SparseConfig
from modelxray.dynamics.monitor import DynamicsMonitor
from modelxray.dynamics.snapshot import DynamicsError, Snapshot

__all__ = [
    "DynamicsConfig",
    "DynamicsError",
    "DynamicsMonitor",
    "GradConfig",
    "MetricComputer",
    "MetricContext",
    "OptimConfig",
    "ParamChangeConfig",
    "ParameterDelta",
    "Snapshot",
    "SparseConfig",
]
