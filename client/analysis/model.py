"""What a CPU quota does to requests: a deterministic simulation on the kernel's accounting.

``predict(Scenario(service_ms=5, cpus=0.3))`` sends requests of 5 ms of CPU back to back
(a closed loop: ``concurrency`` clients, each sending its next request as soon as the last
answer arrives) to a service whose CPU is limited to ``cpus × period`` per period, and
returns every request's latency plus the statistics ``http-timing report`` gives for a real
run (p50, p90, p99, mean, throttled fraction, stall, throughput).

The quota accounting is not done here: the simulation drives :class:`cpuquota.account.QuotaAccount`
(the same core as the in-process throttle) on a simulated nanosecond clock. This module only
decides who runs when:

- A request spends ``overhead_ms`` of wall time that uses no quota (client, network, the
  kernel's TCP work outside the group), half before its work and half after it.
- The requests at the server share ``cores`` CPUs (processor sharing: ``n`` requests on
  ``k = min(n, cores)`` CPUs each run at ``k / n`` CPU); the group spends ``k`` CPU per ns.
  The default, 1, is one Python process (the GIL runs one request's work at a time). A
  request whose work runs on ``threads`` threads in parallel uses up to that many CPUs
  (``k = min(n x threads, cores)``): its work of S ms of CPU needs S ms of quota in S / threads
  of wall time, so T threads spend a period's quota T times faster.
- ``replicas`` > 1: request ``seq`` goes to replica ``seq % replicas`` (as ``http-timing``
  spreads them), each replica with its own quota (the limit) and its own ``cores``.
- While the account says the group is throttled nothing at the server runs; the time counts
  as that request's pause. A request with a pause is *throttled*; its pause is its *stall*.
- The service has been idle before the run (so a burst allowance is full), and the first
  request is sent at the start of a period. No randomness: the same workload, the same answer.

Simplification: the kernel notices a spent quota at the next scheduler tick (up to a few ms
later) and the overshoot is paid from the next period; here it notices at once (no overshoot).
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field
from typing import Any

import numpy as np

from client.analysis.throughput import throughput_rps
from client.data.record import RequestRecord
from client.data.summary import percentile, summarize
from cpuquota.limit import Limit
from cpuquota.account import CpuStat, QuotaAccount

__all__ = ["MAX_CONCURRENCY", "MAX_REQUESTS", "Prediction", "Scenario", "predict"]

MS = 1_000_000
MAX_REQUESTS = 100_000
MAX_CONCURRENCY = 1_000
# Refuse workloads whose simulation would take more than a few seconds.
MAX_SIMULATED_PERIODS = 2_000_000


@dataclass(frozen=True)
class Scenario:
    """What to simulate. Times in ms; ``cpus`` as for ``docker run --cpus``."""

    service_ms: float
    cpus: float
    period_ms: float = 100.0
    burst_ms: float = 0.0
    concurrency: int = 1
    requests: int = 100
    overhead_ms: float = 0.0
    cores: int = 1
    threads: int = 1         # each request's work runs on this many threads in parallel
    stagger_ms: float = 0.0  # client j sends its first request j x this after the first
    replicas: int = 1        # requests spread round-robin over this many, each under the limit

    def __post_init__(self) -> None:
        def bad(name: str, rule: str, value: object) -> ValueError:
            return ValueError(f"{name} must be {rule} (got {value})")

        value = self.service_ms
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise bad("service_ms", "a number > 0", value)
        for name in ("overhead_ms", "stagger_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise bad(name, "a number >= 0", value)
        if not 1 <= self.threads <= 1024:
            raise bad("threads", "in [1, 1024]", self.threads)
        if not 1 <= self.replicas <= 10_000:
            raise bad("replicas", "in [1, 10000]", self.replicas)
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
    def under(cls, limit: Limit, service_ms: float, **rest: Any) -> Scenario:
        """The workload of ``service_ms`` requests under ``limit``."""
        return cls(service_ms=service_ms, cpus=limit.cpus, period_ms=limit.period_ms,
                   burst_ms=limit.burst_ms, **rest)


@dataclass(frozen=True)
class Prediction:
    """The simulated run: one record per request (``server_throttle_ns`` = its pause, like the
    in-process throttle reports it), and the account's ``cpu.stat`` counters for the run."""

    workload: Scenario
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

    def percentile(self, q: float) -> float:
        """The q-th percentile of the simulated latencies, ms."""
        return percentile([r.latency_ms for r in self.records], q)

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
                      "requests": w.requests, "overhead_ms": w.overhead_ms, "cores": w.cores,
                      "threads": w.threads, "replicas": w.replicas},
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
    replica: int = 0


