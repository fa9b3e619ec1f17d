"""What ``/limits`` reports (and the pages show): the machine's CPUs, the configured maxima,
the concurrency cap and its waiting line, and the CPU limits in force: ``"inprocess"`` (the
in-process throttle, null when off) and ``"cgroup"`` (the kernel's quota, read at each call),
and ``"burn"``: what one ``/cpuBurnFlow`` iteration costs and how (``service.burn``).
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI

from cpuquota.cgroupfs import limit_in_force

__all__ = ["describe_limits"]


def describe_limits(app: FastAPI) -> dict[str, Any]:
    """``/limits`` of an app built by ``service.app.create_app`` (from its ``app.state``)."""
    state = app.state
    settings, concurrency = state.settings, state.concurrency
    limit = limit_in_force()
    return {
        "cpu_count": os.cpu_count(),
        "max_iterations": settings.max_iterations,
        "max_counter": settings.max_counter,
        "max_threads": state.max_threads,
        "max_concurrent": concurrency.limit,
        "max_queued": concurrency.queue_limit,
        "workers": settings.workers,
        "inprocess": state.throttle.describe(),
        "cgroup": limit.as_dict() if limit is not None else None,
        "burn": state.calibration.describe(),
    }
