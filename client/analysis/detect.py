"""Which requests of a run were throttled, by how much, and how often the stalls recur.

Pure functions of a run's records (no I/O). Two sources, used together:

- **Counters**: the watched group's, read by the client around each request (``--cgroup``,
  ``cgroup_nr_throttled``: they see every stall of the request); else the server's
  (``kernel_nr_throttled``: its cgroup's ``nr_throttled`` went up during the request;
  ``server_throttle_ns``: the in-process throttle paused it). The server's are exact for what
  happened inside the handler, but the kernel stops the whole process, so a request that
  arrives while the group is throttled waits *before* the handler reads them: the server
  cannot see that stall.
- **The latency distribution** of a sequential run (``client.analysis.latency``): a request
  above the gap over the fast mode is throttled. When almost every request is throttled the
  fast mode may be missing: the server's CPU per request (``server_cpu_ns``) then says what an
  unthrottled request would take, and without it the baseline is marked uncertain.

A run with counters uses them and adds the slow requests they missed (sequential runs only:
under concurrency, queueing also makes requests slow). ``detect`` runs these steps in order:
:func:`fast_mode` (the baseline and the threshold), :func:`mark_throttled` (which requests),
:func:`stall_of` (how much), :func:`period_of` (how often, ``client.analysis.period``) and
:func:`quota_bound_of` (whether all the quota was spent). A saturated run (a closed loop
that offered more than the service or its quota serves, an open loop whose backlog grew or
whose group wanted more than its quota throughout) gets no stall or period from its
latencies: they are a queue's (:func:`saturation`, :func:`open_loop_saturation`,
:func:`quota_saturation`).

The throttled share of a run is :attr:`Detection.throttled_fraction`: every table, report and
picture uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import cached_property
from typing import Any

import numpy as np

from client.analysis.latency import LatencySplit, split_latencies
from client.analysis.period import DEFAULT_PERIOD_MS, MIN_PERIOD_MS, idle_fraction, infer_period
from client.analysis.throughput import throughput_rps
from client.data.files import Run
from client.data.metadata import LoadMode, watched_without_limit
from client.data.record import RequestRecord
from cpuquota.limit import NO_QUOTA, Limit

__all__ = ["Detection", "FastMode", "Held", "ThrottleSource", "detect", "detect_run", "fast_mode",
           "mark_throttled", "no_limit_note", "open_loop_saturation", "period_of",
           "quota_bound_of", "quota_saturation", "saturation", "sequential_saturation",
           "stall_of"]


class ThrottleSource(str, Enum):
    """Where the throttled marks came from (the value is what reports print)."""

    SERVER = "server counters"
    SERVER_AND_LATENCY = "server counters + latency"
    CGROUP = "cgroup counters"   # the watched group's, read by the client (--cgroup)
    LATENCY = "latency distribution"
    NONE = "none"

    def __str__(self) -> str:
        return self.value

    @property
    def words(self) -> str:
        """Whose counters these are, as a report says it (the value stays the JSON's)."""
        return {ThrottleSource.SERVER: "service's own counters (Server-Timing)",
                ThrottleSource.SERVER_AND_LATENCY:
                    "service's own counters (Server-Timing) + latency",
                ThrottleSource.CGROUP: "cgroup counters (cpu.stat)"}.get(self, self.value)

    @property
    def uses_latency(self) -> bool:
        """Whether a latency threshold marked requests (then ``threshold_ms`` means something)."""
        return self in (ThrottleSource.SERVER_AND_LATENCY, ThrottleSource.LATENCY)


@dataclass(frozen=True)
class Held:
    """How long the requests delayed by throttling were held by it: the wall time of each
    (``cgroup_held_ns``, ``client.data.attribution.held``), over those it held at all."""

    count: int
    min_ms: float
    median_ms: float
    max_ms: float

    @classmethod
    def of(cls, held_ns: Sequence[int]) -> Held | None:
        """The holds' range (None without any)."""
        if not held_ns:
            return None
        ms = np.asarray(held_ns, dtype=float) / 1e6
        return cls(len(ms), float(ms.min()), float(np.median(ms)), float(ms.max()))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "min": self.min_ms, "median": self.median_ms,
                "max": self.max_ms}


