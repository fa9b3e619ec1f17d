"""A run attached to a service's own cgroup (``http-timing --cgroup TARGET``): which request
was throttled, for any service, from the kernel's counters.

While the run goes, a :class:`client.run.cgroup_sampler.CgroupSampler` writes the group's
timeline (``<name>.cgroup.csv``, from the run's first instant). Each request gets
``cgroup_throttled_ns`` and ``cgroup_nr_throttled``:

- **sequential**: the exact change of the group's ``cpu.stat`` across the request, read just
  before it is sent and just after it is read (:class:`ProbingSender`): outside its latency;
- **concurrent / open loop**: the throttled time the timeline shows inside the request
  (``client.data.attribution``: a throttle is laid back from the boundary that ended it), filled
  in once the run is over (the CSV is rewritten whole). Overlapping requests share the blame.

When more than one group above the service holds a quota (``ServiceGroup.levels``: a
container's and its pod's), each is sampled and a request is marked by the level that
throttled it most.

Each request also gets ``cgroup_held_ns``, the wall time it was held by the throttling (the
throttled time is summed over CPUs): the probe's change capped at the latency for a sequential
run, else the overlap with the timeline's throttled stretches (``client.data.attribution.held``).
A group with no quota on itself or above counts no throttling: its requests get no
throttling columns at all (empty), not a 0 that would read as "not throttled, the kernel said".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from client.data.record import RequestRecord
from client.data.timeline import CgroupSample, level_timelines, timeline_path
from client.data.attribution import attribute_levels, beyond_own, held
from client.run.cgroup_sampler import DEFAULT_INTERVAL, CgroupSampler, open_reader
from client.run.service_group import ServiceGroup
from client.run.http import Sender

__all__ = ["CgroupAttachment", "ProbingSender", "mark_records"]


class ProbingSender:
    """A sender that reads the group's counters just before and just after each request
    (outside the timed part) and puts their change into the record."""

    def __init__(self, inner: Sender, target: ServiceGroup) -> None:
        self.inner, self.reader = inner, open_reader(target)
        self.limited = bool(target.levels)

    def send(self, seq: int, run_start_ns: int, scheduled_ns: int | None = None) -> RequestRecord:
        before = self.reader.read(run_start_ns)
        record = self.inner.send(seq, run_start_ns, scheduled_ns)
        after = self.reader.read(run_start_ns)
        changes = [(a[2] - b[2], a[1] - b[1]) for b, a in zip(
            [(0, before.nr_throttled, before.throttled_ns), *before.levels],
            [(0, after.nr_throttled, after.throttled_ns), *after.levels])]
        if not self.limited:   # no quota: the counters stand still, they say nothing
            return record
        record.cgroup_throttled_ns, record.cgroup_nr_throttled = max(changes)
        # wall time: on one CPU the throttled time is it; summed over several, at most it
        record.cgroup_held_ns = min(record.cgroup_throttled_ns, record.latency_ns)
        return record

    def close(self) -> None:
        self.inner.close()
        self.reader.close()


class CgroupAttachment:
    """The sampler of one run, and what it does to the run's senders and records."""

    def __init__(self, target: ServiceGroup, csv_path: Path,
                 interval: float = DEFAULT_INTERVAL) -> None:
        self.target = target
        self.path = timeline_path(csv_path)
        self.sampler = CgroupSampler(target, self.path, interval)
        self.run_start_ns = 0

    def start(self, run_start_ns: int) -> None:
        """At the run's first instant (its clock's origin): the first sample, then the thread."""
        self.run_start_ns = run_start_ns
        self.sampler.start(run_start_ns)

    def probe(self, sender: Sender) -> Sender:
        """For a sequential run: exact readings around each request."""
        return ProbingSender(sender, self.target)

    def stop(self) -> list[CgroupSample]:
        return self.sampler.stop()

    def attribute(self, records: Sequence[RequestRecord]) -> list[RequestRecord]:
        """The records with the throttling the timeline shows inside each (sent to answered)."""
        if not self.target.levels:   # no quota on the group or above: nothing to mark
            return list(records)
        periods = [level.limit.period_ns for level in self.target.levels]
        return mark_records(records, self.sampler.samples, periods)


def mark_records(records: Sequence[RequestRecord], timeline: Sequence[CgroupSample],
                 periods_ns: Sequence[int | None], *, outside: bool = True,
                 own_ns: Sequence[int | None] | None = None) -> list[RequestRecord]:
    """The records with the throttling the timeline shows inside each (sent to answered):
    what a live ``--cgroup`` run does once it is over, and what ``http-timing import`` does
    to another tool's requests. Each quota level of the timeline (the group's own and its
    ancestors') is read apart with its period (``periods_ns[k]``; the last one stands for the
    levels beyond the list, None: unknown) and a request is marked by the level that
    throttled it most. ``outside`` False: a request not wholly inside the timeline is left
    unmarked (None: unknown), not marked 0. ``own_ns`` (each request's own time, when
    given): no request is held longer than its latency less it
    (``client.data.attribution.beyond_own``), its throttled time cut with its hold."""
    spans = [(r.start_ns, r.end_ns) for r in records]
    timelines = level_timelines(list(timeline))
    periods = list(periods_ns) or [None]
    periods += [periods[-1]] * (len(timelines) - len(periods))
    marks = attribute_levels(spans, timelines, periods)
    walls = held(spans, timelines, periods)
    if own_ns is not None:
        capped = [beyond_own(w, r.latency_ns, own) for r, w, own in zip(records, walls, own_ns)]
        marks = [(0, 0, level) if not c else (round(ns * c / w) if w else ns, nr, level)
                 for (ns, nr, level), c, w in zip(marks, capped, walls)]
        walls = capped
    first, last = (timeline[0].t_ns, timeline[-1].t_ns) if timeline else (0, -1)
    return [replace(r, cgroup_throttled_ns=ns, cgroup_nr_throttled=nr, cgroup_held_ns=wall)
            if outside or first <= r.start_ns and r.end_ns <= last else
            replace(r, cgroup_throttled_ns=None, cgroup_nr_throttled=None, cgroup_held_ns=None)
            for r, (ns, nr, _level), wall in zip(records, marks, walls)]
