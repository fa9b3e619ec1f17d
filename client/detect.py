"""Which requests of a run were throttled, by how much, and how often the stalls recur.

Pure functions of a run's records (no I/O). Two sources, used together:

- **The server's counters** (``kernel_nr_throttled``: the cgroup's ``nr_throttled`` went up
  during the request; ``server_throttle_ns``: the in-process throttle paused it). Exact for
  what happened inside the handler. The kernel stops the whole process, so a request that
  arrives while the group is throttled waits *before* the handler reads the counters: the
  server cannot see that stall.
- **The latency distribution** of a sequential run. Throttling makes it bimodal: the fast mode
  (the request's own time) and a slow mode one stall later (~70 ms at 0.3 CPU, ~90 or ~190 ms
  at 0.1 CPU). The fast mode is the lower cluster below the widest gap in the sorted
  latencies (measured on a log scale) that is wider than the noise of that cluster; a request
  above the gap is throttled. When almost every request is throttled the lower cluster may be
  missing: the server's CPU per request (``server_cpu_ns``) then says what an unthrottled
  request would take, and without it the baseline is marked uncertain.

A run with counters uses them and adds the slow requests they missed (sequential runs only:
under concurrency, queueing also makes requests slow).

The **period** is inferred from when stalls end: a throttled request resumes at a period
boundary, so the end times of throttled requests line up on a grid whose spacing is the
period. The spacing with the best alignment (a circular mean, largest spacing of those
nearly as good, so that half the period does not win) is the answer; ~100 ms by default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from client.model import Limit, Prediction
from client.rawdata import RequestRecord

__all__ = ["DEFAULT_PERIOD_MS", "Detection", "LatencySplit", "detect", "explain",
           "idle_fraction", "infer_period", "split_latencies"]

DEFAULT_PERIOD_MS = 100.0
MIN_GAP_MS = 2.0          # a gap narrower than this is noise, not a stall
MIN_PERIOD_MS, MAX_PERIOD_MS = 1.0, 1000.0
GAP_RESOLUTION_NS = 1_000_000  # the kernel's range for cfs_period_us


@dataclass(frozen=True)
class LatencySplit:
    """The sorted latencies cut in two at a gap: ``threshold_ms`` (None: no gap, one mode)."""

    baseline_ms: float            # median of the lower cluster (of all, without a gap)
    threshold_ms: float | None    # a latency >= this is above the gap
    fast_count: int               # requests in the lower cluster


def split_latencies(latencies_ms: Sequence[float]) -> LatencySplit | None:
    """Find the fast mode and the gap above it; None for fewer than 2 latencies.

    A candidate gap between sorted neighbours ``a < b`` (lower cluster = everything <= a)
    counts when ``b - a`` is at least ``MIN_GAP_MS``, half the lower cluster's median and four
    times its interquartile range, and ``b`` is at least 1.5 times that median. Of those the
    widest on a log scale wins.
    """
    s = np.sort(np.asarray(latencies_ms, dtype=float))
    s = s[np.isfinite(s)]
    n = s.size
    if n < 2:
        return None
    i = np.arange(1, n)                       # split before s[i]: lower = s[:i]
    lower_median = s[(i - 1) // 2]
    iqr = s[(3 * (i - 1)) // 4] - s[(i - 1) // 4]
    gap = s[1:] - s[:-1]
    ok = ((gap >= np.maximum.reduce([np.full(n - 1, MIN_GAP_MS), 0.5 * lower_median, 4 * iqr]))
          & (s[1:] >= 1.5 * lower_median) & (s[:-1] > 0))
    if not ok.any():
        return LatencySplit(float(np.median(s)), None, n)
    with np.errstate(divide="ignore"):
        score = np.where(ok, np.log(s[1:] / np.where(s[:-1] > 0, s[:-1], 1)), -np.inf)
    best = int(np.argmax(score)) + 1
    return LatencySplit(float(np.median(s[:best])), float(s[best]), best)


def infer_period(resume_ms: Sequence[float], *, min_period_ms: float = MIN_PERIOD_MS,
                 min_events: int = 4) -> float | None:
    """The spacing of the grid that the times ``resume_ms`` (ends of stalls) line up on.

    Spacings from ``min_period_ms`` (a stall is shorter than its period, so the shortest
    stall is a good lower bound) to 1000 ms are tried; the alignment of a spacing is the
    length of the mean of the times as phases on a circle (1: all on the grid). Multiples of
    the period align badly (half the events fall half-way), its fractions as well as the
    period itself: the largest spacing whose alignment is nearly the best wins, refined to
    0.01 ms. None with fewer than ``min_events`` times, or when the best alignment could come
    from chance: random times reach a length ``r`` with probability ``exp(-n r²)`` per
    independent spacing (Rayleigh), so ``r`` must beat that at 5 % over all spacings tried.
    """
    t = np.asarray(resume_ms, dtype=float)
    t = t[np.isfinite(t)]
    if t.size < min_events:
        return None
    if t.size > 500:  # evenly spaced subset: enough to align, bounded cost
        t = np.sort(t)[np.linspace(0, t.size - 1, 500).astype(int)]
    t = t - t.min()
    span = float(np.ptp(t))
    lo = max(MIN_PERIOD_MS, float(min_period_ms))
    hi = min(MAX_PERIOD_MS, span)  # a period longer than the run cannot be seen
    if hi <= lo:
        return None

    def alignment(frequencies: np.ndarray) -> np.ndarray:
        phases = np.exp(2j * np.pi * np.outer(frequencies, t))
        return np.abs(phases.mean(axis=1))

    independent = span * (1 / lo - 1 / hi) + 1
    needed = max(0.6, math.sqrt(math.log(independent / 0.05) / t.size))
    if needed >= 1:
        return None
    # A peak in frequency (1 / period) is about 1 / span wide, whatever the period: scan the
    # frequencies at a quarter of that, from the longest period to the shortest.
    step = 1 / (4 * span)
    grid = np.arange(1 / hi, 1 / lo + step, step)
    r = np.concatenate([alignment(chunk) for chunk in np.array_split(grid, grid.size // 256 + 1)])
    best = float(r.max())
    if best < needed:
        return None
    good = np.flatnonzero(r >= max(needed, 0.9 * best))
    # the first run of consecutive good frequencies: the largest aligning period
    first = last = int(good[0])
    while last + 1 < grid.size and r[last + 1] >= max(needed, 0.9 * best):
        last += 1
    peak = grid[first + int(np.argmax(r[first:last + 1]))]
    fine = np.linspace(max(peak - step, 1 / MAX_PERIOD_MS), peak + step, 101)
    return float(round(1 / fine[int(np.argmax(alignment(fine)))], 2))


@dataclass(frozen=True)
class Detection:
    """What the run's records say about throttling (successful requests only)."""

    count: int                       # successful requests looked at
    throttled: tuple[bool, ...]      # per successful request, in order of sending
    source: str                      # "server counters", "server counters + latency", ...
    baseline_ms: float | None        # typical latency of an unthrottled request
    threshold_ms: float | None       # latencies >= this were counted as throttled
    service_ms: float | None         # CPU per request: the server's, else the baseline latency
    service_source: str              # "server CPU per request" / "unthrottled latency"
    stall_ms: float | None           # typical extra delay of a throttled request
    period_ms: float                 # inferred, else the limit's, else 100
    period_source: str               # "inferred from stalls" / "limit" / "default"
    throughput_rps: float | None     # successful requests per second of the run
    server_cpu_ms: float | None      # median server_cpu_ns
    server_wall_ms: float | None     # median server_wall_ns
    idle_fraction: float | None = None  # share of the run's span with no request in flight
    quota_bound: bool = False        # stalls in (nearly) every period: all the quota was spent
    notes: tuple[str, ...] = ()

    def charged_ms(self, cpus: float) -> float | None:
        """The quota each request was charged, when the run spent all of it (quota-bound and
        back to back): ``cpus × 1000 ms`` per second / requests per second. None otherwise."""
        if not self.quota_bound or not self.throughput_rps:
            return None
        if self.idle_fraction is None or self.idle_fraction > 0.1:
            return None
        return cpus * 1000 / self.throughput_rps

    @property
    def throttled_count(self) -> int:
        return sum(self.throttled)

    @property
    def throttled_fraction(self) -> float | None:
        return self.throttled_count / self.count if self.count else None

    def to_dict(self) -> dict[str, Any]:
        return {"throttled_fraction": self.throttled_fraction,
                "throttled_count": self.throttled_count, "throttled_source": self.source,
                "stall_ms": self.stall_ms, "period_ms": self.period_ms,
                "period_source": self.period_source, "throughput_rps": self.throughput_rps,
                "baseline_ms": self.baseline_ms, "threshold_ms": self.threshold_ms,
                "service_ms": self.service_ms, "service_source": self.service_source,
                "server_cpu_ms": self.server_cpu_ms, "server_wall_ms": self.server_wall_ms,
                "idle_fraction": self.idle_fraction, "quota_bound": self.quota_bound,
                "notes": list(self.notes)}