@dataclass(frozen=True)
class Detection:
    """What the run's records say about throttling (successful requests only)."""

    count: int                       # successful requests looked at
    throttled: tuple[bool, ...]      # per successful request, in order of sending
    source: ThrottleSource
    baseline_ms: float | None        # typical latency of an unthrottled request
    threshold_ms: float | None       # latencies >= this were counted as throttled
    service_ms: float | None         # CPU per request: the server's, else the baseline latency
    service_source: str              # "server CPU per request" / "unthrottled latency"
    stall_ms: float | None           # typical extra delay of a throttled request
    period_ms: float                 # inferred, else the limit's, else 100
    period_source: str               # "inferred from stalls" / "limit" / "default"
    throughput_rps: float | None     # client.analysis.throughput.throughput_rps
    server_cpu_ms: float | None      # median server_cpu_ns
    server_wall_ms: float | None     # median server_wall_ns
    idle_fraction: float | None = None  # share of the run's span with no request in flight
    quota_bound: bool = False        # stalls in (nearly) every period: all the quota was spent
    notes: tuple[str, ...] = ()
    seqs: tuple[int, ...] = ()       # the ``seq`` of each successful request, as ``throttled``
    # the run offered more work than the service (or its quota) serves: its latency grew
    # with its own queue (None: not said, e.g. one request at a time)
    saturated: str | None = None
    # how long the group's throttling held the requests delayed by it (``--cgroup``: the
    # attribution's ``cgroup_held_ns``; None where no hold is known)
    held: Held | None = None

    def is_throttled(self, record: RequestRecord) -> bool:
        """Whether this run's ``record`` was marked throttled (failed requests never are)."""
        return self.marks.get(record.seq, False) if record.ok else False

    @cached_property
    def marks(self) -> dict[int, bool]:
        """``seq`` -> throttled, for the successful requests."""
        return dict(zip(self.seqs, self.throttled))

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
        """The run's throttled share: throttled / successful requests (None without any)."""
        return self.throttled_count / self.count if self.count else None

    @property
    def inferred_period(self) -> bool:
        return self.period_source == "inferred from stalls"

    def to_dict(self) -> dict[str, Any]:
        return {"throttled_fraction": self.throttled_fraction,
                "throttled_count": self.throttled_count, "throttled_source": self.source.value,
                "stall_ms": self.stall_ms, "period_ms": self.period_ms,
                "period_source": self.period_source, "throughput_rps": self.throughput_rps,
                "baseline_ms": self.baseline_ms, "threshold_ms": self.threshold_ms,
                "service_ms": self.service_ms, "service_source": self.service_source,
                "server_cpu_ms": self.server_cpu_ms, "server_wall_ms": self.server_wall_ms,
                "idle_fraction": self.idle_fraction, "quota_bound": self.quota_bound,
                "saturated": self.saturated, "marked_as": self.marked_as,
                "notes": list(self.notes),
                **({"throttle_held_ms": self.held.to_dict()} if self.held else {})}

    @property
    def marked_as(self) -> str:
        """What the marked requests (``throttled_count``) are: "delayed by throttling" when
        counters said so, "slow" from the latency alone (never called throttled then)."""
        return ("slow" if self.source in (ThrottleSource.LATENCY, ThrottleSource.NONE) else
                "delayed by throttling")


NOT_A_QUOTA = "which is not a quota"   # step 1's guess that the group's counters may settle


@dataclass(frozen=True)
class FastMode:
    """Step 1's answer: the unthrottled latency and the threshold above it (None: none)."""

    baseline_ms: float | None
    threshold_ms: float | None
    notes: tuple[str, ...] = ()


def _unless_counted(notes: tuple[str, ...], source: ThrottleSource,
                    mask: np.ndarray) -> tuple[str, ...]:
    """Step 1's guesses from the latencies alone, less the one the kernel's counters settle:
    "not a quota" is not said of a run whose group's counters say its requests were delayed
    by throttling."""
    if source is ThrottleSource.CGROUP and mask.any():
        return tuple(n for n in notes if not n.endswith(NOT_A_QUOTA))
    return notes


