"""A run's metadata (``<name>.json`` beside its CSV), typed and read in one place.

``RunMetadata.from_dict`` is the only reader of the JSON: every other module asks the typed
fields and properties (the load mode, whether requests went one at a time, the CPU limit in
force and its words). ``to_dict`` writes the same keys the files have always had; keys this
version does not know are kept as they were read (``extra``).

``limits`` is the service's ``/limits`` answer as it came (None: no such answer, e.g. a text
capture or another server): ``limit`` reads the limit in force from it, the kernel quota when
there is one, else the in-process throttle.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from client.data.summary import Summary
from cpuquota.limit import Limit, LimitError

__all__ = ["LoadMode", "ReplicaInfo", "RunMetadata", "SweepInfo", "watched_without_limit"]


def watched_without_limit(cgroup: Mapping[str, Any] | None) -> bool:
    """Whether a watched group (a run's or a timeline's ``cgroup`` metadata) has no quota on
    it or above: its counters then never count throttling (False: it has one, or unknown)."""
    if not cgroup:
        return False
    return cgroup.get("cpus") is None and not cgroup.get("levels")


class LoadMode(str, Enum):
    """How requests were sent (the value is what the metadata says)."""

    SEQUENTIAL = "sequential"
    CLOSED_LOOP = "closed-loop"
    OPEN_LOOP = "open-loop"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SweepInfo:
    """Which sweep a run belongs to: its comparison's name, the backend and the limit."""

    name: str
    backend: str
    cpus: float          # 0: no limit
    started_at: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ReplicaInfo:
    """A run spread round-robin over ``count`` replicas of ``cpus_each`` CPU each (0: none)."""

    count: int
    cpus_each: float
    start_s: float                 # from the first start to the last replica healthy
    rss_mib: list[float] = field(default_factory=list)  # each replica's memory after the run

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# keys written once the run has ended (all of them, ``None`` included)
_END_KEYS = ("ended_at", "completed", "interrupted", "stop_reason", "summary")
# keys written only when set
_OPTIONAL_KEYS = ("sweep", "service", "load_average", "replicas", "cgroup", "live", "request",
                  "targets", "client_fell_behind", "client_pace", "ok_status", "clock")
# fields about the file, not in it
_BOOKKEEPING = frozenset({"extra", "absent", "present"})


