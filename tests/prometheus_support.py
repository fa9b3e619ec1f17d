"""For tests/test_cluster_prometheus.py: Debian's Prometheus on loopback
(benchmarks/prometheus_server.py: its own data directory, a free port), either scraping the
node agent run on the host against v1 groups with a quota (tests/agent_support.py) every
second, or holding series backfilled by promtool; stopped by its pid, its data directory
removed."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.prometheus_server import Labels, Missing, backfill, binary, openmetrics
from benchmarks.prometheus_server import prometheus_running as running
from tests.agent_support import quota_groups, running_agent
from tests.support import require

BURN = "sh -c 'while :; do :; done'"


@contextmanager
def prometheus_scraping(work: Path, target: str) -> Iterator[str]:
    """Prometheus scraping ``target`` (HOST:PORT, /metrics) every second, as the shipped
    job does (honor_labels); yields its base URL once it is ready."""
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "scrape_configs": [{"job_name": "throttle-lab-recorder", "honor_labels": True,
                                  "static_configs": [{"targets": [target]}]}]}
    with prometheus_running(work, config) as base:
        yield base


@contextmanager
def prometheus_running(work: Path, config: dict[str, Any], args: Sequence[str] = ()
                       ) -> Iterator[str]:
    """benchmarks/prometheus_server.py's (its own data directory, a free port, ``args``
    added), skipped where Prometheus is not installed; yields its base URL once ready."""
    try:
        binary("prometheus")
    except Missing as exc:
        require(False, str(exc))
    with running(work, config, args) as base:
        yield base


@contextmanager
def backfilled_prometheus(work: Path, series: Mapping[str, Mapping[Labels, Sequence[
        tuple[float, float]]]], args: Sequence[str] = ()) -> Iterator[str]:
    """Debian's Prometheus holding ``series`` (see :func:`openmetrics`), backfilled into its
    empty data directory by ``promtool tsdb create-blocks-from openmetrics``, scraping
    nothing; yields its base URL; stopped and its data removed at the end."""
    try:
        binary("promtool")
    except Missing as exc:
        require(False, str(exc))
    work.mkdir(parents=True, exist_ok=True)
    (work / "series.om").write_text(openmetrics(series))
    try:
        backfill(work / "series.om", work / "data", timeout=300)
    finally:
        (work / "series.om").unlink()
    # retention long enough for a backfilled week, whatever the series' age
    with prometheus_running(work, {"global": {"scrape_interval": "15s"}},
                            ["--storage.tsdb.retention.time=30d", *args]) as base:
        yield base


def last_scraped(base: str, selector: str) -> float | None:
    """The newest value Prometheus holds for ``selector`` (one series), None if none."""
    body = httpx.get(base + "/api/v1/query", params={"query": selector}, timeout=10).json()
    result = body["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def wait_scraped(base: str, selector: str, value: float, timeout: float = 60.0) -> None:
    """Until Prometheus's newest sample of ``selector`` is ``value``."""
    deadline = time.monotonic() + timeout
    while last_scraped(base, selector) != value:
        assert time.monotonic() < deadline, f"prometheus never scraped {selector} = {value}"
        time.sleep(0.2)


def quiet(stat: Callable[[], dict[str, int]], periods: int = 3,
          period_s: float = 0.1) -> dict[str, int]:
    """The group's cpu.stat once it has stopped moving."""
    last = stat()
    while True:
        time.sleep(periods * period_s)
        now = stat()
        if now == last:
            return now
        last = now


@dataclass(frozen=True)
class Scraped:
    """A group throttled while the agent exported it and Prometheus scraped the agent: the
    kernel's counters before the burn and after it, each scraped by Prometheus."""

    base: str              # Prometheus
    agent: str             # the agent's base URL
    start: float           # unix seconds, before Prometheus's first sample of the group
    held: float            # unix seconds, Prometheus holding ``before``, before the burn
    before: dict[str, int]     # cpu.stat, quiet, as Prometheus first holds it
    after: dict[str, int]      # cpu.stat, quiet after the burn, as Prometheus last holds it
    usage_ns: tuple[int, int]  # cpuacct.usage before and after


@contextmanager
def scraped_agent(work: Path, throttled: int = 8) -> Iterator[Scraped]:
    """``busy`` (0.2 CPU) throttled ``throttled`` times, ``idle`` (never run) and ``free``
    (no quota, never run), exported by the agent (level "group", namespace "") and scraped by
    Prometheus; all stopped and the groups removed at the end."""
    with quota_groups("prometheus", 2) as (busy, idle), \
            quota_groups("prometheus-free", 1, quota_us=-1) as (free,), \
            running_agent(work, {"busy": busy.cpu, "idle": idle.cpu,
                                 "free": free.cpu}) as agent, \
            prometheus_scraping(work / "prometheus", agent.base.removeprefix("http://")) as base:
        start = time.time()
        sel = '{pod="busy",level="group"}'
        before, usage_before = quiet(busy.cpu_stat), busy.usage_ns()
        wait_scraped(base, f"throttle_lab_cpu_cfs_periods_total{sel}", before["nr_periods"])
        held = time.time()
        burner = subprocess.Popen(busy.join_command(BURN))
        try:
            deadline = time.monotonic() + 60
            while busy.cpu_stat()["nr_throttled"] < throttled:
                assert time.monotonic() < deadline, f"{throttled} throttled periods"
                time.sleep(0.05)
        finally:
            burner.kill()
            burner.wait()
        after, usage_after = quiet(busy.cpu_stat), busy.usage_ns()
        for name, value in (("throttle_lab_cpu_cfs_periods_total", after["nr_periods"]),
                            ("throttle_lab_cpu_cfs_throttled_period_wait_seconds_count",
                             after["nr_throttled"]),
                            ("throttle_lab_cpu_usage_seconds_total", usage_after / 1e9)):
            wait_scraped(base, name + sel, value)
        yield Scraped(base, agent.base, start, held, before, after,
                      (usage_before, usage_after))