def _median_ms(values: Sequence[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) / 1e6 if len(known) * 2 >= len(values) and known else None


def _ends_ms(ok: Sequence[RequestRecord], chosen: Sequence[bool] | np.ndarray) -> list[float]:
    return [r.end_ns / 1e6 for r, c in zip(ok, chosen) if c]


def fast_mode(ok: Sequence[RequestRecord], lat: np.ndarray, split: LatencySplit | None, *,
              sequential: bool, limit: Limit | None, unlimited: bool,
              server_cpu: float | None) -> FastMode:
    """Step 1: the fast mode, unless no limit was in force (then nothing is throttled by
    latency), or even the fastest cluster is half a stall slower than the work (then nearly
    all were throttled if the slow requests end on the limit's period grid; else the CPU was
    busy with other work: steady contention puts the ends on a grid too, the latency's)."""
    baseline = split.baseline_ms if split else None
    threshold = split.threshold_ms if split else None
    if unlimited:
        return FastMode(baseline, None, (
            f"{NO_QUOTA} (the service had none in force): slow requests were slowed by "
            "something else (other work on the machine, the network), not by a quota",))
    if (sequential and split and server_cpu is not None and limit is not None
            and split.baseline_ms > server_cpu + 0.5 * (limit.period_ms - limit.quota_ms)):
        cut = server_cpu + 0.25 * (limit.period_ms - limit.quota_ms)
        slow = lat >= cut
        short = float(np.percentile(lat[slow] - server_cpu, 25)) if slow.any() else 0.0
        grid = infer_period(_ends_ms(ok, slow), min_period_ms=max(MIN_PERIOD_MS, 0.9 * short))
        if grid is not None and abs(grid - limit.period_ms) <= 0.1 * limit.period_ms:
            return FastMode(server_cpu, cut, (
                f"every cluster of latencies is far above the server's CPU per request "
                f"({server_cpu:.2f} ms) and they end on the period grid: (nearly) all were "
                "delayed by throttling",))
        return FastMode(baseline, threshold, (
            f"requests took far longer than the server's CPU per request ({server_cpu:.2f} ms), "
            f"but not in steps of the period: the CPU was busy with other work (contention), "
            f"{NOT_A_QUOTA}",))
    if split and split.threshold_ms is not None and server_cpu is None and (
            split.fast_count < max(3, 0.05 * len(ok))):
        return FastMode(baseline, threshold, (
            f"only {split.fast_count} request(s) in the fast mode (the cluster of the fastest "
            f"latencies): the baseline (their typical latency, {split.baseline_ms:.2f} ms) is "
            "uncertain; the server's CPU per request (Server-Timing cpu) would settle it",))
    return FastMode(baseline, threshold)


def mark_throttled(ok: Sequence[RequestRecord], lat: np.ndarray, threshold: float | None, *,
                   sequential: bool) -> tuple[list[bool], ThrottleSource, list[str]]:
    """Step 2: which requests were throttled, by the server's counters and/or the latency."""
    counters = [r.counters_throttled for r in ok]
    by_latency = [bool(threshold is not None and x >= threshold) for x in lat]
    if not any(c is not None for c in counters):
        notes = [] if sequential else [
            "inferred from the latencies of a concurrent run: queueing behind other requests "
            "also looks like a stall, so this is uncertain"]
        return by_latency, ThrottleSource.LATENCY if ok else ThrottleSource.NONE, notes
    by_server = [bool(c) for c in counters]
    if any(r.cgroup_nr_throttled is not None for r in ok):
        # read by the client around the whole request (or from the group's timeline): a
        # stall before the handler is in them too, so slowness adds nothing. Only what the
        # kernel counted: the wall time the group's throttling held the request (files from
        # before it: its periods), or the service's own cgroup's (Server-Timing)
        by_group = [_held_by_group(r) or bool(r.kernel_nr_throttled) for r in ok]
        paused = sum(1 for r, g in zip(ok, by_group) if not g and r.server_throttle_ns)
        return by_group, ThrottleSource.CGROUP, [] if not paused else [
            f"{paused} request(s) paused by the service's own throttle (Server-Timing "
            "throttle), not by a kernel quota: not counted as delayed by throttling here"]
    if not sequential or all(r.kernel_nr_throttled is None for r in ok):
        # concurrent: queueing behind other requests is not a stall; the in-process throttle
        # (no kernel counter): it pauses only inside the handler, so its counters see every
        # pause and a request slowed by other work on the machine was not throttled
        return by_server, ThrottleSource.SERVER, []
    missed = sum(1 for s, slow in zip(by_server, by_latency) if slow and not s)
    throttled = [s or slow for s, slow in zip(by_server, by_latency)]
    if not missed:
        return throttled, ThrottleSource.SERVER, []
    return throttled, ThrottleSource.SERVER_AND_LATENCY, [
        f"{missed} slow request(s) without a throttle in the server's counters: stalls before "
        "the handler started (the kernel stops the whole process, also while a request waits "
        "to be read), or a quota on a group above the server's own that it cannot read (a "
        "Kubernetes pod's group: --cgroup k8s:NS/POD reads both)"]


def _held_by_group(record: RequestRecord) -> bool:
    """Whether the watched group's throttling held the request (``cgroup_held_ns`` > 0; in
    files from before that column, its throttled periods)."""
    if record.cgroup_held_ns is not None:
        return record.cgroup_held_ns > 0
    return bool(record.cgroup_nr_throttled)


def stall_of(ok: Sequence[RequestRecord], lat: np.ndarray, mask: np.ndarray,
             baseline: float | None, server_cpu: float | None
             ) -> tuple[float | None, float | None, list[str]]:
    """Step 3: the typical unthrottled latency (baseline) and the typical extra delay of a
    throttled request (stall)."""
    notes: list[str] = []
    if ok and not mask.all():
        baseline = float(np.median(lat[~mask]))  # the typical unthrottled request
    elif ok and server_cpu is not None:
        baseline = server_cpu
    elif ok:
        baseline = None  # every request throttled and no CPU per request: no fast mode seen
        notes.append("no request was fast: no unthrottled latency to compare with")
    stall = None
    counted = [r.server_throttle_ns for r, t in zip(ok, mask) if t and r.server_throttle_ns]
    if mask.any() and len(counted) * 2 > int(mask.sum()):
        # the pauses the service itself counted: a load that queues the requests (or a busy
        # machine) moves the latencies of both kinds, not the pause
        stall = float(np.median(counted)) / 1e6
    elif mask.any() and baseline is not None:
        stall = max(0.0, float(np.median(lat[mask])) - baseline)
    elif mask.any():  # the server's own pause figures
        paused = [max(r.server_throttle_ns or 0, r.kernel_throttled_ns or 0)
                  for r, t in zip(ok, mask) if t]
        stall = float(np.median(paused)) / 1e6 if any(paused) else None
    return baseline, stall, notes


def period_of(ok: Sequence[RequestRecord], lat: np.ndarray, mask: np.ndarray,
              baseline: float | None, limit: Limit | None) -> tuple[float, str, list[str]]:
    """Step 4: the period, inferred from when stalls end, else the limit's, else 100 ms."""
    # A stall is shorter than its period (unless it spans several): the short stalls bound
    # the period from below (the lower quartile: a few tiny pauses near a boundary aside).
    stalls = lat[mask] - (baseline or 0.0)
    short = float(np.percentile(stalls, 25)) if stalls.size else MIN_PERIOD_MS
    period = infer_period(_ends_ms(ok, mask), min_period_ms=max(MIN_PERIOD_MS, 0.9 * short))
    if period is not None:
        notes = []
        if limit is not None and abs(period - limit.period_ms) > 0.1 * limit.period_ms:
            notes.append(f"stalls recur every {period:g} ms, but the limit's period is "
                         f"{limit.period_ms:g} ms")
        return period, "inferred from stalls", notes
    if limit is not None:
        return limit.period_ms, "limit", []
    return DEFAULT_PERIOD_MS, "default", []


def quota_bound_of(ok: Sequence[RequestRecord], lat: np.ndarray, mask: np.ndarray,
                   baseline: float | None, period: float) -> bool:
    """Step 5: each stall covers at least one period boundary; the run is quota-bound when
    (nearly) every boundary of its span ended a stall."""
    if not ok or not mask.any() or baseline is None:
        return False
    span_ns = max(r.end_ns for r in ok) - min(r.origin_ns for r in ok)
    if span_ns <= 0:
        return False
    covered = np.maximum(1, np.round((lat[mask] - baseline) / period)).sum()
    return bool(covered >= 0.8 * span_ns / 1e6 / period)


SATURATED_SHARE = 0.9   # periods throttled: a concurrent run this throttled asks for more
QUEUED = 0.6            # p50 >= QUEUED x concurrency x p10: the requests wait for each other


def open_loop_saturation(ok: Sequence[RequestRecord], lat: np.ndarray, rate_rps: float,
                         achieved_rps: float | None) -> str | None:
    """Why an open-loop run at ``rate_rps`` was saturated (the service answered fewer requests
    a second than were sent and the latency grew as the backlog did), or None."""
    if achieved_rps is None or lat.size < 10 or achieved_rps >= 0.9 * rate_rps:
        return None
    third = lat.size // 3
    early, late = float(np.median(lat[:third])), float(np.median(lat[-third:]))
    if late < 2 * early:
        return None
    return (f"{rate_rps:g} requests/s were sent, {achieved_rps:.1f}/s were answered: the "
            f"latency grew with the backlog (median {early:.0f} ms in the first third, "
            f"{late:.0f} ms in the last)")


def saturation(lat: np.ndarray, concurrency: int, throttled_share: float | None) -> str | None:
    """Why a closed-loop run of ``concurrency`` connections was saturated (its offered load
    above what the service, or its quota, serves), or None: from the group's counters (nearly
    every period throttled) or, without them, from the latency (the typical request took
    about as long as the ``concurrency`` requests ahead of it: it waited in the run's own
    queue)."""
    if concurrency < 2 or lat.size < 10:
        return None
    p10, p50 = (float(v) for v in np.percentile(lat, [10, 50]))
    if throttled_share is not None:
        if throttled_share >= SATURATED_SHARE:
            return (f"{concurrency} connections asked for more CPU than the quota serves: "
                    f"{100 * throttled_share:.0f} % of the periods were throttled, and "
                    "requests waited for the quota and for each other")
        return None
    if p10 > 0 and p50 >= QUEUED * concurrency * p10:
        return (f"{concurrency} connections offered more than the service serves: latency "
                f"grew with the run's own queue (p50 {p50:.1f} ms against p10 {p10:.1f} ms); "
                "no stall or period is read from a queue")
    return None


def quota_saturation(lat: np.ndarray, rate_rps: float,
                     throttled_share: float | None) -> str | None:
    """Why an open-loop run at ``rate_rps`` was saturated by its quota (the group's counters
    say nearly every period was throttled: it wanted more than its quota throughout), or
    None. Its latencies are then the quota's queue: no stall or period is read from them."""
    if throttled_share is None or lat.size < 10 or throttled_share < SATURATED_SHARE:
        return None
    return (f"at {rate_rps:g} requests/s the group wanted more CPU than its quota "
            f"throughout: {100 * throttled_share:.0f} % of the periods were throttled, and "
            "requests waited for the quota; no stall or period is read from them")


def sequential_saturation(mask: np.ndarray, throttled_share: float | None) -> str | None:
    """Why a sequential run was saturated by its quota (the group's counters say nearly every
    period was throttled, and nearly every request was delayed by throttling: each one wanted
    more CPU than a period's quota gives), or None. With every request held, no fast mode is
    left to measure a stall against: the latencies are the quota's, not a stall's."""
    if (throttled_share is None or mask.size < 10 or throttled_share < SATURATED_SHARE
            or mask.mean() < SATURATED_SHARE):
        return None
    return (f"one request at a time wanted more CPU than the quota gives: "
            f"{100 * throttled_share:.0f} % of the periods were throttled and "
            f"{100 * mask.mean():.0f} % of the requests were delayed by throttling; no stall "
            "or period is read from them (no request ran unheld to compare with)")


def detect(records: Sequence[RequestRecord], *, sequential: bool = True,
           limit: Limit | None = None, unlimited: bool = False, concurrency: int = 1,
           throttled_share: float | None = None, rate_rps: float | None = None) -> Detection:
    """Detect throttling in a run's records (see the module docstring).

    ``sequential``: one request at a time (the latency distribution may then be used to find
    stalls the counters missed). ``limit``: the limit in force, if known (its period is the
    fallback when the stalls are too few to infer one). ``unlimited``: the run's metadata says
    no limit was in force, so only the server's counters can say a request was throttled.
    ``concurrency`` (a closed loop's connections) and ``throttled_share`` (the watched group's
    periods throttled, when known), or an open loop's ``rate_rps``, say whether the run was
    saturated (:func:`saturation`, :func:`open_loop_saturation`): then, without counters,
    neither a stall nor a period is inferred from its queue.
    """
    ok = sorted((r for r in records if r.ok), key=lambda r: (r.start_ns, r.seq))
    lat = np.asarray([r.latency_ns for r in ok], dtype=float) / 1e6
    server_cpu = _median_ms([r.server_cpu_ns for r in ok])
    mode = fast_mode(ok, lat, split_latencies(lat), sequential=sequential, limit=limit,
                     unlimited=unlimited, server_cpu=server_cpu)
    throttled, source, marked = mark_throttled(ok, lat, mode.threshold_ms, sequential=sequential)
    mask = np.asarray(throttled, dtype=bool)
    achieved = throughput_rps(records) if ok else None
    saturated = None
    if rate_rps is not None:
        saturated = open_loop_saturation(ok, lat, rate_rps, achieved)
        if saturated is None and not unlimited:
            saturated = quota_saturation(lat, rate_rps, throttled_share)
    elif not sequential and not unlimited:
        saturated = saturation(lat, concurrency, throttled_share)
    elif not unlimited and source is ThrottleSource.CGROUP:
        saturated = sequential_saturation(mask, throttled_share)
    baseline, stall, stalled = stall_of(ok, lat, mask, mode.baseline_ms, server_cpu)
    recurring: list[str] = []
    if saturated is not None:
        stall, stalled = None, []   # the latencies are a queue's: no stall or period in them
        period, period_source = ((limit.period_ms, "limit") if limit else
                                 (DEFAULT_PERIOD_MS, "default"))
    else:
        period, period_source, recurring = period_of(ok, lat, mask, baseline, limit)
    if server_cpu is not None:
        service, service_source = server_cpu, "server CPU per request"
    elif baseline is not None:
        service, service_source = baseline, "unthrottled latency"
    else:
        service, service_source = None, "unknown"
    return Detection(
        count=len(ok), throttled=tuple(throttled), source=source, baseline_ms=baseline,
        threshold_ms=mode.threshold_ms, service_ms=service, service_source=service_source,
        stall_ms=stall, period_ms=period, period_source=period_source,
        throughput_rps=achieved, server_cpu_ms=server_cpu,
        server_wall_ms=_median_ms([r.server_wall_ns for r in ok]),
        idle_fraction=idle_fraction(records) if ok else None,
        quota_bound=quota_bound_of(ok, lat, mask, baseline, period),
        notes=(*_unless_counted(mode.notes, source, mask), *marked, *stalled, *recurring),
        seqs=tuple(r.seq for r in ok),
        saturated=saturated, held=Held.of([r.cgroup_held_ns for r, hit in zip(ok, throttled)
                                           if hit and r.cgroup_held_ns]
                                          if source is ThrottleSource.CGROUP else []))


def detect_run(run: Run, limit: Limit | None = None) -> Detection:
    """``detect`` with what the run's metadata says: one request at a time or not, the limit
    in force (``limit`` overrides it), or that our service saw none."""
    meta = run.metadata
    limit = limit if limit is not None else meta.limit
    share = None
    if run.timeline and len(run.timeline) > 1:
        first, last = run.timeline[0], run.timeline[-1]
        periods = last.nr_periods - first.nr_periods
        share = (last.nr_throttled - first.nr_throttled) / periods if periods > 0 else 0.0
    closed = meta.mode is not LoadMode.OPEN_LOOP
    detection = detect(run.records, sequential=meta.sequential, limit=limit,
                       unlimited=limit is None and meta.unlimited,
                       concurrency=meta.concurrency if closed else 1, throttled_share=share,
                       rate_rps=None if closed else meta.rate_rps)
    if (why := no_limit_note(meta.cgroup)) is not None:
        detection = replace(detection, notes=(*detection.notes, why))
    return detection


def no_limit_note(cgroup: Mapping[str, Any] | None) -> str | None:
    """Why a watched group (the metadata's ``cgroup``) carries no throttling figure: no quota
    on it or above, so its counters never count one (None: it has a quota, or none watched)."""
    if cgroup is None or not watched_without_limit(cgroup):
        return None
    group = cgroup.get("group") or cgroup.get("path") or "?"
    where = ("the root cgroup / (its CPU figures are the whole machine's)"
             if group in ("", "/") else f"cgroup {group}")
    return (f"--cgroup {cgroup.get('spec') or group}: {where}: {NO_QUOTA}, none on it or "
            "above, so its counters count no throttling: none is claimed from them")
