"""A run as it goes, for the live page (``--live``): every completed request as a point, which
ones were throttled, the running counts, and the watched group's throttles and CPU per period
(pure: no threads, no I/O; ``client.render.live`` serves it).

Throttled means what it means in the run's picture (``client.render.figures``): the marks of
:func:`client.analysis.detect.detect` on the requests so far. Detection over every request is
re-run now and then (:meth:`LiveState.reclassify`, the caller chooses when: it costs ~ms per
thousand requests); a request that arrives in between is marked by the last detection's own
rule (:func:`kind_of`: the counters it used, else its latency threshold). When a re-run changes
the mark of a request already shown, :attr:`LiveState.epoch` goes up and a viewer redraws all.
At the end, :meth:`LiveState.finish` takes the marks of the picture itself (``detect_run``).

The data is never thinned: a frame carries every point a viewer has not seen yet (thinning
the *drawing* is the page's: one dot per pixel).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from client.analysis.cgroup import AT_QUOTA, coarse_usage, usage_notes, usage_per_period
from client.analysis.detect import Detection, ThrottleSource, detect
from client.data.metadata import RunMetadata
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample
from client.data.attribution import period_phase, throttled_stretches
from client.analysis.quotas import quota_spans
from cpuquota.limit import Limit

__all__ = ["FAILED", "KINDS", "OK", "THROTTLED", "LiveCounts", "LiveState", "kind_of"]

OK, THROTTLED, FAILED = 0, 1, 2
KINDS = ("ok", "throttled", "failed")   # a point's kind in a frame is its index here
DEFAULT_PERIOD_NS = 100_000_000


def kind_of(record: RequestRecord, detection: Detection | None) -> int:
    """A new request's mark by the rule the last ``detection`` used (none yet: not throttled)."""
    if not record.ok:
        return FAILED
    if detection is None:
        return OK
    source = detection.source
    if source is ThrottleSource.CGROUP:
        return THROTTLED if record.cgroup_nr_throttled else OK
    slow = (detection.threshold_ms is not None and source.uses_latency
            and record.latency_ms >= detection.threshold_ms)
    if source in (ThrottleSource.SERVER, ThrottleSource.SERVER_AND_LATENCY):
        return THROTTLED if record.counters_throttled or slow else OK
    return THROTTLED if slow else OK


@dataclass(frozen=True)
class LiveCounts:
    """The running numbers above the picture."""

    requests: int = 0
    failed: int = 0
    throttled: int = 0
    throttled_share: float | None = None   # of the successful requests, as the report's
    p50_ms: float | None = None
    p99_ms: float | None = None
    # what the marked requests are called: "delayed by throttling" when counters said so,
    # "slow" from latency alone (never "throttled" without a counter)
    marked_as: str = "slow"

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "failed": self.failed, "throttled": self.throttled,
                "throttled_share": self.throttled_share, "p50_ms": self.p50_ms,
                "p99_ms": self.p99_ms, "marked_as": self.marked_as}


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


