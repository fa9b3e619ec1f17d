"""What a CPU quota does to requests: a deterministic simulation on the kernel's accounting.

``predict(Workload(service_ms=5, cpus=0.3))`` sends requests of 5 ms of CPU back to back
(a closed loop: ``concurrency`` clients, each sending its next request as soon as the last
answer arrives) to a service whose CPU is limited to ``cpus × period`` per period, and
returns every request's latency plus the statistics ``http-timing report`` gives for a real
run (p50, p90, p99, mean, throttled fraction, stall, throughput).

The quota accounting is not done here: the simulation drives :class:`service.quota.QuotaAccount`
(the same core as the in-process throttle) on a simulated nanosecond clock. This module only
decides who runs when:

- A request spends ``overhead_ms`` of wall time that uses no quota (client, network, the
  kernel's TCP work outside the group), half before its work and half after it.
- The requests at the server share ``cores`` CPUs (processor sharing: ``n`` requests on
  ``k = min(n, cores)`` CPUs each run at ``k / n`` CPU); the group spends ``k`` CPU per ns.
  The default, 1, is one Python process (the GIL runs one request's work at a time).
- While the account says the group is throttled nothing at the server runs; the time counts
  as that request's pause. A request with a pause is *throttled*; its pause is its *stall*.
- The service has been idle before the run (so a burst allowance is full), and the first
  request is sent at the start of a period. No randomness: the same workload, the same answer.

Simplification: the kernel notices a spent quota at the next scheduler tick (up to a few ms
later) and the overshoot is paid from the next period; here it notices at once (no overshoot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from client.analysis.throughput import throughput_rps
from client.data.record import RequestRecord
from client.data.summary import summarize
from service.limit import Limit
from service.quota import CpuStat, QuotaAccount

__all__ = ["MAX_CONCURRENCY", "MAX_REQUESTS", "Prediction", "Workload", "predict"]

MS = 1_000_000
MAX_REQUESTS = 100_000
MAX_CONCURRENCY = 1_000
# Refuse workloads whose simulation would take more than a few seconds.
MAX_SIMULATED_PERIODS = 2_000_000


@dataclass(frozen=True)
class Workload:
    """What to simulate. Times in ms; ``cpus`` as for ``docker run --cpus``."""

    service_ms: float
    cpus: float
    period_ms: float = 100.0
    burst_ms: float = 0.0
    concurrency: int = 1
    requests: int = 100
    overhead_ms: float = 0.0
    cores: int = 1

    def __post_init__(self) -> None:
        def bad(name: str, rule: str, value: object) -> ValueError:
            return ValueError(f"{name} must be {rule} (got {value})")

        value = self.service_ms
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise bad("service_ms", "a number > 0", value)
        value = self.overhead_ms
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise bad("overhead_ms", "a number >= 0", value)
        _ = self.limit  # cpus, period_ms and burst_ms: a Limit's rules (LimitError names them)
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise bad("concurrency", f"in [1, {MAX_CONCURRENCY}]", self.concurrency)
        if not 1 <= self.requests <= MAX_REQUESTS:
            raise bad("requests", f"in [1, {MAX_REQUESTS}]", self.requests)
        if not 1 <= self.cores <= 1024:
            raise bad("cores", "in [1, 1024]", self.cores)
        periods = self.requests * self.service_ms / (min(self.cpus, self.cores) * self.period_ms)
        if periods > MAX_SIMULATED_PERIODS:
            raise ValueError(f"{self.requests} requests of {self.service_ms:g} ms at "
                             f"{self.cpus:g} CPU span about {periods:,.0f} periods; at most "
                             f"{MAX_SIMULATED_PERIODS:,} are simulated (use fewer requests)")

    @property
    def limit(self) -> Limit:
        return Limit(self.cpus, self.period_ms, self.burst_ms, "model")

    @classmethod
    def under(cls, limit: Limit, service_ms: float, **rest: Any) -> Workload:
        """The workload of ``service_ms`` requests under ``limit``."""
        return cls(service_ms=service_ms, cpus=limit.cpus, period_ms=limit.period_ms,
                   burst_ms=limit.burst_ms, **rest)


@dataclass(frozen=True)
class Prediction:
    """The simulated run: one record per request (``server_throttle_ns`` = its pause, like the
    in-process throttle reports it), and the account's ``cpu.stat`` counters for the run."""

    workload: Workload
    records: tuple[RequestRecord, ...]
    stats: CpuStat = field(default_factory=CpuStat)

    @property
    def paused_ms(self) -> np.ndarray:
        return np.asarray([r.server_throttle_ns or 0 for r in self.records], dtype=float) / MS

    @property
    def total_ms(self) -> float:
        return summarize(self.records).total_ms

    @property
    def throttled_fraction(self) -> float:
        return float(np.mean(self.paused_ms > 0)) if self.records else 0.0

    @property
    def stall_ms(self) -> float | None:
        """The typical pause of a throttled request (median); None when none was throttled."""
        paused = self.paused_ms
        paused = paused[paused > 0]
        return float(np.median(paused)) if paused.size else None

    @property
    def throughput_rps(self) -> float:
        return throughput_rps(self.records) or 0.0

    def to_dict(self) -> dict[str, Any]:
        """The keys of ``http-timing report --json``, plus the model's inputs."""
        s = summarize(self.records)  # the same statistics as a measured run's
        w = self.workload
        return {
            "count": s.count, "errors": s.errors, "mean_ms": s.mean_ms, "p50_ms": s.p50_ms,
            "p90_ms": s.p90_ms, "p99_ms": s.p99_ms, "max_ms": s.max_ms,
            "total_ms": s.total_ms, "throttled_fraction": self.throttled_fraction,
            "stall_ms": self.stall_ms, "period_ms": w.period_ms,
            "throughput_rps": self.throughput_rps, "limit": w.limit.describe(),
            "model": {"service_ms": w.service_ms, "cpus": w.cpus, "period_ms": w.period_ms,
                      "burst_ms": w.burst_ms, "concurrency": w.concurrency,
                      "requests": w.requests, "overhead_ms": w.overhead_ms, "cores": w.cores},
            "nr_periods": self.stats.nr_periods, "nr_throttled": self.stats.nr_throttled,
            "throttled_ms": self.stats.throttled_ns / MS,
        }


