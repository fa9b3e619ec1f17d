"""The service's CPU usage while a run is timed: its Prometheus ``/metrics``, scraped every second.

What a usage-based recommender sees (krr, the Kubernetes VPA recommender: a CPU-seconds counter
scraped at an interval, turned into a rate): :class:`UsageSampler` reads the burn-service's
``throttle_lab_process_cpu_seconds_total`` (the whole process's CPU time, all threads, ns
resolution) or, from another server, the standard ``process_cpu_seconds_total`` (10 ms ticks),
once right away, then every ``interval_s`` seconds, and once more when stopped. Each sample
is ``(seconds on the monotonic clock, CPU seconds of the counter)``; the per-second usage is
the counter's increase over each interval (``client.analysis.advise_model.per_second_usage``).

What it measures: the CPU of the one process that answers ``/metrics`` (with ``--workers N``,
one worker), including the scrapes themselves (well under 1 ms each); not the CPU of other
processes in the same cgroup. It runs in a daemon thread of its own and is stopped by
``stop()`` (or leaving the ``with`` block), also when the run is interrupted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import httpx

__all__ = ["CPU_COUNTERS", "UsageSample", "UsageSampler", "read_cpu_seconds"]

# the counters tried, best first (seconds of CPU since the process started)
CPU_COUNTERS = ("throttle_lab_process_cpu_seconds_total", "process_cpu_seconds_total")


@dataclass(frozen=True)
class UsageSample:
    """One scrape: when (monotonic seconds) and the process's CPU seconds so far."""

    t_s: float
    cpu_s: float


def read_cpu_seconds(text: str, names: Sequence[str] = CPU_COUNTERS) -> tuple[float, str] | None:
    """The first of ``names`` found in a Prometheus text exposition, with its name; None when
    none is there (unlabelled series only: ``name value [timestamp]``)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) in (2, 3) and parts[0] in names:
            try:
                values[parts[0]] = float(parts[1])
            except ValueError:
                continue
    for name in names:
        if name in values:
            return values[name], name
    return None


class UsageSampler:
    """Scrape ``<base_url>/metrics`` every ``interval_s`` seconds in a thread, until stopped."""

    def __init__(self, base_url: str, interval_s: float = 1.0, timeout_s: float = 2.0) -> None:
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples: list[UsageSample] = []
        self.counter: str | None = None      # which counter was read
        self.problem: str | None = None      # why no sample could be taken (the last reason)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def sample(self, client: httpx.Client) -> None:
        """Take one sample now (kept only when the counter was read)."""
        try:
            response = client.get(self.url, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            self.problem = f"{self.url}: {type(exc).__name__}"
            return
        now = time.monotonic()
        found = read_cpu_seconds(response.text) if response.status_code == 200 else None
        if found is None:
            self.problem = (f"{self.url} answered {response.status_code} without "
                            f"{' or '.join(CPU_COUNTERS)}")
            return
        with self._lock:
            self.samples.append(UsageSample(now, found[0]))
            self.counter = found[1]

    def start(self) -> UsageSampler:
        self._thread = threading.Thread(target=self._loop, name="usage-sampler", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        with httpx.Client() as client:
            next_at = time.monotonic()
            while True:
                self.sample(client)
                next_at += self.interval_s
                if self._stop.wait(max(0.0, next_at - time.monotonic())):
                    self.sample(client)  # the end of the last (partial) interval
                    return

    def stop(self) -> list[UsageSample]:
        """Stop the thread (after its last sample) and return the samples, oldest first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 5)
            self._thread = None
        with self._lock:
            return list(self.samples)

    def __enter__(self) -> UsageSampler:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
