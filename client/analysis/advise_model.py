"""What ``http-timing advise`` knows before any limited run: the profile of a run without a
limit, the quota model's guess, and what a usage-percentile recommender would set.

Pure (no I/O):

- :class:`Profile`: the load's shape (mode, concurrency, rate), the quota charged per request
  (the process's CPU from ``/metrics`` over the run / requests; else the burn's CPU from
  ``Server-Timing``; else the unthrottled latency), the time outside the quota (the network,
  the client), the service's worker processes and the per-second CPU usage.
- :func:`model_guess`: the smallest limit (in millicores) that the quota model
  (``client.analysis.model.predict`` for closed loops, every request the same CPU;
  ``client.analysis.openloop.predict_open`` for ``--rate``, each request replaying the CPU of
  one of the profile's) says meets the target, by bisection (assumes a higher limit never
  predicts worse, which holds except for small ripples where requests and quota resonate).
- :func:`usage_limits`: the rules of usage-based recommenders, applied to per-second usage:
  p90 + 15 % (the Kubernetes VPA recommender's target and margin) and p95 (robusta-dev/krr's
  simple strategy). Both set *requests* in their tools; here each is measured as a *limit*,
  which is what a team that copies the number into ``limits.cpu`` gets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from client.analysis.goal import LatencyGoal, Measured
from client.analysis.model import MAX_REQUESTS, Prediction, Scenario, predict
from client.analysis.openloop import predict_open
from client.analysis.report import Report
from client.data.files import Run
from client.data.metadata import LoadMode
from client.data.summary import summarize
from client.run.plan import LoadPlan
from client.run.usage import UsageSample
from cpuquota.limit import Limit

__all__ = ["USAGE_RULES", "ModelPoint", "Profile", "Shape", "UsageRule", "build_profile",
           "cpu_each", "cpu_per_request", "model_curve", "model_guess", "model_point",
           "peak_to_mean", "per_second_usage", "profile_plan", "usage_limits"]

Shape = Callable[[int], Limit]   # millicores -> the limit of that size (period, burst)


def per_second_usage(samples: Sequence[UsageSample], interval_s: float = 1.0) -> list[float]:
    """CPUs used over each interval between two samples (the counter's increase / seconds);
    a last interval shorter than 90 % of ``interval_s`` is left out (too short to be one)."""
    out = []
    for before, after in zip(samples, samples[1:]):
        seconds = after.t_s - before.t_s
        if seconds >= 0.9 * interval_s:
            out.append(max(0.0, after.cpu_s - before.cpu_s) / seconds)
    return out


def cpu_per_request(samples: Sequence[UsageSample], requests: int) -> float | None:
    """ms of process CPU per request over the whole sampled span (None without two samples)."""
    if len(samples) < 2 or requests < 1:
        return None
    return max(0.0, samples[-1].cpu_s - samples[0].cpu_s) * 1000 / requests


def peak_to_mean(origins_ns: Sequence[int], period_ms: float) -> float | None:
    """How bursty the arrivals are at the period's scale: the most requests sent in one period
    over the mean per period (whole periods of the run only). 1 = perfectly even."""
    if len(origins_ns) < 2:
        return None
    period_ns = period_ms * 1e6
    start = min(origins_ns)
    windows = int((max(origins_ns) - start) // period_ns)
    if windows < 2:
        return None
    counts = np.bincount([int((o - start) // period_ns) for o in origins_ns
                          if (o - start) // period_ns < windows], minlength=windows)
    return float(counts.max() / counts.mean()) if counts.mean() > 0 else None


def cpu_each(burn_ns: Sequence[int | None], cpu_ms: float, most: int = 1000
             ) -> tuple[float, ...]:
    """Each request's CPU for the open-loop model: its own burn CPU (``Server-Timing``) plus
    the rest of the CPU per request (``cpu_ms`` - the mean burn: HTTP, the framework), which
    is taken as the same for every request; at most ``most`` requests. Empty without every
    request's burn CPU."""
    burns = [b / 1e6 for b in burn_ns[:most] if b is not None and b > 0]
    if not burns or len(burns) < min(len(burn_ns), most):
        return ()
    rest = cpu_ms - sum(burns) / len(burns)
    return tuple(max(0.01, b + rest) for b in burns)


@dataclass(frozen=True)
class Profile:
    """The run without a limit, as the model and the usage rules need it."""

    run: Measured
    mode: LoadMode
    concurrency: int
    rate_rps: float | None
    requests: int
    cpu_ms: float                 # quota charged per request: the model's service time
    cpu_source: str
    burn_cpu_ms: float | None     # the handler's burn CPU (Server-Timing), for comparison
    baseline_ms: float            # an unthrottled request's typical latency
    cores: int                    # the service's worker processes (each: one at a time)
    usage: tuple[float, ...] = () # CPUs used, per second of the run
    usage_counter: str | None = None
    peak_to_mean: float | None = None
    cpu_each: tuple[float, ...] = ()  # per request: its burn CPU + the rest (open-loop model)

    @property
    def open_loop(self) -> bool:
        return self.mode is LoadMode.OPEN_LOOP

    @property
    def overhead_ms(self) -> float:
        """Wall time of a request outside the quota (the network, the client)."""
        clients = 1 if self.open_loop else self.concurrency
        return max(0.0, self.baseline_ms - self.cpu_ms * clients / min(clients, self.cores))

    def predict(self, limit: Limit) -> Prediction:
        workload = Scenario.under(limit, self.cpu_ms, concurrency=min(self.concurrency, 1000),
                                  requests=min(self.requests, MAX_REQUESTS),
                                  overhead_ms=self.overhead_ms, cores=min(self.cores, 1024))
        if self.open_loop and self.rate_rps:
            return predict_open(workload, self.rate_rps, self.cpu_each)
        return predict(workload)

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run.to_dict(), "mode": self.mode.value,
                "concurrency": self.concurrency, "rate_rps": self.rate_rps,
                "requests": self.requests, "cpu_ms_per_request": self.cpu_ms,
                "cpu_source": self.cpu_source, "burn_cpu_ms": self.burn_cpu_ms,
                "baseline_ms": self.baseline_ms, "overhead_ms": self.overhead_ms,
                "cores": self.cores, "usage_cpus_per_second": list(self.usage),
                "usage_counter": self.usage_counter, "peak_to_mean": self.peak_to_mean,
                "cpu_ms_spread": float(np.std(self.cpu_each)) if self.cpu_each else None}