@dataclass
class LiveState:
    """Everything the page shows, updated by one thread (the page server's)."""

    limit: Limit | None = None
    sequential: bool = True
    unlimited: bool = False
    title: str = ""
    records: list[RequestRecord] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    points: list[list[float]] = field(default_factory=list)   # [start s, latency ms, kind]
    epoch: int = 0                 # up by one when a point already given changed its kind
    detection: Detection | None = None
    cgroup: dict[str, Any] | None = None   # the group's panel (None: no group read)
    cgroup_version: int = 0
    counts: LiveCounts = field(default_factory=LiveCounts)
    end: dict[str, Any] | None = None      # the run is over: its files and final numbers

    @classmethod
    def of(cls, metadata: RunMetadata) -> LiveState:
        url = metadata.url or metadata.name
        return cls(limit=metadata.limit, sequential=metadata.sequential,
                   unlimited=metadata.limit is None and metadata.unlimited,
                   title=f"{url}  ·  {metadata.limit_description()}")

    def extend(self, records: Sequence[RequestRecord]) -> None:
        """New completed requests, in the order they completed."""
        for record in records:
            kind = kind_of(record, self.detection)
            self.records.append(record)
            self.kinds.append(kind)
            self.points.append([round(record.start_ns / 1e9, 4),
                                round(record.latency_ms, 3), kind])

    def reclassify(self, detection: Detection | None = None) -> None:
        """Mark every request again: by ``detection`` if given, else by detecting anew."""
        if detection is None:
            detection = detect(self.records, sequential=self.sequential, limit=self.limit,
                               unlimited=self.unlimited)
        self.detection = detection
        changed = False
        for i, record in enumerate(self.records):
            kind = FAILED if not record.ok else THROTTLED if detection.is_throttled(record) \
                else OK
            if kind != self.kinds[i]:
                self.kinds[i] = kind
                self.points[i][2] = kind
                changed = True
        if changed:
            self.epoch += 1

    def count(self) -> LiveCounts:
        """The running numbers over every request so far."""
        ok = [r.latency_ns for r in self.records if r.ok]
        throttled = sum(1 for k in self.kinds if k == THROTTLED)
        p50 = p99 = None
        if ok:
            p50, p99 = (float(v) / 1e6 for v in np.percentile(np.asarray(ok, float), [50, 99]))
        self.counts = LiveCounts(len(self.records), len(self.records) - len(ok), throttled,
                                 throttled / len(ok) if ok else None, _round(p50),
                                 _round(p99),
                                 self.detection.marked_as if self.detection else "slow")
        return self.counts

    def read_timeline(self, timeline: Sequence[CgroupSample],
                      window_s: float | None = None,
                      usage: Mapping[str, Any] | None = None) -> None:
        """The watched group's samples so far (only the last ``window_s`` seconds of them
        when given: a watch that goes on for hours): its throttled stretches and CPU per
        period. ``usage``: the run's ``cgroup.usage`` as the sampler knows it now (where the
        usage comes from, how fine, what cannot be known): the same rule as the report's
        (:func:`client.analysis.cgroup.cgroup_report`): a usage that cannot be known gives no
        periods, one too coarse per period gives them but counts none at the quota."""
        if window_s is not None and timeline:
            cut = timeline[-1].t_ns - round(window_s * 1e9)
            timeline = timeline[bisect.bisect_left(timeline, cut, key=lambda s: s.t_ns):]
        if len(timeline) < 2:
            return
        period_ns = self.limit.period_ns if self.limit else DEFAULT_PERIOD_NS
        phase = period_phase(timeline, period_ns) if self.limit else None
        _counter, resolution_ms, unknown = usage_notes(usage)
        periods = (usage_per_period(timeline, period_ns, phase, refills=True) if unknown is None
                   else [])
        # the quota in force now, as the samples read it (an in-place resize shows at once)
        spans = quota_spans(list(timeline))
        quota_ms = (self.limit.quota_ms if self.limit else None) if not spans else (
            spans[-1].quota_us / 1000 if spans[-1].quota_us else None)
        coarse = None if unknown is not None else coarse_usage(
            resolution_ms, round(quota_ms * 1e6) if quota_ms else None)
        at_quota = (None if unknown is not None or coarse is not None or not quota_ms else
                    sum(1 for p in periods if p.usage_ns >= AT_QUOTA * quota_ms * 1e6))
        self.cgroup = {
            "period_ms": period_ns / 1e6,
            "quota_ms": quota_ms,
            "quotas": [[round(q.start_ns / 1e9, 4), q.quota_us / 1000 if q.quota_us else None]
                       for q in spans] if len(spans) > 1 else [],
            "stretches": [[round(s / 1e9, 4), round(e / 1e9, 4)] for s, e in
                          throttled_stretches(timeline, period_ns if self.limit else None)],
            "periods": [[round(p.start_ns / 1e9, 4), round(p.usage_ns / 1e6, 2)]
                        for p in periods],
            # of them, how many used >= 90 % of the quota (None: not known, see below)
            "periods_at_quota": at_quota,
            "at_quota_share": AT_QUOTA,
            # why no CPU figure (the report's words), why none per period
            "usage_unknown": unknown,
            "per_period_unknown": unknown or coarse,
            "nr_throttled": timeline[-1].nr_throttled - timeline[0].nr_throttled,
            "nr_periods": timeline[-1].nr_periods - timeline[0].nr_periods,
            "window_s": window_s,
            "from_s": round(timeline[0].t_ns / 1e9, 4),
        }
        self.cgroup_version += 1

    def finish(self, detection: Detection, files: Sequence[str], *, interrupted: bool = False,
               picture: str | None = None) -> None:
        """The run is over: the picture's own marks, the final counts and the files' names
        (``picture``: the PNG as a data: URL, shown under the live drawing)."""
        self.reclassify(detection)
        self.epoch += 1          # every viewer redraws the final picture whole
        self.count()
        self.end = {"files": list(files), "interrupted": interrupted, "picture": picture,
                    "source": detection.source.value}

    def frame(self, cursor: int, epoch: int, cgroup_version: int) -> dict[str, Any]:
        """What a viewer that has the first ``cursor`` points of ``epoch`` (and the group's
        panel of ``cgroup_version``) needs: the points since (all of them after a change of
        epoch), the counts, the group's panel when it changed, the end when over."""
        reset = epoch != self.epoch
        start = 0 if reset else cursor
        out: dict[str, Any] = {"epoch": self.epoch, "reset": reset,
                               "points": self.points[start:], "counts": self.counts.to_dict(),
                               "cursor": len(self.points), "title": self.title}
        if self.cgroup is not None and cgroup_version != self.cgroup_version:
            out["cgroup"] = self.cgroup
            out["cgroup_version"] = self.cgroup_version
        if self.end is not None:
            out["end"] = self.end
        return out
