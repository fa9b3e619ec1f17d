"""``/metrics``: Prometheus text exposition of what the service did and what throttled it.

Each app has its own :class:`ServiceMetrics` with its own ``CollectorRegistry`` (never the
global one), so tests and tools can build several apps in one process. Series:

- ``throttle_lab_http_requests_total{route,method,status}`` and
  ``throttle_lab_http_request_duration_seconds{route}`` (a histogram whose buckets resolve the
  ~70 ms throttling stalls): counted by an ASGI middleware per route template.
- ``throttle_lab_burn_cpu_seconds_total``: CPU the burn loops used (thread CPU time).
- ``throttle_lab_process_cpu_seconds_total``: the process's CPU (all threads, ns resolution,
  from ``time.process_time_ns``; the standard ``process_cpu_seconds_total`` counts in 10 ms
  ticks).
- ``throttle_lab_burn_iteration_cpu_seconds`` (the CPU one burn iteration costs, as calibrated
  at start) and ``throttle_lab_burn_loops_per_iteration`` (the passes of the loop that make
  one; 1 with ``--no-calibrate``).
- With ``--cpu-limit``: the in-process throttle's counters, named after the kernel's
  ``cpu.stat`` (``nr_periods``, ``nr_throttled``, throttled time) so one dashboard reads both:
  ``throttle_lab_inprocess_nr_periods_total``, ``throttle_lab_inprocess_nr_throttled_total``,
  ``throttle_lab_inprocess_throttled_seconds_total``, and gauges
  ``throttle_lab_inprocess_quota_seconds`` / ``throttle_lab_inprocess_period_seconds``
  (``--throttle-mode boundary``: counters summed over the worker threads, quota per thread).

- The kernel's ``cpu.stat`` of the cgroup whose quota is in force (ours with ``--cpus``,
  Docker's, Kubernetes'), named like cAdvisor: ``container_cpu_cfs_periods_total``,
  ``container_cpu_cfs_throttled_periods_total``, ``container_cpu_cfs_throttled_seconds_total``
  and, when a quota is set, ``container_spec_cpu_quota`` / ``container_spec_cpu_period`` (µs).
  Absent when no cgroup cpu.stat is readable. The group's counters count every process in it.

To add a series, write a collector (an object with
``collect()`` yielding ``prometheus_client.core`` metric families, optionally ``describe()``)
and call ``app.state.metrics.register(collector)``.

With ``--workers N`` each worker process has its own counters; a scrape sees one worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cpuquota.cgroupfs import CpuStatReader, read_cpu_limit
from service.burn import Calibration
from service.throttle import Throttle

__all__ = ["LATENCY_BUCKETS", "BurnCpuCollector", "CalibrationCollector", "InProcessThrottleCollector", "KernelCpuStatCollector",
           "MetricsMiddleware", "ProcessCpuCollector", "ServiceMetrics", "install_metrics"]

# Seconds. Dense around 5 ms (an unthrottled request) and 70-100 ms (one throttled period).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                   0.3, 0.5, 1.0, 2.5, 5.0, 10.0)


class ServiceMetrics:
    """The service's metrics in a registry of its own."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.requests = Counter("throttle_lab_http_requests", "HTTP requests answered",
                                ["route", "method", "status"], registry=self.registry)
        self.latency = Histogram("throttle_lab_http_request_duration_seconds",
                                 "Wall time from request to the end of the response",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.burn_cpu = BurnCpuCollector()
        self.register(self.burn_cpu)
        self.register(ProcessCpuCollector())
        self._series: dict[tuple[str, str, int], tuple[Callable[[], None],
                                                       Callable[[float], None]]] = {}

    def register(self, collector: Collector) -> None:
        """Add a collector (e.g. the kernel's cpu.stat) to this app's registry."""
        self.registry.register(collector)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        # the labelled series, looked up once per (route, method, status): labels() checks
        # and locks on every call, a dict lookup does not
        key = (route, method, status)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = (
                self.requests.labels(route=route, method=method, status=str(status)).inc,
                self.latency.labels(route=route).observe)
        count, observe = series
        count()
        observe(seconds)

    def observe_burn(self, cpu_ns: int) -> None:
        self.burn_cpu.add(cpu_ns)

    def render(self) -> bytes:
        """The Prometheus text format of everything registered."""
        return generate_latest(self.registry)


class BurnCpuCollector(Collector):
    """``throttle_lab_burn_cpu_seconds_total``: the burns' CPU time. Added right after each
    burn, when every line of Python costs several times more (cold caches), so without a lock:
    each thread adds to a total of its own, and a scrape sums them."""

    NAME = "throttle_lab_burn_cpu_seconds"
    HELP = "CPU time used by the burn loops (thread CPU time)"

    def __init__(self) -> None:
        self._totals: dict[int, list[int]] = {}   # thread ident -> [ns]; one writer each
        self._created = time.time()

    def add(self, cpu_ns: int) -> None:
        total = self._totals.get(threading.get_ident())
        if total is None:
            total = self._totals.setdefault(threading.get_ident(), [0])
        total[0] += max(0, cpu_ns)

    @property
    def total_ns(self) -> int:
        return sum(total[0] for total in list(self._totals.values()))

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.NAME, self.HELP, value=self.total_ns / 1e9,
                                  created=self._created)

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily(self.NAME, "")]


class ProcessCpuCollector(Collector):
    """``throttle_lab_process_cpu_seconds_total``: the process's CPU time, all threads."""

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("throttle_lab_process_cpu_seconds",
                                  "CPU time of the whole process, all threads (ns resolution)",
                                  value=time.process_time_ns() / 1e9)

    def describe(self) -> Iterable[Metric]:
        return [CounterMetricFamily("throttle_lab_process_cpu_seconds", "")]


