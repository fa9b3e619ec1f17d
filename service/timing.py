"""The ``Server-Timing`` header of the CPU-work routes (``/cpuBurnFlow``, ``/pi``, ``/api/pi``).

Durations in ms, 3 decimals: ``burn;dur=`` (the work's wall time), ``cpu;dur=`` (its CPU time),
``throttle;dur=`` (the wall time the in-process throttle paused it; only when ``--cpu-limit``
is on) and ``kernel-throttled;dur=...;desc="periods=N"`` (what the kernel's ``cpu.stat`` counted
during the work; only when a cgroup's counters are readable). The guard adds ``queue;dur=``
to a request that waited for a slot (``service.guard``).
"""

from __future__ import annotations

from collections.abc import Mapping

from cpuquota.cgroupfs import CpuStatReader
from cpuquota.account import CpuStat

__all__ = ["format_server_timing", "kernel_throttling", "work_timing"]


def format_server_timing(metrics: Mapping[str, float | tuple[float, str]]) -> str:
    """``{"burn": 4.93, "kernel-throttled": (70.0, "periods=1")}`` ->
    ``burn;dur=4.930, kernel-throttled;dur=70.000;desc="periods=1"`` (durations in ms)."""
    parts = []
    for name, value in metrics.items():
        ms, desc = value if isinstance(value, tuple) else (value, "")
        parts.append(f"{name};dur={ms:.3f}" + (f';desc="{desc}"' if desc else ""))
    return ", ".join(parts)


def kernel_throttling(probe: CpuStatReader | None,
                      before: CpuStat | None) -> dict[str, tuple[float, str]]:
    """The kernel's throttling of our cgroup since ``before`` as a Server-Timing metric: the
    delta of cpu.stat's throttled time and nr_throttled. Exact for sequential requests; under
    concurrency it also counts throttling that hit while other requests ran."""
    after = probe.sample() if probe is not None and before is not None else None
    if after is None or before is None:
        return {}
    delta = after - before
    return {"kernel-throttled": (delta.throttled_ns / 1e6, f"periods={delta.nr_throttled}")}


def work_timing(wall_ns: int, cpu_ns: int, paused_ns: int | None,
                probe: CpuStatReader | None, before: CpuStat | None) -> str:
    """The header of one piece of work: ``paused_ns`` is None when the in-process throttle is
    off; ``before`` is ``probe.sample()`` taken just before the work (None: no kernel metric).
    The same text as :func:`format_server_timing`, written out: it is on every burn's path."""
    header = f"burn;dur={wall_ns / 1e6:.3f}, cpu;dur={cpu_ns / 1e6:.3f}"
    if paused_ns is not None:
        header += f", throttle;dur={paused_ns / 1e6:.3f}"
    after = probe.sample() if probe is not None and before is not None else None
    if after is not None and before is not None:
        header += (f", kernel-throttled;dur={(after.throttled_ns - before.throttled_ns) / 1e6:.3f}"
                   f';desc="periods={after.nr_throttled - before.nr_throttled}"')
    return header