def profile_plan(plan: LoadPlan, seconds: float) -> LoadPlan:
    """The plan of the profile run: the same load for at least ``seconds`` (so the usage has
    that many per-second samples); one request at a time is a closed loop of 1 for a while."""
    if plan.requests is None and (plan.duration_s or 0) >= seconds:
        return plan
    if plan.mode is LoadMode.OPEN_LOOP and plan.rate_rps is not None:
        if (plan.duration_s or 0) >= seconds:
            return plan
        return LoadPlan.from_options(rate=plan.rate_rps, duration=seconds)
    return LoadPlan.from_options(concurrency=plan.concurrency, duration=seconds)


def build_profile(run: Run, report: Report, row: Measured, samples: Sequence[UsageSample],
                  *, plan: LoadPlan, counter: str | None, warmup: int = 0) -> Profile:
    """The profile of an unlimited ``run`` (its report, row and usage samples) for runs of
    ``plan`` (the model simulates as many requests as each of them sends)."""
    detection = report.detection
    ok = [r for r in run.records if r.ok]
    cpu = cpu_per_request(samples, len(run.records) + warmup)
    source = f"the process's CPU ({counter}) / requests"
    if not cpu:
        cpu, source = detection.server_cpu_ms, "the burn's CPU (Server-Timing cpu)"
    if not cpu:
        cpu, source = detection.baseline_ms or report.summary.p50_ms, "unthrottled latency"
    baseline = detection.baseline_ms or report.summary.p50_ms
    requests = plan.requests
    if requests is None:  # a closed loop for a while: as many as the profile sent per second
        span_s = report.summary.total_ms / 1000
        requests = round(len(run.records) * (plan.duration_s or span_s) / span_s) if span_s \
            else len(run.records)
    return Profile(
        run=row, mode=plan.mode, concurrency=plan.concurrency, rate_rps=plan.rate_rps,
        requests=max(1, requests), cpu_ms=float(cpu), cpu_source=source,
        burn_cpu_ms=detection.server_cpu_ms, baseline_ms=float(baseline),
        cores=run.metadata.workers, usage=tuple(per_second_usage(samples)),
        usage_counter=counter, peak_to_mean=peak_to_mean([r.origin_ns for r in ok], 100.0),
        cpu_each=cpu_each([r.server_cpu_ns for r in ok], float(cpu)))


