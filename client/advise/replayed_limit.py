"""A replayed limit: the replay of a recorded window (:mod:`client.analysis.replay`) behind
the seam ``sweep`` runs its limits through (:class:`client.run.at_limit.AtLimit`).

No request is sent. :meth:`ReplayedLimit.measure` replays the recorded requests at the limit
and saves what the replay predicts as a run (``<data-dir>/<name>.csv`` and ``.json``), so
``report``, ``plot`` and ``compare`` read a prediction as they read a run. Its JSON says so
under ``predicted`` (the timeline, the requests, the limit replayed, the periods the replay
throttled, how sure it is) and names no limit in force and no counter: no figure of a
predicted run is the kernel's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

from client import __version__
from client.analysis.replay import Demand, LimitRow, Load, Request, load_of, replay_load
from client.data.files import Run, write_metadata, write_rows
from client.data.folders import make_folder
from client.data.metadata import LoadMode, RunMetadata, SweepInfo
from client.data.naming import limit_text
from client.data.record import RequestRecord
from client.data.summary import summarize
from client.run.at_limit import AtLimit
from client.run.measure import Measurement, Progress
from client.run.plan import LoadPlan
from client.run.record import RecordedRun
from client.run.recorder import RunOutcome
from cpuquota.limit import Limit

__all__ = ["PREDICTED_KEY", "ReplayedLimit"]

PREDICTED_KEY = "predicted"   # the run's JSON key that marks a prediction
MS = 1_000_000


@dataclass(frozen=True)
class ReplayedLimit(AtLimit):
    """The recorded ``requests`` of ``requests_from`` replayed on ``timeline``'s ``demand``
    at each limit; ``statuses`` are theirs, in the same order; ``says``: how sure the replay
    is (exact, or estimated and why)."""

    timeline: Path
    requests_from: Path
    demand: Demand
    requests: tuple[Request, ...]
    statuses: tuple[int, ...]
    closed: bool | None
    says: str
    url: str = ""
    _rows: dict[Limit | None, LimitRow] = field(default_factory=dict, init=False,
                                                repr=False, compare=False)

    @cached_property
    def load(self) -> Load:
        """The requests as the replay runs them (one closed loop or open loop for all)."""
        return load_of(self.demand, self.requests, self.closed)

    @property
    def name(self) -> str:
        return "replay"

    def plan(self) -> LoadPlan:
        """The load as recorded: one at a time, C at a time, or an open loop at its mean rate
        over its requests' span."""
        n = len(self.requests)
        lanes = self.load.lanes
        if lanes == 1:
            return LoadPlan(LoadMode.SEQUENTIAL, n)
        if lanes > 1:
            return LoadPlan(LoadMode.CLOSED_LOOP, n, lanes)
        starts = [r.start_ns for r in self.requests]
        span_s = max(1e-9, (max(starts) - min(starts)) / 1e9)
        return LoadPlan(LoadMode.OPEN_LOOP, n, 1, round((n - 1) / span_s, 1) if n > 1 else 1.0,
                        round(span_s, 1))

    @property
    def description(self) -> str:
        return f"the replay of {self.timeline} (client.analysis.replay): predicted, not measured"

    @property
    def sends(self) -> str:
        return f"the {len(self.requests)} requests of {self.requests_from}, replayed"

    def ceiling(self, shape: Callable[[int], Limit]) -> tuple[int, str]:
        cores = self.demand.cores
        return cores * 1000, f"the record's {cores} CPU{'s' if cores > 1 else ''}"

    def row(self, limit: Limit | None) -> LimitRow:
        """The replay at ``limit`` (its period and burst; None: no limit), as ``predict
        --timeline`` gives it: each request's predicted latency and send time; replayed once
        per limit (it is deterministic)."""
        if limit not in self._rows:
            period_ns = self.demand.period_ns if limit is None else round(limit.period_ms * MS)
            burst_ns = 0 if limit is None else round(limit.burst_ms * MS)
            self._rows[limit] = LimitRow(*replay_load(
                self.demand, self.load, None if limit is None else limit.cpus, burst_ns,
                period_ns))
        return self._rows[limit]

    def measure(self, limit: Limit | None, *, name: str, plan: LoadPlan, data_dir: Path,
                sweep: SweepInfo | None = None, index: int = 1,
                progress: Progress | None = None,
                observers: Sequence[Callable[[RequestRecord], None]] = (),
                sample_usage: bool = False, on_target: Callable[[str], None] | None = None,
                on_recorded: Callable[[Measurement], None] | None = None) -> Measurement:
        """The requests replayed at ``limit`` (its period and burst), saved as the run
        ``data_dir/name``; ``plan`` is not used: the load is the record's."""
        if on_target is not None:
            on_target(f"{len(self.requests)} requests replayed on {self.timeline}")
        row = self.row(limit)
        replayed = row.replayed
        # the jobs are the requests sorted by start (load_of): their statuses in that order
        order = sorted(range(len(self.requests)), key=lambda i: self.requests[i].start_ns)
        predicted = sorted(zip(row.sent_ns or (), row.latencies_ns or (),
                               (self.statuses[i] for i in order)))
        records = [RequestRecord(seq, sent - self.demand.start_ns, latency, status)
                   for seq, (sent, latency, status) in enumerate(predicted, start=1)]
        make_folder(data_dir)
        path = data_dir / f"{name}.csv"
        for record in records:
            for observe in observers:
                observe(record)
        write_rows(path, records)
        metadata = self._metadata(name, limit, self.load.lanes, records, replayed.stats.nr_periods,
                                  replayed.stats.nr_throttled, replayed.throttled_ns, sweep)
        meta_path = path.with_suffix(".json")
        write_metadata(meta_path, metadata)
        measured = Measurement(RecordedRun(Run(path, records, metadata),
                                           RunOutcome(records), meta_path=meta_path))
        if on_recorded is not None:
            on_recorded(measured)
        return measured

    def _metadata(self, name: str, limit: Limit | None, lanes: int,
                  records: Sequence[RequestRecord], periods: int, throttled: int,
                  throttled_ns: int, sweep: SweepInfo | None) -> RunMetadata:
        mode = (LoadMode.OPEN_LOOP if lanes == 0 else
                LoadMode.SEQUENTIAL if lanes == 1 else LoadMode.CLOSED_LOOP)
        predicted: dict[str, Any] = {
            "by": "client.analysis.replay", "timeline": str(self.timeline),
            "requests_from": str(self.requests_from),
            "cpus": None if limit is None else limit.cpus,
            "period_ms": self.demand.period_ns / MS if limit is None else limit.period_ms,
            "burst_ms": 0.0 if limit is None else limit.burst_ms,
            "periods": periods, "periods_throttled": throttled,
            "throttled_ms": throttled_ns / MS, "says": self.says,
            "loop": ("open" if lanes == 0 else f"closed, {lanes} at a time")}
        return RunMetadata(
            name=name, version=__version__, url=self.url, mode=mode, requests=len(records),
            concurrency=max(1, lanes), started_at=datetime.now(timezone.utc).isoformat(),
            completed=len(records), summary=summarize(records),
            ended_at=datetime.now(timezone.utc).isoformat(), sweep=sweep,
            extra={PREDICTED_KEY: predicted, "limit": limit_text(limit) + " (replayed)"})
