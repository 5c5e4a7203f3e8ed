"""Process (and CUDA) memory sampled over time by a background thread, with named phases
(load / quantize / inference), so a strategy's memory is seen as it changes, not only at the end.
Peaks shorter than the sampling interval can be missed; the interval is config."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import psutil
import torch


@dataclass
class Sample:
    t: float
    phase: str
    rss: int
    cuda_allocated: int = 0
    cuda_reserved: int = 0


@dataclass
class MemoryTimeline:
    interval_s: float = 0.05
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self):
        self._phase = "idle"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._proc = psutil.Process()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        """One sample; the background thread and the phase edges both take them, so the clock is read
        and the sample appended under one lock: the samples stay in time order."""
        cuda = self.device.type == "cuda"
        with self._lock:
            self.samples.append(
                Sample(
                    time.perf_counter() - self._t0,
                    self._phase,
                    self._proc.memory_info().rss,
                    torch.cuda.memory_allocated(self.device) if cuda else 0,
                    torch.cuda.memory_reserved(self.device) if cuda else 0,
                )
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> MemoryTimeline:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @contextmanager
    def phase(self, name: str):
        """Label the samples taken while the block runs; one sample at each edge."""
        self._phase = name
        self._sample()
        try:
            yield
        finally:
            self._sample()
            self._phase = "idle"

    def peak(self, phase: str, attr: str = "rss") -> int:
        values = [getattr(s, attr) for s in self.samples if s.phase == phase]
        return max(values) if values else 0

    def rows(self) -> list[dict]:
        return [
            {
                "t_s": s.t,
                "phase": s.phase,
                "rss_bytes": s.rss,
                "cuda_allocated_bytes": s.cuda_allocated,
                "cuda_reserved_bytes": s.cuda_reserved,
            }
            for s in self.samples
        ]