@dataclass(frozen=True)
class ModelPoint:
    """The model's run at one limit, judged against the target."""

    limit: Limit
    p50_ms: float
    p90_ms: float
    p99_ms: float
    throttled_fraction: float
    missed: tuple[str, ...]

    @property
    def met(self) -> bool:
        return not self.missed

    def to_dict(self) -> dict[str, Any]:
        return {"cpus": self.limit.cpus, "period_ms": self.limit.period_ms,
                "burst_ms": self.limit.burst_ms, "p50_ms": self.p50_ms, "p90_ms": self.p90_ms,
                "p99_ms": self.p99_ms, "throttled_fraction": self.throttled_fraction,
                "met": self.met}


def model_point(profile: Profile, limit: Limit, target: LatencyGoal) -> ModelPoint:
    prediction = profile.predict(limit)
    s = summarize(prediction.records)
    throttled = prediction.throttled_fraction
    return ModelPoint(limit, s.p50_ms, s.p90_ms, s.p99_ms, throttled,
                      target.misses(s.p90_ms, s.p99_ms, throttled))


def model_guess(profile: Profile, target: LatencyGoal, shape: Shape, floor: int,
                ceiling: int) -> ModelPoint | None:
    """The model's smallest limit in ``[floor, ceiling]`` millicores that meets ``target``;
    None when even ``ceiling`` does not (by the model)."""
    top = model_point(profile, shape(ceiling), target)
    if not top.met:
        return None
    bottom = model_point(profile, shape(floor), target)
    if bottom.met:
        return bottom
    low, high, best = floor, ceiling, top
    while high - low > 1:
        middle = (low + high) // 2
        point = model_point(profile, shape(middle), target)
        if point.met:
            high, best = middle, point
        else:
            low = middle
    return best


def model_curve(profile: Profile, target: LatencyGoal, shape: Shape, floor: int,
                ceiling: int, points: int = 40) -> list[ModelPoint]:
    """The model across ``[floor, ceiling]`` millicores, spaced evenly on a log scale."""
    grid = np.unique(np.round(np.geomspace(floor, ceiling, points)).astype(int))
    return [model_point(profile, shape(int(m)), target) for m in grid]


@dataclass(frozen=True)
class UsageRule:
    key: str              # "p90+15%", "p95"
    percentile: float
    margin: float         # factor on the percentile
    words: str

    def cpus(self, usage: Sequence[float]) -> float | None:
        """The rule's CPUs for per-second usage samples; None without any."""
        if not usage:
            return None
        return float(np.percentile(np.asarray(usage, dtype=float), self.percentile)) * self.margin


USAGE_RULES = (
    UsageRule("p90+15%", 90, 1.15, "p90 of usage + 15 % (Kubernetes VPA recommender)"),
    UsageRule("p95", 95, 1.0, "p95 of usage (krr, simple strategy)"),
)


def usage_limits(usage: Sequence[float], floor: int, ceiling: int
                 ) -> list[tuple[UsageRule, float, int]]:
    """``(rule, CPUs it computes, millicores to run)`` per rule, rounded up to a millicore
    and kept within ``[floor, ceiling]`` (what the backend can set)."""
    out = []
    for rule in USAGE_RULES:
        cpus = rule.cpus(usage)
        if cpus is not None and math.isfinite(cpus):
            out.append((rule, cpus, min(ceiling, max(floor, math.ceil(cpus * 1000 - 1e-9)))))
    return out
