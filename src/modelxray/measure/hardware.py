"""What this machine offers: CPU, memory, GPUs, and which kernels can run here."""

from __future__ import annotations

import importlib.util
import platform
from pathlib import Path

import psutil
import torch


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_profile() -> dict:
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append(
                {
                    "index": i,
                    "name": p.name,
                    "memory_bytes": p.total_memory,
                    "compute_capability": f"{p.major}.{p.minor}",
                }
            )
    return {
        "cpu_model": cpu_model(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "torch_threads": torch.get_num_threads(),
        "ram_bytes": psutil.virtual_memory().total,
        "os": f"{platform.system()} {platform.release()}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpus": gpus,
        "cpu_flags": _cpu_flags(),
        "torchao_installed": importlib.util.find_spec("torchao") is not None,
    }


def _cpu_flags() -> list[str]:
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8")
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [w for w in wanted if w in flags]
    except OSError:
        pass
    return []


CPU_CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")  # Linux's cache sizes; a test points it at a fake tree
_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30}


def _size_bytes(text: str) -> int | None:
    """sysfs's "48K", "2048K", "300M" (or plain bytes) as bytes; None when unreadable."""
    text = text.strip().upper().removesuffix("B")
    try:
        return int(text[:-1]) * _UNITS[text[-1]] if text and text[-1] in _UNITS else int(text)
    except (ValueError, IndexError):
        return None


def cache_sizes(root: Path | None = None) -> tuple[dict[str, int], str]:
    """The data caches of the first CPU core (``L1d``, ``L2``, ``L3``: bytes each; L1 and L2 are a
    core's own, L3 is shared) and where they come from; empty and a line saying so where the OS does
    not report them (sysfs ``cache/index*/{level,type,size}``)."""
    root = CPU_CACHE_ROOT if root is None else root
    sizes: dict[str, int] = {}
    for index in sorted(root.glob("index*")):
        try:
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            size = _size_bytes((index / "size").read_text())
        except OSError:
            continue
        if kind == "Instruction" or size is None:
            continue
        sizes["L1d" if level == "1" else f"L{level}"] = size
    if not sizes:
        return {}, f"the CPU's cache sizes are not reported here (no {root}/index*/size)"
    return sizes, f"sysfs {root}"
