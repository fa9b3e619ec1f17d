"""``/metrics`` (service.metrics): per-app registries, route labels, the throttle's counters."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.config import Settings
from service.metrics import InProcessThrottleCollector, ServiceMetrics
from service.throttle import Throttle
from tests.support import running_service


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus text page, keyed by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_each_app_has_its_own_registry() -> None:
    first, second = create_app(Settings()), create_app(Settings(cpu_limit=20))
    assert first.state.metrics.registry is not second.state.metrics.registry
    first.state.metrics.observe_burn(2_000_000_000)
    assert b"throttle_lab_burn_cpu_seconds_total 2.0" in first.state.metrics.render()
    assert b"throttle_lab_burn_cpu_seconds_total 0.0" in second.state.metrics.render()


def test_burns_on_many_threads_add_up_to_the_last_nanosecond() -> None:
    metrics = ServiceMetrics()
    workers = [threading.Thread(target=lambda: [metrics.observe_burn(1_000_000)
                                                for _ in range(2000)]) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    metrics.observe_burn(-5)  # a clock that went back adds nothing
    assert samples(metrics.render().decode())[("throttle_lab_burn_cpu_seconds_total", ())] == 8.0


def test_requests_latency_and_burn_cpu_per_route() -> None:
    with running_service() as base:
        for _ in range(2):
            assert httpx.get(base + "/cpuBurnFlow", params={"iterations": 3000}).status_code == 200
        assert httpx.get(base + "/cpuBurnFlow", params={"iterations": -5}).status_code == 422
        assert httpx.get(base + "/no/such/page").status_code == 404
        r = httpx.get(base + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    got = samples(r.text)
    burn_ok = (("method", "GET"), ("route", "/cpuBurnFlow"), ("status", "200"))
    assert got[("throttle_lab_http_requests_total", burn_ok)] == 2
    assert got[("throttle_lab_http_requests_total",
                (("method", "GET"), ("route", "/cpuBurnFlow"), ("status", "422")))] == 1
    assert got[("throttle_lab_http_requests_total",
                (("method", "GET"), ("route", "other"), ("status", "404")))] == 1
    assert got[("throttle_lab_http_request_duration_seconds_count",
                (("route", "/cpuBurnFlow"),))] == 3
    assert got[("throttle_lab_http_request_duration_seconds_bucket",
                (("le", "+Inf"), ("route", "/cpuBurnFlow")))] == 3
    burn_cpu = got[("throttle_lab_burn_cpu_seconds_total", ())]
    assert 0.0005 < burn_cpu < got[("throttle_lab_process_cpu_seconds_total", ())]
    # off: no in-process series at all, like a container without a CPU limit
    assert not any(name.startswith("throttle_lab_inprocess_") for name, _ in got)


def test_inprocess_series_are_named_after_the_kernel_counters() -> None:
    with running_service(cpu_limit=50, throttle_cycle=20) as base:
        httpx.get(base + "/cpuBurnFlow", params={"iterations": 2000})
        got = samples(httpx.get(base + "/metrics").text)
    names = {name for name, _ in got}
    assert {"throttle_lab_inprocess_nr_periods_total", "throttle_lab_inprocess_nr_throttled_total",
            "throttle_lab_inprocess_throttled_seconds_total"} <= names
    assert got[("throttle_lab_inprocess_quota_seconds", ())] == 0.01
    assert got[("throttle_lab_inprocess_period_seconds", ())] == 0.02


def test_throttle_collector_reports_the_accounting() -> None:
    clock = {"wall": 0, "cpu": 0}
    throttle = Throttle(30, 100, cpus=1, cpu_clock=lambda: clock["cpu"],
                        wall_clock=lambda: clock["wall"], sleep=lambda s: clock.update(
                            wall=clock["wall"] + round(s * 1e9)))
    throttle.start()
    clock["cpu"] = clock["wall"] = 40_000_000   # 40 ms of work: 10 ms over the quota
    throttle.checkpoint()                       # pauses until 100 ms, the next period
    clock["wall"] += 1_000_000
    metrics = ServiceMetrics()
    metrics.register(InProcessThrottleCollector(throttle))
    got = samples(metrics.render().decode())
    assert got[("throttle_lab_inprocess_nr_throttled_total", ())] == 1
    assert got[("throttle_lab_inprocess_throttled_seconds_total", ())] == 0.06


def test_another_collector_can_be_added() -> None:
    class Kernel:
        def collect(self) -> Iterator[Metric]:
            yield GaugeMetricFamily("throttle_lab_cgroup_quota_seconds", "a test series", value=0.3)

    metrics = ServiceMetrics()
    metrics.register(Kernel())  # type: ignore[arg-type]
    assert b"throttle_lab_cgroup_quota_seconds 0.3" in metrics.render()