def idle_fraction(records: Sequence[RequestRecord]) -> float | None:
    """The share of the run's span (first send to last answer) when no request was in flight:
    0 for requests sent back to back; large for a capture with gaps (an excerpt). Gaps up to
    1 ms count as busy: the original's text captures give send times in whole ms, and the
    client's own time between two requests is that short."""
    spans = sorted((r.origin_ns, r.origin_ns + r.latency_ns) for r in records)
    if not spans:
        return None
    total = max(end for _, end in spans) - spans[0][0]
    if total <= 0:
        return None
    busy, cur_start, cur_end = 0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start > cur_end + GAP_RESOLUTION_NS:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    return max(0.0, 1 - busy / total)


def _median_ms(values: Sequence[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) / 1e6 if len(known) * 2 >= len(values) and known else None


def detect(records: Sequence[RequestRecord], *, sequential: bool = True,
           limit: Limit | None = None, unlimited: bool = False) -> Detection:
    """Detect throttling in a run's records (see the module docstring).

    ``sequential``: one request at a time (the latency distribution may then be used to find
    stalls the counters missed). ``limit``: the limit in force, if known (its period is the
    fallback when the stalls are too few to infer one). ``unlimited``: the run's metadata says
    no limit was in force, so only the server's counters can say a request was throttled.
    """
    ok = sorted((r for r in records if r.ok), key=lambda r: (r.start_ns, r.seq))
    notes: list[str] = []
    lat = np.asarray([r.latency_ns for r in ok], dtype=float) / 1e6
    server_cpu = _median_ms([r.server_cpu_ns for r in ok])
    server_wall = _median_ms([r.server_wall_ns for r in ok])
    counters = [r.server_throttled for r in ok]
    has_counters = any(c is not None for c in counters)

    split = split_latencies(lat)
    baseline = split.baseline_ms if split else None
    threshold = split.threshold_ms if split else None
    if unlimited:
        threshold = None
        notes.append("no CPU limit was in force: slow requests were slowed by something else "
                     "(other work on the machine, the network), not by a quota")
    elif (sequential and split and server_cpu is not None and limit is not None
          and split.baseline_ms > server_cpu + 0.5 * (limit.period_ms - limit.quota_ms)):
        # Even the fastest cluster is half a stall slower than the work: (nearly) all were
        # throttled, if the slow requests end on the limit's period grid; else the CPU was
        # busy with other work (steady contention puts the ends on a grid too, the latency's).
        cut = server_cpu + 0.25 * (limit.period_ms - limit.quota_ms)
        slow = lat >= cut
        ends = [(r.origin_ns + r.latency_ns) / 1e6 for r, s in zip(ok, slow) if s]
        short = float(np.percentile(lat[slow] - server_cpu, 25)) if slow.any() else 0.0
        grid = infer_period(ends, min_period_ms=max(MIN_PERIOD_MS, 0.9 * short))
        if grid is not None and abs(grid - limit.period_ms) <= 0.1 * limit.period_ms:
            baseline, threshold = server_cpu, cut
            notes.append(f"every cluster of latencies is far above the server's CPU per "
                         f"request ({server_cpu:.2f} ms) and they end on the period grid: "
                         "(nearly) all were throttled")
        else:
            notes.append(f"requests took far longer than the server's CPU per request "
                         f"({server_cpu:.2f} ms), but not in steps of the period: the CPU was "
                         "busy with other work (contention), which is not a quota")
    elif split and split.threshold_ms is not None and server_cpu is None and (
            split.fast_count < max(3, 0.05 * len(ok))):
        notes.append(f"only {split.fast_count} request(s) in the fast mode: the baseline "
                     f"({split.baseline_ms:.2f} ms) is uncertain; the server's CPU per request "
                     "(Server-Timing cpu) would settle it")

    by_latency = [bool(threshold is not None and x >= threshold) for x in lat]
    if has_counters:
        by_server = [bool(c) for c in counters]
        if sequential:
            missed = sum(1 for s, l in zip(by_server, by_latency) if l and not s)
            throttled = [s or l for s, l in zip(by_server, by_latency)]
            source = "server counters + latency" if missed else "server counters"
            if missed:
                notes.append(f"{missed} slow request(s) without a throttle in the server's "
                             "counters: stalls before the handler started (the kernel stops "
                             "the whole process, also while a request waits to be read)")
        else:
            throttled, source = by_server, "server counters"
    else:
        throttled = by_latency
        source = "latency distribution" if ok else "none"
        if not sequential:
            notes.append("inferred from the latencies of a concurrent run: queueing behind "
                         "other requests also looks like a stall, so this is uncertain")

    mask = np.asarray(throttled, dtype=bool)
    if ok and not mask.all():
        baseline = float(np.median(lat[~mask]))  # the typical unthrottled request
    elif ok and server_cpu is not None:
        baseline = server_cpu
    elif ok:
        baseline = None  # every request throttled and no CPU per request: no fast mode seen
        notes.append("every request was throttled: no unthrottled latency to compare with")
    stall = None
    if mask.any() and baseline is not None:
        stall = max(0.0, float(np.median(lat[mask])) - baseline)
    elif mask.any():  # the server's own pause figures
        paused = [max(r.server_throttle_ns or 0, r.kernel_throttled_ns or 0)
                  for r, t in zip(ok, throttled) if t]
        stall = float(np.median(paused)) / 1e6 if any(paused) else None

    ends = [(r.origin_ns + r.latency_ns) / 1e6 for r, t in zip(ok, throttled) if t]
    # A stall is shorter than its period (unless it spans several): the short stalls bound
    # the period from below (the lower quartile: a few tiny pauses near a boundary aside).
    stalls = lat[mask] - (baseline or 0.0)
    short = float(np.percentile(stalls, 25)) if stalls.size else MIN_PERIOD_MS
    period = infer_period(ends, min_period_ms=max(MIN_PERIOD_MS, 0.9 * short))
    if period is not None:
        period_source = "inferred from stalls"
        if limit is not None and abs(period - limit.period_ms) > 0.1 * limit.period_ms:
            notes.append(f"stalls recur every {period:g} ms, but the limit's period is "
                         f"{limit.period_ms:g} ms")
    elif limit is not None:
        period, period_source = limit.period_ms, "limit"
    else:
        period, period_source = DEFAULT_PERIOD_MS, "default"

    throughput = idle = None
    quota_bound = False
    if ok:
        span_ns = (max(r.origin_ns + r.latency_ns for r in ok) - min(r.origin_ns for r in ok))
        throughput = len(ok) / (span_ns / 1e9) if span_ns > 0 else None
        idle = idle_fraction(records)
        if mask.any() and baseline is not None and span_ns > 0:
            # each stall covers at least one period boundary; quota-bound when (nearly)
            # every boundary of the run ended a stall
            covered = np.maximum(1, np.round((lat[mask] - baseline) / period)).sum()
            quota_bound = bool(covered >= 0.8 * span_ns / 1e6 / period)

    if server_cpu is not None:
        service, service_source = server_cpu, "server CPU per request"
    elif baseline is not None:
        service, service_source = baseline, "unthrottled latency"
    else:
        service, service_source = None, "unknown"
    return Detection(count=len(ok), throttled=tuple(throttled), source=source,
                     baseline_ms=baseline, threshold_ms=threshold, service_ms=service,
                     service_source=service_source, stall_ms=stall, period_ms=period,
                     period_source=period_source, throughput_rps=throughput,
                     server_cpu_ms=server_cpu, server_wall_ms=server_wall, idle_fraction=idle,
                     quota_bound=quota_bound, notes=tuple(notes))


def explain(detection: Detection, measured: Mapping[str, Any], prediction: Prediction,
            limit: Limit) -> list[str]:
    """Sentences on how the measured run compares with the model, and why it is worse.

    ``measured``: the run's report keys (``mean_ms``, ``throughput_rps``,
    ``throttled_fraction``, ...); ``prediction``: the model run with the same limit and the
    run's service time.
    """
    predicted = prediction.to_dict()
    m_mean, p_mean = measured.get("mean_ms"), predicted["mean_ms"]
    m_thr, p_thr = measured.get("throttled_fraction"), predicted["throttled_fraction"]
    m_rps, p_rps = measured.get("throughput_rps"), predicted["throughput_rps"]
    if not all(isinstance(v, (int, float)) and math.isfinite(v)
               for v in (m_mean, m_thr, m_rps)):
        return ["not enough successful requests to compare with the model"]
    assert isinstance(m_mean, (int, float)) and isinstance(m_thr, (int, float))
    assert isinstance(m_rps, (int, float))
    lines: list[str] = []
    worse = (m_mean > 1.2 * p_mean + 1 or m_rps < 0.85 * p_rps or m_thr > p_thr + 0.05)
    better = (m_mean < 0.8 * p_mean - 1 and m_rps > 1.15 * p_rps) or m_thr < p_thr - 0.1
    summary = (f"mean {m_mean:.1f} ms measured vs {p_mean:.1f} ms predicted, throttled "
               f"{100 * m_thr:.0f} % vs {100 * p_thr:.0f} %, {m_rps:.1f} vs {p_rps:.1f} "
               "requests/s")
    service = prediction.workload.service_ms
    if worse:
        lines.append(f"The run did worse than the model: {summary}.")
        idle = detection.idle_fraction
        if idle is not None and idle > 0.1:
            lines.append(f"The requests were not sent back to back ({100 * idle:.0f} % of the run "
                         "had none in flight: an excerpt, or a slow client), so the quota each "
                         "request was charged cannot be read from the throughput.")
        elif (charged := detection.charged_ms(limit.cpus)) is not None:
            # Quota-bound: every period's quota is spent, so quota per request = rate / rps.
            if charged > 1.1 * service:
                extra = charged - service
                lines.append(
                    f"At {limit.cpus:g} CPU the group may run {limit.cpus * 1000:g} ms of CPU "
                    f"per second; it completed {m_rps:.1f} requests per second, so each request "
                    f"was charged about {charged:.1f} ms of quota, while its work needs "
                    f"{service:.2f} ms ({detection.service_source}). About {extra:.1f} ms per "
                    f"request ({100 * extra / charged:.0f} % of the quota) went to something "
                    "else in the group: the runtime's own threads (garbage collection, JIT, "
                    "timers, logging), HTTP handling outside the work, or other processes in "
                    "the container.")
        if detection.server_cpu_ms is not None:
            wall = (f", wall {detection.server_wall_ms:.2f} ms"
                    if detection.server_wall_ms is not None else "")
            lines.append(f"The server measured {detection.server_cpu_ms:.2f} ms of CPU per "
                         f"request inside the handler{wall}; quota spent outside the handler "
                         "is invisible to it but not to the kernel.")
        else:
            lines.append("This capture has no server-side CPU per request (Server-Timing "
                         "cpu); the service time is taken from the unthrottled "
                         "latencies, which include the network and the client.")
        m_stall, p_stall = measured.get("stall_ms"), predicted["stall_ms"]
        if isinstance(m_stall, (int, float)) and p_stall and m_stall > 1.3 * p_stall:
            lines.append(f"Stalls are longer than the model's ({m_stall:.0f} vs {p_stall:.0f} "
                         "ms): a request waited more than one period, as when CPU spent "
                         "elsewhere uses up the next period's quota before the request runs.")
        if (detection.period_source == "inferred from stalls"
                and abs(detection.period_ms - limit.period_ms) > 0.1 * limit.period_ms):
            lines.append(f"Stalls recur every {detection.period_ms:g} ms, not every "
                         f"{limit.period_ms:g} ms: the limit in force may not be the one given.")
    elif better:
        lines.append(f"The run did better than the model: {summary}. Burst credit, a limit "
                     "that was not in force, or less CPU per request than assumed.")
    else:
        lines.append(f"The run agrees with the model: {summary}.")
    return lines