@dataclass
class RunMetadata:
    """What is known about a run besides its requests (empty for a text capture)."""

    name: str = ""
    tool: str = "http-timing"
    version: str = ""
    url: str = ""
    iterations: int | None = None
    mode: LoadMode = LoadMode.SEQUENTIAL
    requests: int | None = None
    concurrency: int = 1
    rate_rps: float | None = None
    duration_s: float | None = None
    new_connection: bool = False
    timeout_s: float | None = None
    warmup: int = 0
    started_at: str | None = None
    host: str | None = None
    platform: str | None = None
    python: str | None = None
    command: list[str] = field(default_factory=list)
    limits: dict[str, Any] | None = None
    # the end of the run
    ended_at: str | None = None
    completed: int | None = None
    interrupted: bool = False
    stop_reason: str | None = None
    summary: Summary | None = None
    # a sweep's run
    sweep: SweepInfo | None = None
    service: dict[str, Any] | None = None
    load_average: list[float] | None = None
    replicas: ReplicaInfo | None = None
    # the target's own group, read by the client (--cgroup): spec, path, group, version,
    # quota_us, period_us, burst_us, cpus, usage_source
    cgroup: dict[str, Any] | None = None
    # the live page (--live): its address, the CPU its server used, frames sent and dropped
    live: dict[str, Any] | None = None
    # what was sent when it was not a GET of ``url`` (secrets redacted, a body as its size
    # and sha256: ``client.data.request``): one request, or a --targets file's, round-robin
    request: dict[str, Any] | None = None
    targets: list[dict[str, Any]] | None = None
    # whether the client itself could not send as asked (``client.data.pace``), and its figures
    client_fell_behind: bool | None = None
    client_pace: dict[str, Any] | None = None
    # the statuses counted as successes, e.g. "200-399" (client.data.status; older runs: 2xx)
    ok_status: str | None = None
    # where the requests' clock (start_ns 0) is on the wall clock: zero_epoch_ns and
    # zero_uncertainty_ns (client.data.timeline_meta.TimelineClock); absent in older runs
    clock: dict[str, Any] | None = None
    # what this version does not know, kept as read
    extra: dict[str, Any] = field(default_factory=dict)
    # known keys a file (of an older version) did not have: not written back
    absent: frozenset[str] = frozenset()
    # False for a capture without metadata (nothing above was read)
    present: bool = True

    # -- reading and writing -----------------------------------------------------------

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunMetadata:
        """The metadata of a JSON object; wrong types read as unknown, never raise."""
        known = {f.name for f in dataclasses.fields(cls)} - _BOOKKEEPING
        values = {name: raw[name] for name in known if name in raw}
        meta = cls(extra={k: v for k, v in raw.items() if k not in known},
                   absent=frozenset(known - set(raw) - set(_END_KEYS) - set(_OPTIONAL_KEYS)))
        for name, value in values.items():
            setattr(meta, name, _typed(name, value, getattr(meta, name)))
        return meta

    @classmethod
    def missing(cls) -> RunMetadata:
        """No metadata at all: a text capture of the original script."""
        return cls(tool="", present=False)

    def to_dict(self) -> dict[str, Any]:
        if not self.present:
            return dict(self.extra)
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in _BOOKKEEPING or f.name in self.absent:
                continue
            value = getattr(self, f.name)
            if f.name in _END_KEYS and self.ended_at is None:
                continue
            if f.name in _OPTIONAL_KEYS and value is None:
                continue
            out[f.name] = _plain(value)
        out.update(self.extra)
        return out

    # -- what the fields mean ----------------------------------------------------------

    @property
    def sequential(self) -> bool:
        """Whether the run sent one request at a time (the original's mode; captures too)."""
        return self.mode is LoadMode.SEQUENTIAL or (
            self.mode is LoadMode.CLOSED_LOOP and self.concurrency <= 1)

    def quota_levels(self) -> list[tuple[str, Limit]]:
        """(group, quota) of each group with a quota the client sampled with the watched one
        (``--cgroup``; the quota in force first, then the others nearest first), in the
        timeline's order; [] for runs without them."""
        levels = (self.cgroup or {}).get("levels")
        out: list[tuple[str, Limit]] = []
        for level in levels if isinstance(levels, list) else []:
            quota = _quota(level, "cgroup") if isinstance(level, Mapping) else None
            if quota is None:
                return []
            out.append((str(level.get("group") or level.get("path")), quota))
        return out

    @property
    def limit(self) -> Limit | None:
        """The limit in force during the run: the quota of the group the client watched
        (``--cgroup``), else the service's ``/limits``: the kernel quota when there is one,
        else the in-process throttle; None when unknown or none."""
        if self.cgroup is not None and (watched := _quota(self.cgroup, "cgroup")) is not None:
            return watched
        limits = self.limits or {}
        cgroup = limits.get("cgroup")
        if isinstance(cgroup, Mapping) and (kernel := _quota(cgroup, "kernel")) is not None:
            return kernel
        inprocess = limits.get("inprocess")
        if isinstance(inprocess, Mapping):
            percent = _positive(inprocess.get("cpu_limit_percent"))
            if percent:
                cycle = _positive(inprocess.get("cycle_ms")) or 100.0
                burst = _positive(inprocess.get("burst_ms")) or 0.0
                return _limit(percent / 100, cycle, burst, "in-process")
        return None

    @property
    def throttle_mode(self) -> str | None:
        """The in-process throttle's mode when one was on (``cfs``: one budget for the
        process, paused mid-work as the kernel does; ``boundary``: a budget per worker thread,
        paid between requests), else None."""
        inprocess = (self.limits or {}).get("inprocess")
        if isinstance(inprocess, Mapping) and _positive(inprocess.get("cpu_limit_percent")):
            mode = inprocess.get("mode", "cfs")
            return mode if isinstance(mode, str) else None
        return None

    @property
    def limits_known(self) -> bool:
        """Whether the limits in force are known: the watched group's, or the service said
        (our burn-service does)."""
        return isinstance(self.limits, Mapping) or self.cgroup is not None

    @property
    def unlimited(self) -> bool:
        """The service said no CPU limit was in force."""
        return self.limits_known and self.limit is None

    @property
    def workers(self) -> int:
        """The service's worker processes (1 unless its ``/limits`` says more)."""
        workers = (self.limits or {}).get("workers")
        return workers if isinstance(workers, int) and workers >= 1 else 1

    def limit_label(self) -> str:
        """``0.3 CPU (kernel)``; ``none`` for a run of ours without a limit; ``unknown`` for a
        text capture (no metadata)."""
        limit = self.limit
        if limit is not None:
            return limit.label()
        if self.limits_known:
            return "none"
        return str(self.extra.get("limit") or "unknown")

    def limit_description(self) -> str:
        """The limits in force in words: ``kernel quota 0.3 CPU (30 ms per 100 ms)``,
        ``in-process 30 % of 100 ms (cfs)``, ``no CPU limit``."""
        if self.cgroup is not None:
            where = f"cgroup {self.cgroup.get('spec') or self.cgroup.get('path')}"
            if (limit := _quota(self.cgroup, "cgroup")) is not None:
                return (f"{where}: quota {limit.cpus:g} CPU ({limit.quota_ms:g} ms per "
                        f"{limit.period_ms:g} ms)")
            own = self._service_limits()
            return f"{where}: no CPU limit" + (f"; the service's own: {own}" if own else "")
        if not self.limits_known:
            return str(self.extra.get("limit") or "limit unknown")
        return self._service_limits() or "no CPU limit"

    def _service_limits(self) -> str:
        """The limits the service's ``/limits`` said, in words ("": none, or not asked)."""
        limits = self.limits or {}
        parts: list[str] = []
        cgroup = limits.get("cgroup")
        if isinstance(cgroup, Mapping) and cgroup.get("quota_us"):
            cpus = cgroup.get("cpus")
            period_ms = (cgroup.get("period_us") or 100_000) / 1000
            parts.append(f"kernel quota {cpus:g} CPU ({cgroup['quota_us'] / 1000:g} ms per "
                         f"{period_ms:g} ms)" if isinstance(cpus, (int, float))
                         else f"kernel quota {cgroup['quota_us']} us")
        inprocess = limits.get("inprocess")
        if isinstance(inprocess, Mapping) and inprocess.get("cpu_limit_percent"):
            parts.append(f"in-process {inprocess['cpu_limit_percent']:g} % of "
                         f"{inprocess.get('cycle_ms', 100):g} ms ({inprocess.get('mode', 'cfs')})")
        return ", ".join(parts)


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _quota(group: Mapping[str, Any], source: str) -> Limit | None:
    """The limit a cgroup's numbers say (``quota_us``, ``period_us``, ``burst_us``)."""
    quota_us, period_us = _positive(group.get("quota_us")), _positive(group.get("period_us"))
    if not (quota_us and period_us):
        return None
    burst_us = _positive(group.get("burst_us")) or 0.0
    return _limit(quota_us / period_us, period_us / 1000, burst_us / 1000, source)