class CalibrationCollector(Collector):
    """What one burn iteration is on this machine (``service.burn.Calibration``)."""

    def __init__(self, calibration: Calibration) -> None:
        self._calibration = calibration

    def collect(self) -> Iterator[Metric]:
        cal = self._calibration
        yield GaugeMetricFamily("throttle_lab_burn_iteration_cpu_seconds", "CPU time one "
                                "/cpuBurnFlow iteration costs (calibrated at start: "
                                "--iteration-us; the raw loop's with --no-calibrate)",
                                value=cal.iteration_ns / 1e9)
        yield GaugeMetricFamily("throttle_lab_burn_loops_per_iteration", "Passes of the burn "
                                "loop per iteration (measured at start; 1 uncalibrated)",
                                value=cal.loops_per_iteration)

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily("throttle_lab_burn_iteration_cpu_seconds", ""),
                GaugeMetricFamily("throttle_lab_burn_loops_per_iteration", "")]


class InProcessThrottleCollector(Collector):
    """The in-process throttle's counters, named like the kernel's ``cpu.stat``; in ``boundary``
    mode summed over the worker threads, each of which has the quota to itself."""

    PREFIX = "throttle_lab_inprocess_"

    def __init__(self, throttle: Throttle) -> None:
        self._throttle = throttle

    def collect(self) -> Iterator[Metric]:
        throttle = self._throttle
        if not throttle.enabled:  # off: no series, like a container without a CPU limit
            return
        stats = throttle.stats()
        p = self.PREFIX
        yield CounterMetricFamily(p + "nr_periods", "Periods (cycles) of the in-process quota "
                                  "that have elapsed while work was running (cpu.stat nr_periods)",
                                  value=stats.nr_periods)
        yield CounterMetricFamily(p + "nr_throttled", "Periods that ended with work throttled "
                                  "(cpu.stat nr_throttled)", value=stats.nr_throttled)
        yield CounterMetricFamily(p + "throttled_seconds", "Wall time work waited for the next "
                                  "period (cpu.stat throttled_time)",
                                  value=stats.throttled_ns / 1e9)
        yield GaugeMetricFamily(p + "quota_seconds", "CPU time allowed per period (per worker "
                                "thread in boundary mode)",
                                value=throttle.quota_ns / 1e9)
        yield GaugeMetricFamily(p + "period_seconds", "Length of a period (the throttle cycle)",
                                value=throttle.period_ns / 1e9)

    def describe(self) -> Iterable[Metric]:
        if not self._throttle.enabled:
            return []
        p = self.PREFIX
        counters = [CounterMetricFamily(p + name, "")
                    for name in ("nr_periods", "nr_throttled", "throttled_seconds")]
        gauges = [GaugeMetricFamily(p + name, "") for name in ("quota_seconds", "period_seconds")]
        return [*counters, *gauges]


class KernelCpuStatCollector(Collector):
    """The kernel's ``cpu.stat`` (read at each scrape: one small file), as cAdvisor names it."""

    def __init__(self, probe: CpuStatReader | None) -> None:
        self._probe = probe

    def collect(self) -> Iterator[Metric]:
        stat = self._probe.sample() if self._probe is not None else None
        if self._probe is None or stat is None:
            return
        yield CounterMetricFamily("container_cpu_cfs_periods", "Elapsed enforcement period "
                                  "intervals (cpu.stat nr_periods)", value=stat.nr_periods)
        yield CounterMetricFamily("container_cpu_cfs_throttled_periods", "Throttled period "
                                  "intervals (cpu.stat nr_throttled)", value=stat.nr_throttled)
        yield CounterMetricFamily("container_cpu_cfs_throttled_seconds", "Total time the "
                                  "cgroup was throttled (cpu.stat throttled_time / "
                                  "throttled_usec)", value=stat.throttled_ns / 1e9)
        try:
            limit = read_cpu_limit(self._probe.path.parent, self._probe.version)
        except (OSError, ValueError):
            return
        if limit.quota_us is not None and limit.period_us:
            yield GaugeMetricFamily("container_spec_cpu_quota", "CPU quota of the cgroup, "
                                    "microseconds per period", value=limit.quota_us)
            yield GaugeMetricFamily("container_spec_cpu_period", "CPU period of the cgroup, "
                                    "microseconds", value=limit.period_us)

    def describe(self) -> Iterable[Metric]:
        if self._probe is None:
            return []
        return [CounterMetricFamily("container_cpu_cfs_periods", ""),
                CounterMetricFamily("container_cpu_cfs_throttled_periods", ""),
                CounterMetricFamily("container_cpu_cfs_throttled_seconds", "")]


class MetricsMiddleware:
    """Pure ASGI middleware: counts each HTTP request and its latency under its route template
    (``/cpuBurnFlow``, never the raw URL, so labels stay few); unmatched paths are ``other``."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "other"
            self.metrics.observe_request(name, scope.get("method", ""), status,
                                         time.perf_counter() - start)


def install_metrics(app: FastAPI, throttle: Throttle | None = None,
                    probe: CpuStatReader | None = None) -> ServiceMetrics:
    """Give ``app`` its metrics (``app.state.metrics``), the middleware and ``GET /metrics``;
    ``probe`` reads the ``cpu.stat`` of the cgroup whose quota is in force (the app's
    ``CpuStatReader.locate()``; None: no kernel series)."""
    metrics = ServiceMetrics()
    if throttle is not None:
        metrics.register(InProcessThrottleCollector(throttle))
    metrics.register(KernelCpuStatCollector(probe))
    app.state.metrics = metrics
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.get("/metrics", summary="Prometheus metrics", include_in_schema=True)
    def prometheus_metrics() -> Response:
        # sync: rendering reads clocks and takes the throttle's lock; keep it off the loop
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return metrics
