"""service.limits: what /limits says, for each way of limiting the service."""

from __future__ import annotations

import os

import pytest

from service.app import create_app
from service.config import Settings
from service.limits import describe_limits


def test_the_keys_and_the_in_process_throttle() -> None:
    off = describe_limits(create_app(Settings(max_concurrent=3, max_queued=5)))
    assert off["cpu_count"] == os.cpu_count()
    assert (off["max_concurrent"], off["max_queued"], off["workers"]) == (3, 5, 1)
    assert off["inprocess"] is None
    assert set(off) == {"cpu_count", "max_iterations", "max_counter", "max_threads",
                        "max_concurrent", "max_queued", "workers", "inprocess", "cgroup",
                        "burn"}
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


def test_the_burn_part_says_what_an_iteration_costs_and_how() -> None:
    burn = describe_limits(create_app(Settings(iteration_us=3)))["burn"]
    assert burn["calibrated"] is True and burn["iteration_us"] == 3
    assert burn["loops_per_iteration"] * burn["loop_us"] == pytest.approx(3, rel=0.01)
    assert burn["measured_cpu_ms"] > 0 and burn["hash_bytes_per_iteration"] > 0
    raw = describe_limits(create_app(Settings(calibrate=False)))["burn"]
    assert raw["calibrated"] is False and raw["loops_per_iteration"] == 1
    assert raw["iteration_us"] == pytest.approx(raw["loop_us"], abs=0.001)