def _limit(cpus: float, period_ms: float, burst_ms: float, source: str) -> Limit | None:
    try:
        return Limit(cpus, period_ms, min(burst_ms, cpus * period_ms), source)
    except LimitError:  # a service that reported something no limit can be
        return None


def _typed(name: str, value: Any, default: Any) -> Any:
    """A JSON value as the field's type; the default when it has another type."""
    if name == "mode":
        try:
            return LoadMode(value)
        except ValueError:
            return default
    if name == "summary":
        return Summary.from_dict(value) if isinstance(value, Mapping) else None
    if name in ("sweep", "replicas"):
        kind = SweepInfo if name == "sweep" else ReplicaInfo
        try:
            return kind(**value) if isinstance(value, Mapping) else None
        except TypeError:
            return None
    if name == "concurrency":
        return value if isinstance(value, int) and value >= 1 else 1
    if name == "targets":
        return [dict(t) for t in value if isinstance(t, Mapping)] if isinstance(value, list) \
            else None
    if name == "client_fell_behind":
        return value if isinstance(value, bool) else None
    if name in ("limits", "service", "cgroup", "live", "request", "client_pace", "clock"):
        return dict(value) if isinstance(value, Mapping) else None
    if name == "command":
        return list(value) if isinstance(value, list) else []
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, LoadMode):
        return value.value
    if isinstance(value, (Summary, SweepInfo, ReplicaInfo)):
        return value.to_dict()
    return value