@dataclass
class _Request:
    seq: int
    sent_ns: int
    phase: str        # "out" (travelling to the server), "cpu" (at the server), "back"
    until_ns: int     # end of the "out"/"back" phase
    cpu_left: float   # ns of CPU still to run
    paused_ns: int = 0


def predict(workload: Workload) -> Prediction:
    """Simulate ``workload`` (see the module's docstring); deterministic."""
    w = workload
    limit = w.limit
    period = limit.period_ns
    account = QuotaAccount(limit.quota_ns, period, limit.burst_ns)
    # An idle service before the run: a tiny charge, then the timer stops after two refills
    # (a burst allowance is as full as the kernel would let it be). The run starts at 3 periods.
    account.charge(1, 0)
    t = 3 * period
    before = account.stats(t)
    service = round(w.service_ms * MS)
    out_ns = round(w.overhead_ms * MS) // 2
    back_ns = round(w.overhead_ms * MS) - out_ns
    origin = t
    flights: list[_Request] = []
    done: list[RequestRecord] = []
    issued = 0

    def send(now: int) -> None:
        nonlocal issued
        flights.append(_Request(issued, now, "out", now + out_ns, float(service)))
        issued += 1

    for _ in range(min(w.concurrency, w.requests)):
        send(t)
    while flights:
        # Instant transitions at t, until none is left (a zero overhead chains them).
        changed = True
        while changed:
            changed = False
            for f in list(flights):
                if f.phase == "out" and f.until_ns <= t:
                    f.phase, changed = "cpu", True
                if f.phase == "cpu" and f.cpu_left <= 0:
                    f.phase, f.until_ns, changed = "back", t + back_ns, True
                if f.phase == "back" and f.until_ns <= t:
                    flights.remove(f)
                    done.append(RequestRecord(
                        seq=f.seq, start_ns=f.sent_ns - origin, latency_ns=t - f.sent_ns,
                        status=200, server_cpu_ns=service, server_throttle_ns=f.paused_ns))
                    if issued < w.requests:
                        send(t)
                    changed = True
        if not flights:
            break
        running = [f for f in flights if f.phase == "cpu"]
        next_wall = min((f.until_ns for f in flights if f.phase != "cpu"), default=None)
        if not running:
            assert next_wall is not None
            t = next_wall
            continue
        resume = account.throttled_until(t)
        if resume > t:  # throttled: nothing at the server runs until the refill
            stop = resume if next_wall is None else min(resume, next_wall)
            for f in running:
                f.paused_ns += stop - t
            t = stop
            continue
        k = min(len(running), w.cores)
        # Stop at the next period boundary: its refill changes what is left (CPU charged at
        # the boundary ran before it, see QuotaAccount.charge).
        to_boundary = account.next_boundary(t) - t
        steps = [
            math.ceil(account.remaining(t) / k),                                # quota spent
            math.ceil(min(f.cpu_left for f in running) * len(running) / k),    # a request done
            to_boundary,
        ]
        if next_wall is not None:
            steps.append(next_wall - t)
        dt = max(1, min(steps))
        used = dt * k
        for f in running:
            f.cpu_left -= used / len(running)
        t += dt
        account.charge(used, t)
    stats = account.stats(t)
    run_stats = stats - before
    done.sort(key=lambda r: r.seq)
    return Prediction(w, tuple(done), run_stats)

