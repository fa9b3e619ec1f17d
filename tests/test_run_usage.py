"""The usage sampler: the service's /metrics CPU counter, scraped by a thread until stopped."""

from __future__ import annotations

import threading

import httpx

from client.run.targets.service import free_port
from client.run.usage import UsageSampler, read_cpu_seconds
from tests.support import running_service

EXPOSITION = """# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
throttle_lab_http_requests_total{route="/",method="GET",status="200"} 3.0
throttle_lab_process_cpu_seconds_total 12.345678
"""


def test_the_ns_counter_is_preferred_to_the_standard_one() -> None:
    assert read_cpu_seconds(EXPOSITION) == (12.345678, "throttle_lab_process_cpu_seconds_total")
    standard = "\n".join(line for line in EXPOSITION.splitlines() if "throttle_lab" not in line)
    assert read_cpu_seconds(standard) == (12.5, "process_cpu_seconds_total")
    assert read_cpu_seconds("process_cpu_seconds_total fast\n") is None
    assert read_cpu_seconds("") is None


def test_the_sampler_reads_a_real_service_until_stopped() -> None:
    with running_service() as base:
        sampler = UsageSampler(base, interval_s=0.1).start()
        for _ in range(20):   # some CPU for the counter to count
            httpx.get(base + "/cpuBurnFlow?iterations=2000", timeout=10)
        samples = sampler.stop()
    assert sampler.counter == "throttle_lab_process_cpu_seconds_total"
    assert len(samples) >= 2 and sampler.problem is None
    assert all(b.t_s > a.t_s and b.cpu_s >= a.cpu_s for a, b in zip(samples, samples[1:]))
    assert samples[-1].cpu_s > samples[0].cpu_s
    assert not any(t.name == "usage-sampler" for t in threading.enumerate())
    assert sampler.stop() == samples                # stopping twice is harmless


def test_nothing_to_scrape_leaves_no_samples_and_says_why() -> None:
    with UsageSampler(f"http://127.0.0.1:{free_port()}", interval_s=0.1,
                      timeout_s=0.5) as sampler:
        pass
    assert sampler.samples == [] and sampler.counter is None
    assert sampler.problem is not None and "/metrics" in sampler.problem
