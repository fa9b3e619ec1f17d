"""The quota in force over a run whose timeline carries each sample's quotas (pure): the spans
of one quota (:func:`quota_spans`), the limit each request ran under, and the run cut into
one part per quota (:func:`split_by_quota`) so that ``report`` and the model judge each
request by the quota in force when it was sent.

A sample's quota in force is the tightest of its levels' (the group's own, its pod's...); a
request belongs to the span in force at its start (a request sent just before a change and
answered after it is counted with the quota it was sent under; how many straddle a change is
said). A timeline without quota columns (written before they existed) has no spans: the
metadata's one quota holds for the whole run.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace
from typing import Any

from client.data.files import Run
from client.data.timeline import CgroupSample, QuotaSetting
from cpuquota.limit import Limit

__all__ = ["QuotaSpan", "in_force", "quota_spans", "split_by_quota"]


@dataclass(frozen=True)
class QuotaSpan:
    """From ``start_ns`` to ``end_ns`` (the timeline's clock: first and last sample that
    showed it) the quota in force was ``quota_us`` per ``period_us`` (None: no quota)."""

    start_ns: int
    end_ns: int
    quota_us: int | None
    period_us: int
    level: int          # which quota level held it (0: the metadata's levels[0])

    @property
    def cpus(self) -> float | None:
        return self.quota_us / self.period_us if self.quota_us and self.period_us else None

    def limit(self, burst_ms: float = 0.0) -> Limit | None:
        """The span's quota as a :class:`Limit` (its burst: ``burst_ms``, at most the quota)."""
        cpus = self.cpus
        if cpus is None:
            return None
        quota_ms = self.quota_us / 1000 if self.quota_us else 0.0
        return Limit(cpus, self.period_us / 1000, min(burst_ms, quota_ms), "cgroup")

    def describe(self) -> str:
        what = (f"{self.cpus:g} CPU ({self.quota_us} µs per {self.period_us} µs)"
                if self.cpus is not None else "no quota")
        return f"{what} from {self.start_ns / 1e9:.1f} s to {self.end_ns / 1e9:.1f} s"

    def to_dict(self) -> dict[str, Any]:
        return {"from_s": round(self.start_ns / 1e9, 3), "to_s": round(self.end_ns / 1e9, 3),
                "quota_us": self.quota_us, "period_us": self.period_us, "cpus": self.cpus,
                "level": self.level}


def in_force(quotas: tuple[QuotaSetting, ...]) -> tuple[int, QuotaSetting] | None:
    """(level, setting) of the tightest quota of a sample's levels; the first level's setting
    when none holds a quota; None when the sample carries no quotas."""
    if not quotas:
        return None
    held = [(q / p, k) for k, (q, p) in enumerate(quotas) if q is not None and p]
    if not held:
        return 0, quotas[0]
    _, level = min(held)
    return level, quotas[level]


def quota_spans(timeline: list[CgroupSample]) -> list[QuotaSpan]:
    """The spans of one quota in force, in time order ([] when the samples carry none)."""
    spans: list[QuotaSpan] = []
    for sample in timeline:
        found = in_force(sample.quotas)
        if found is None:
            continue
        level, (quota, period) = found
        last = spans[-1] if spans else None
        if last is not None and (last.quota_us, last.period_us) == (quota, period):
            spans[-1] = replace(last, end_ns=sample.t_ns)
        else:
            spans.append(QuotaSpan(sample.t_ns, sample.t_ns, quota, period, level))
    return spans


def split_by_quota(run: Run) -> list[tuple[QuotaSpan, Run, int]]:
    """The run cut at each change of quota: (span, the run of the requests sent while it was
    in force, how many of them were answered after the next change). One part when the quota
    never changed; [] when the timeline carries no quotas."""
    spans = quota_spans(run.timeline or [])
    if not spans:
        return []
    # a change happened between a span's last sample and the next one's first: cut halfway
    cuts = [(a.end_ns + b.start_ns) // 2 for a, b in zip(spans, spans[1:])]
    parts: list[list] = [[] for _ in spans]
    for record in run.records:
        parts[bisect_right(cuts, record.start_ns)].append(record)
    out = []
    timeline = run.timeline or []
    for index, (span, records) in enumerate(zip(spans, parts)):
        if not records:
            continue
        straddle = (sum(1 for r in records if r.end_ns > cuts[index])
                    if index < len(cuts) else 0)
        lo = min(span.start_ns, min(r.start_ns for r in records))
        hi = max(span.end_ns, max(r.end_ns for r in records))
        out.append((span, replace(run, records=records, timeline=_window(timeline, lo, hi)),
                    straddle))
    return out


def _window(timeline: list[CgroupSample], lo: int, hi: int) -> list[CgroupSample]:
    """The samples from the last at or before ``lo`` to the first at or after ``hi``."""
    times = [s.t_ns for s in timeline]
    first = max(0, bisect_right(times, lo) - 1)
    last = min(len(timeline), bisect_left(times, hi) + 1)
    return timeline[first:last]
