"""A run's cgroup timeline: ``<name>.cgroup.csv`` beside its CSV, a sample of the watched
group's counters every few ms (``http-timing --cgroup``, ``client.run.cgroup_sampler``).

Columns ``t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns``: time since the run's start
(the clock the requests are timed with), the group's CPU usage and ``cpu.stat`` counters,
cumulative, in ns. Written a flushed row at a time; read back with one-line errors.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from client.data.record import RawDataError

__all__ = ["TIMELINE_COLUMNS", "CgroupSample", "TimelineError", "open_timeline",
           "read_timeline", "timeline_path", "timeline_row"]

TIMELINE_COLUMNS = ("t_ns", "usage_ns", "nr_periods", "nr_throttled", "throttled_ns")


class TimelineError(RawDataError):
    """A cgroup timeline file that cannot be read; one line naming the file and why."""


@dataclass(frozen=True, slots=True)
class CgroupSample:
    """The group's counters at ``t_ns`` (since the run's start, ``perf_counter_ns`` clock)."""

    t_ns: int
    usage_ns: int        # CPU the group has used (cumulative)
    nr_periods: int
    nr_throttled: int
    throttled_ns: int    # cumulative; v2's µs are converted


def timeline_path(csv_path: Path) -> Path:
    """``raw-data/x.csv`` -> ``raw-data/x.cgroup.csv``."""
    return csv_path.with_name(csv_path.stem + ".cgroup.csv")


def open_timeline(path: Path) -> IO[str]:
    """A new timeline file with its header (the caller appends ``timeline_row``s)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = open(path, "w", encoding="ascii", newline="")
    out.write(",".join(TIMELINE_COLUMNS) + "\n")
    return out


def timeline_row(sample: CgroupSample) -> str:
    return (f"{sample.t_ns},{sample.usage_ns},{sample.nr_periods},{sample.nr_throttled},"
            f"{sample.throttled_ns}\n")


def read_timeline(path: str | os.PathLike[str]) -> list[CgroupSample]:
    """The samples of a ``<name>.cgroup.csv`` (``TimelineError`` in one line if unreadable)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="ascii")
    except FileNotFoundError:
        raise TimelineError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TimelineError(f"{p}: is a directory, not a cgroup timeline") from None
    except UnicodeDecodeError:
        raise TimelineError(f"{p}: not a text file (expected a cgroup timeline CSV)") from None
    except OSError as exc:
        raise TimelineError(f"{p}: cannot read: {exc.strerror or exc}") from None
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()   # a last row cut off by a kill (the recorder writes whole rows)
    rows = csv.reader(lines)
    header = next(rows, None)
    if header is None or tuple(h.strip() for h in header) != TIMELINE_COLUMNS:
        raise TimelineError(f"{p}: not a cgroup timeline (expected the header "
                            f"{','.join(TIMELINE_COLUMNS)})")
    samples: list[CgroupSample] = []
    for line_no, row in enumerate(rows, start=2):
        if not row:
            continue
        try:
            if len(row) != len(TIMELINE_COLUMNS):
                raise ValueError(f"{len(row)} fields, expected {len(TIMELINE_COLUMNS)}")
            samples.append(CgroupSample(*(int(v) for v in row)))
        except ValueError as exc:
            raise TimelineError(f"{p}: line {line_no}: {exc}") from None
    return samples
