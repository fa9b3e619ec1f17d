"""The replay's inputs, read from their files: a recorded timeline (and its requests) ready to
replay (:func:`load_replay`), as a limit advise and sweep run (:func:`replayed_limit`), and the
figures ``predict --timeline`` and ``advise --passive`` say about the window
(:func:`replay_answer`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from client.advise.replayed_limit import ReplayedLimit
from client.analysis.clock import align_records
from client.analysis.replay import (Demand, LimitRow, ReplayError, Request, demand_of,
                                    in_flight, load_of)
from client.data.record import RawDataError
from client.data.summary import percentile
from client.run.replay_input import Placed, Recording, read_recording, read_requests

__all__ = ["MS", "ReplayInputs", "aligned", "load_replay", "replay_answer", "replay_says", "replayed_limit",
           "requests_of"]

MS = 1_000_000


def replay_says(demand: Demand) -> str:
    """How sure a replay of ``demand`` is, in one line."""
    if demand.throttled_wall_ns <= 0:
        return "exact in the model's terms (the record was not throttled)"
    said = (f"estimated: {100 * demand.throttled_fraction:.0f} % of the window was throttled "
            f"in the record ({demand.hidden_ns / MS:.0f} ms of CPU the group wanted then is "
            "taken from the throttled time)")
    if demand.coarse:
        said += (f"; its rows are {demand.resolution_ns / MS:.0f} ms apart (periods of "
                 f"{demand.period_ns / MS:g} ms), so where each throttle lay in its row is not "
                 "known: a request a throttle may have held runs its CPU (the server's own, "
                 "scaled to the rows', when the requests carry it; else its share of the rows' "
                 "by overlap)")
    return said


def requests_of(placed: Placed) -> list[Request]:
    """The placed requests as the replay takes them."""
    return [Request(r.start_ns, r.latency_ns, h, r.server_cpu_ns)
            for r, h in zip(placed.records, placed.held_ns)]


def _loop(demand: Demand, placed: Placed) -> str:
    """How the replay sends the requests, and where that comes from, in one phrase: the
    run's JSON or the file says (``Placed.shape``), the requests show it (inferred), or
    nothing does ("concurrency not known": each at its recorded time)."""
    lanes = load_of(demand, requests_of(placed), placed.closed).lanes
    shape = placed.shape
    if lanes:
        said = (f"closed loop of {'one (one after another)' if lanes == 1 else lanes}: each "
                "sent its recorded gap after the one before it ended")
    else:
        said = "open loop: each sent at its recorded time"
    if shape is None:   # nothing says: the replay read the gaps
        where = ("inferred: read from the gaps between them (the file does not say)" if lanes
                 else "concurrency not known: the file does not say and the gaps do not show "
                 "one")
    elif shape.source in ("said", "column", "format"):
        where = f"from {placed.shape_from}: {shape.why}"
        if lanes and shape.connections and shape.connections != lanes:
            where += f"; the requests run in {'one lane' if lanes == 1 else f'{lanes} lanes'}"
    elif shape.source == "inferred":
        where = shape.why
    else:
        where = f"concurrency not known: {shape.why}"
    return f"{said} ({where})"


def _cpu(demand: Demand, placed: Placed) -> dict[str, Any] | None:
    """What the replay took each request's CPU to be, where the record hid some of it (None:
    the record was not throttled, or the requests carry their own CPU)."""
    drawn = load_of(demand, requests_of(placed), placed.closed).drawn
    return None if drawn is None else drawn.to_dict()


@dataclass(frozen=True)
class ReplayInputs:
    """What a replay is made of: the recording, its period, its demand, its requests."""

    recording: Recording
    period_ns: int                 # the replay's (--period-ms, else the record's)
    demand: Demand
    placed: Placed | None          # the requests as placed on the timeline (None: none given)
    requests: list[Request] | None
    clock: dict[str, Any] | None = None   # a relative file's clock check (:func:`aligned`)

    @property
    def closed(self) -> bool | None:
        """Whether the requests were sent in a closed loop, when their file says."""
        return None if self.placed is None else self.placed.closed


def aligned(path: Path, recording: Recording, placed: Placed, start_epoch_ns: int | None,
            align: bool) -> tuple[Placed, dict[str, Any] | None]:
    """Another tool's file lined up with the throttling as ``import`` lines it up
    (``client.analysis.clock.align_records``): relative times (hey, oha) placed by
    ``--start``, searched near it; Unix times (a clock that may be off the host's: another
    machine's, a container's) searched a few ms either way, or moved by an unambiguous
    line-up. The shift is applied
    where it fits clearly better than the stated clock; ``align`` False (``--no-align``)
    keeps the stated clock. And what was done (None: an http-timing run, on the host's
    clock)."""
    if not placed.relative and not placed.foreign:
        return placed, None
    stated = "the stated clock (--start)" if placed.relative else "the file's own clock"
    if not align:
        return placed, {"shift_s": 0.0, "applied": False,
                        "says": f"{stated}, not aligned: --no-align"}
    alignment = align_records(placed.records, recording.samples, recording.period_ns,
                              placed.relative)
    if alignment is None:
        return placed, {"shift_s": 0.0, "applied": False,
                        "says": f"{stated}: too few requests or no throttling to line them "
                        "up with"}
    if not alignment.applied:
        why = ("the stated clock fits best" if abs(alignment.shift_ns) < MS else
               alignment.refused())
        return placed, {"shift_s": 0.0, "applied": False, "says": f"{stated}: {why}"}
    moved = read_requests(path, recording, start_epoch_ns, alignment.shift_ns)
    to = "applied to --start" if placed.relative else "applied to the file's times"
    return moved, {"shift_s": alignment.shift_ns / 1e9, "applied": True,
                   "says": f"aligned: a shift of {alignment.describe()}{alignment.aside}, "
                   f"{to} (--no-align keeps the stated clock)"}


def load_replay(timeline: Path, requests_from: Path | None, period_ms: float | None,
                start_epoch_ns: int | None = None, align: bool = True) -> ReplayInputs:
    """The timeline at ``timeline`` and the requests of ``requests_from``, ready to replay
    (a relative file's by ``start_epoch_ns``, lined up with the throttling unless ``align``
    is False: :func:`aligned`); a file the replay cannot use is a one-line
    ``RawDataError``."""
    recording = read_recording(timeline)
    period_ns = round(period_ms * MS) if period_ms else recording.period_ns
    try:
        demand = demand_of(recording.samples, recording.period_ns)
    except ReplayError as exc:
        raise RawDataError(f"{timeline}: {exc}") from None
    placed, clock = None, None
    if requests_from is not None:
        placed, clock = aligned(requests_from, recording,
                                read_requests(requests_from, recording, start_epoch_ns),
                                start_epoch_ns, align)
    requests = None if placed is None else requests_of(placed)
    if requests and demand.throttled_wall_ns > 0:
        # the quota capped the rate the group was seen to run at: the CPUs it could use at
        # once are the requests it had in flight, at most the machine's
        most = min(os.cpu_count() or 1, in_flight(requests))
        if most > demand.cores:
            demand = demand_of(recording.samples, recording.period_ns, most)
    if placed is not None and placed.partial:
        demand = replace(demand, partial=placed.partial)
    return ReplayInputs(recording, period_ns, demand, placed, requests, clock)


def replayed_limit(replayed: ReplayInputs, requests_from: Path) -> ReplayedLimit:
    """The replay of ``replayed`` (its requests given) as a limit advise and sweep run."""
    assert replayed.placed is not None and replayed.requests is not None
    return ReplayedLimit(replayed.recording.path, requests_from, replayed.demand,
                         tuple(replayed.requests),
                         tuple(r.status for r in replayed.placed.records), replayed.closed,
                         replay_says(replayed.demand))


def replay_answer(recording: Recording, demand: Demand, rows: list[LimitRow],
                  placed: Placed | None, requests_file: Path | None,
                  clock: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures ``--json`` prints and the text shows (``clock``: a relative file's clock
    check, :func:`aligned`)."""
    first = recording.samples[0]
    quota = any(c is not None for c in recording.limits)   # none: no throttling is claimed
    return {
        "timeline": str(recording.path),
        "window": {"start_s": first.t_ns / 1e9, "seconds": demand.window_ns / 1e9,
                   "periods": demand.window_ns // demand.period_ns,
                   "period_ms": demand.period_ns / MS, "period_source": recording.period_source,
                   "started_at": recording.meta.started_at if recording.meta else None},
        "recorded": {"cpus": list(recording.limits),
                     "periods": demand.recorded.nr_periods if quota else None,
                     "periods_throttled": demand.recorded.nr_throttled if quota else None,
                     "throttled_ms": demand.recorded.throttled_ns / MS if quota else None,
                     "cpu_used_s": demand.usage_ns / 1e9, "source": "the timeline's cpu.stat"},
        "demand": {"exact": demand.throttled_wall_ns <= 0,
                   "throttled_fraction": demand.throttled_fraction,
                   "estimated_ms": demand.hidden_ns / MS, "cores": demand.cores,
                   "rows_ms": demand.resolution_ns / MS, "coarse_rows": demand.coarse,
                   "says": replay_says(demand)},
        "requests": None if placed is None or requests_file is None else {
            "file": str(requests_file), "count": len(placed.records),
            "outside_window": placed.outside, "failed": placed.failed, "placed": placed.how,
            "loop": _loop(demand, placed),
            "cpu": _cpu(demand, placed), "clock": clock,
            "delayed_by_throttling": sum(1 for h in placed.held_ns if h > 0),
            "measured": {f"p{q}_ms": percentile([r.latency_ns / MS for r in placed.records], q)
                         for q in (50, 90, 99)}},
        "limits": [row.to_dict() for row in rows],
    }
