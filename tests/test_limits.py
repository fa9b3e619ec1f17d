"""service.limits: what /limits says, for each way of limiting the service."""

from __future__ import annotations

import os

from service.app import create_app
from service.config import Settings
from service.limits import describe_limits


def test_the_keys_and_the_in_process_throttle() -> None:
    off = describe_limits(create_app(Settings(max_concurrent=3, max_queued=5)))
    assert off["cpu_count"] == os.cpu_count()
    assert (off["max_concurrent"], off["max_queued"], off["workers"]) == (3, 5, 1)
    assert off["inprocess"] is None
    assert set(off) == {"cpu_count", "max_iterations", "max_counter", "max_threads",
                        "max_concurrent", "max_queued", "workers", "inprocess", "cgroup"}
    on = describe_limits(create_app(Settings(cpu_limit=30, throttle_cycle=50)))
    assert on["inprocess"] == {"cpu_limit_percent": 30, "cycle_ms": 50, "mode": "cfs",
                              "per": "process"}


def test_the_cgroup_part_is_the_kernels_record_when_readable() -> None:
    cgroup = describe_limits(create_app(Settings()))["cgroup"]
    if cgroup is None:  # no cgroup cpu controller readable here: nothing to say
        return
    assert set(cgroup) == {"version", "path", "group", "quota_us", "period_us", "burst_us",
                           "cpus"}
    assert cgroup["version"] in (1, 2)
    assert (cgroup["cpus"] is None) == (cgroup["quota_us"] is None)
