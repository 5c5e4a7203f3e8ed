"""Typed measurements a Result carries: latency, throughput, speed at a batch size, memory, quality.

In the style of optimum-benchmark's ``Latency``/``Throughput``/``Memory``: each is a small frozen
dataclass that is built from raw readings, pools with others of its kind (``aggregate``), names its
own metrics (``to_metrics(prefix)``, the names logged to MLflow), serialises itself
(``to_dict``/``from_dict``, the layout stored in ``Result.data``) and renders itself (``str`` for a
plain sentence, ``markdown()`` for the summary report). Readers use attributes (``lat.p95_ms``),
never string keys; the keys live here only.

Pure: numpy and the standard library, no torch.
"""

from modelxray.metrics.measurements.memory import Memory
from modelxray.metrics.measurements.quality import Z_95, Quality, wilson_interval
from modelxray.metrics.measurements.speed import UNITS, Latency, Speed, Throughput, t_critical_95

__all__ = ["UNITS", "Z_95", "Latency", "Memory", "Quality", "Speed", "Throughput", "t_critical_95", "wilson_interval"]
