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

__all__ = ["format_server_timing", "kernel_reading", "kernel_throttling", "work_timing"]

# What the kernel counted while the work ran when cpu.stat did not change at all
NOTHING_COUNTED = ', kernel-throttled;dur=0.000;desc="periods=0"'


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


def kernel_reading(probe: CpuStatReader | None) -> bytes | None:
    """``cpu.stat`` as the kernel wrote it, just before a piece of work (None: no probe, or
    unreadable): parsed only if it changed by the end of the work (:func:`work_timing`)."""
    if probe is None:
        return None
    try:
        return probe.read_bytes()
    except OSError:
        return None


def work_timing(wall_ns: int, cpu_ns: int, paused_ns: int | None,
                probe: CpuStatReader | None, before: bytes | None) -> str:
    """The header of one piece of work: ``paused_ns`` is None when the in-process throttle is
    off; ``before`` is :func:`kernel_reading` taken just before the work (None: no kernel
    metric). The same text as :func:`format_server_timing`, written out: it is on every
    burn's path, right after the burn, when every line of Python costs several times more
    (cold caches): so ``cpu.stat`` is parsed only when its bytes changed."""
    header = f"burn;dur={wall_ns / 1e6:.3f}, cpu;dur={cpu_ns / 1e6:.3f}"
    if paused_ns is not None:
        header += f", throttle;dur={paused_ns / 1e6:.3f}"
    if probe is not None and before is not None:
        header += _kernel_throttled(probe, before)
    return header


def _kernel_throttled(probe: CpuStatReader, before: bytes) -> str:
    """``, kernel-throttled;...`` since ``before``; empty when cpu.stat cannot be read."""
    try:
        raw = probe.read_bytes()
    except OSError:
        return ""
    if raw == before:  # no period ended, nothing throttled (no quota, or a short piece)
        return NOTHING_COUNTED
    try:
        after, first = probe.parse(raw), probe.parse(before)
    except ValueError:
        return ""
    if after is None or first is None:
        return ""
    return (f", kernel-throttled;dur={(after.throttled_ns - first.throttled_ns) / 1e6:.3f}"
            f';desc="periods={after.nr_throttled - first.nr_throttled}"')