def predict(workload: Scenario) -> Prediction:
    """Simulate ``workload`` (see the module's docstring); deterministic."""
    return _Simulation(workload).run()


class _Simulation:
    """The state of one simulated run: the quota accounts (one per replica), the requests in
    flight, the clock."""

    def __init__(self, workload: Scenario) -> None:
        w = self.w = workload
        limit = w.limit
        self.accounts = [QuotaAccount(limit.quota_ns, limit.period_ns, limit.burst_ns)
                         for _ in range(w.replicas)]
        # An idle service before the run: a tiny charge, then the timer stops after two
        # refills (a burst allowance is as full as the kernel would let it be). The run starts
        # at 3 periods.
        for account in self.accounts:
            account.charge(1, 0)
        self.t = self.origin = 3 * limit.period_ns
        self.before = [account.stats(self.t) for account in self.accounts]
        self.service = round(w.service_ms * MS)
        self.out_ns = round(w.overhead_ms * MS) // 2
        self.back_ns = round(w.overhead_ms * MS) - self.out_ns
        self.flights: list[_Request] = []
        self.done: list[RequestRecord] = []
        self.issued = 0

    def send(self, now: int) -> None:
        self.flights.append(_Request(self.issued, now, "out", now + self.out_ns,
                                     float(self.service), replica=self.issued % self.w.replicas))
        self.issued += 1

    def settle(self) -> None:
        """Instant transitions at ``t``, until none is left (a zero overhead chains them)."""
        t, changed = self.t, True
        while changed:
            changed = False
            for f in list(self.flights):
                if f.phase == "out" and f.until_ns <= t:
                    f.phase, changed = "cpu", True
                if f.phase == "cpu" and f.cpu_left <= 0:
                    f.phase, f.until_ns, changed = "back", t + self.back_ns, True
                if f.phase == "back" and f.until_ns <= t:
                    self.flights.remove(f)
                    self.done.append(RequestRecord(
                        seq=f.seq, start_ns=f.sent_ns - self.origin, latency_ns=t - f.sent_ns,
                        status=200, server_cpu_ns=self.service, server_throttle_ns=f.paused_ns,
                        replica=f.replica if self.w.replicas > 1 else None))
                    if self.issued < self.w.requests:
                        self.send(t)
                    changed = True

    def step(self) -> None:
        """Advance the clock to the next event: a phase ends, a quota runs out or refills, a
        period boundary, a request's work is done."""
        t = self.t
        running: dict[int, list[_Request]] = {}
        for f in self.flights:
            if f.phase == "cpu":
                running.setdefault(f.replica, []).append(f)
        walls = [f.until_ns for f in self.flights if f.phase != "cpu"]
        events = [min(walls)] if walls else []
        rates: dict[int, int] = {}
        for replica, flights in running.items():
            account = self.accounts[replica]
            resume = account.throttled_until(t)
            if resume > t:  # throttled: nothing at this replica runs until the refill
                events.append(resume)
                continue
            # n requests, each using up to ``threads`` CPUs, share ``cores`` CPUs
            k = rates[replica] = min(len(flights) * self.w.threads, self.w.cores)
            # Stop at the next period boundary: its refill changes what is left (CPU charged
            # at the boundary ran before it, see QuotaAccount.charge).
            events += [t + math.ceil(account.remaining(t) / k),                  # quota spent
                       t + math.ceil(min(f.cpu_left for f in flights) * len(flights) / k),
                       account.next_boundary(t)]
        dt = max(1, min(events) - t)
        for replica, flights in running.items():
            if replica not in rates:
                for f in flights:
                    f.paused_ns += dt
                continue
            used = dt * rates[replica]
            for f in flights:
                f.cpu_left -= used / len(flights)
            self.accounts[replica].charge(used, t + dt)
        self.t = t + dt

    def run(self) -> Prediction:
        stagger = round(self.w.stagger_ms * MS)
        for j in range(min(self.w.concurrency, self.w.requests)):
            self.send(self.t + j * stagger)
        while True:
            self.settle()
            if not self.flights:
                break
            self.step()
        run_stats = CpuStat()
        for account, before in zip(self.accounts, self.before):
            after = account.stats(self.t) - before
            run_stats = CpuStat(*(a + b for a, b in zip(astuple(run_stats), astuple(after))))
        self.done.sort(key=lambda r: r.seq)
        return Prediction(self.w, tuple(self.done), run_stats)
