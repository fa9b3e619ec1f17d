"""A run's cgroup timeline: ``<name>.cgroup.csv`` beside its CSV, a sample of the watched
group's counters every few ms (``http-timing --cgroup``, ``client.run.cgroup_sampler``).

Columns ``t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns``: time since the run's start
(the clock the requests are timed with), the group's CPU usage and the ``cpu.stat`` counters
of the quota in force (the watched group's own, or an ancestor's: see the run's metadata
``cgroup.levels``), cumulative, in ns. Then, where they were read:

- ``pressure_some_ns,pressure_full_ns``: the group's ``cpu.pressure`` totals (PSI, cgroup v2;
  ``full`` empty when the kernel has no full line for cpu);
- ``level<k>_nr_periods,level<k>_nr_throttled,level<k>_throttled_ns`` for k = 1, 2...: the
  counters of the other groups above that hold a quota (the metadata's ``levels[k]``);
- ``quota_us,period_us`` and ``level<k>_quota_us,level<k>_period_us``: the quota each level's
  group held at that sample (``cpu.cfs_quota_us``/``cpu.cfs_period_us``, v2 ``cpu.max``;
  ``quota_us`` empty: none), so a run that spans a change of quota (``kubectl patch pod
  --subresource resize``, ``docker update --cpus``) says which quota was in force when.

Files without the later columns (written before they existed) read as before. Written a
flushed row at a time; read back with one-line errors.
"""

from __future__ import annotations

import csv
import os
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import IO, TypeVar, overload

import numpy as np

from client.data.folders import make_folder
from client.data.record import RawDataError

__all__ = ["PRESSURE_COLUMNS", "TIMELINE_COLUMNS", "CgroupSample", "LevelCounters",
           "QuotaSetting", "Rows", "TimelineError", "as_list", "columns_of", "level_timelines",
           "open_timeline", "read_timeline", "timeline_columns", "timeline_path", "timeline_row",
           "timeline_rows"]

TIMELINE_COLUMNS = ("t_ns", "usage_ns", "nr_periods", "nr_throttled", "throttled_ns")
PRESSURE_COLUMNS = ("pressure_some_ns", "pressure_full_ns")
_LEVEL_FIELDS = ("nr_periods", "nr_throttled", "throttled_ns")
_QUOTA_FIELDS = ("quota_us", "period_us")

LevelCounters = tuple[int, int, int]   # (nr_periods, nr_throttled, throttled_ns) of one level
QuotaSetting = tuple[int | None, int]  # (quota_us or None: no quota, period_us) of one level


T = TypeVar("T")


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
    pressure_some_ns: int | None = None   # cpu.pressure totals (None: not read, e.g. v1)
    pressure_full_ns: int | None = None
    levels: tuple[LevelCounters, ...] = ()   # the other quota levels' counters (level 1, 2...)
    quotas: tuple[QuotaSetting, ...] = ()    # each level's quota now (level 0 first); (): not read

    def at_level(self, index: int) -> CgroupSample:
        """This sample with quota level ``index``'s counters in place of level 0's."""
        if index == 0:
            return self
        periods, throttled, throttled_ns = self.levels[index - 1]
        return CgroupSample(self.t_ns, self.usage_ns, periods, throttled, throttled_ns,
                            self.pressure_some_ns, self.pressure_full_ns,
                            quotas=self.quotas[index:index + 1])


def level_timelines(samples: list[CgroupSample]) -> list[list[CgroupSample]]:
    """One timeline per quota level (level 0: the samples themselves), each with that level's
    counters in the usual fields, for the attribution."""
    count = 1 + (len(samples[0].levels) if samples else 0)
    return [samples] + [[s.at_level(k) for s in samples] for k in range(1, count)]


def timeline_columns(pressure: bool = False, levels: int = 0,
                     quotas: bool = False) -> tuple[str, ...]:
    """The header of a timeline with the pressure columns or not, ``levels`` more levels, and
    the quota columns (of level 0 and each more level) or not."""
    return (TIMELINE_COLUMNS + (PRESSURE_COLUMNS if pressure else ()) +
            tuple(f"level{k}_{f}" for k in range(1, levels + 1) for f in _LEVEL_FIELDS) +
            ((_QUOTA_FIELDS + tuple(f"level{k}_{f}" for k in range(1, levels + 1)
                                    for f in _QUOTA_FIELDS)) if quotas else ()))


def timeline_path(csv_path: Path) -> Path:
    """``raw-data/x.csv`` -> ``raw-data/x.cgroup.csv``."""
    return csv_path.with_name(csv_path.stem + ".cgroup.csv")


def open_timeline(path: Path, columns: tuple[str, ...] = TIMELINE_COLUMNS) -> IO[str]:
    """A new timeline file with its header (the caller appends ``timeline_row``s)."""
    make_folder(path.parent)
    out = open(path, "w", encoding="ascii", newline="")
    out.write(",".join(columns) + "\n")
    return out


def timeline_row(sample: CgroupSample, pressure: bool = False) -> str:
    """One line of the file whose header is ``timeline_columns(pressure, len(sample.levels))``."""
    fields: list[int | None] = [sample.t_ns, sample.usage_ns, sample.nr_periods,
                                sample.nr_throttled, sample.throttled_ns]
    if pressure:
        fields += [sample.pressure_some_ns, sample.pressure_full_ns]
    for level in sample.levels:
        fields += level
    for quota in sample.quotas:
        fields += quota
    return ",".join("" if v is None else str(v) for v in fields) + "\n"


def _layout(header: tuple[str, ...]) -> tuple[bool, int, bool] | None:
    """(pressure, levels, quotas) of a header this module writes; None for anything else."""
    if header[:len(TIMELINE_COLUMNS)] != TIMELINE_COLUMNS:
        return None
    pressure = header[len(TIMELINE_COLUMNS):][:2] == PRESSURE_COLUMNS
    quotas = "quota_us" in header
    rest = len(header) - len(TIMELINE_COLUMNS) - (2 if pressure else 0)
    levels = (rest - 2) // 5 if quotas else rest // 3   # 3 counters + 2 quota fields a level
    if header != timeline_columns(pressure, levels, quotas):
        return None
    return pressure, levels, quotas


def _quota(quota: str, period: str) -> QuotaSetting:
    return (int(quota) if quota.strip() else None), int(period)


# A frozen dataclass's __init__ sets each field through object.__setattr__: about 1.9 µs a
# sample against 0.5 µs with the slots' own setters, and ``cluster`` reads a million rows.
_new = object.__new__
(_set_t, _set_usage, _set_periods, _set_nr, _set_throttled, _set_some, _set_full, _set_levels,
 _set_quotas) = (getattr(CgroupSample, f.name).__set__ for f in dataclass_fields(CgroupSample))


def _plain(t_ns: int, usage_ns: int, nr_periods: int, nr_throttled: int, throttled_ns: int,
           quotas: tuple[QuotaSetting, ...] = ()) -> CgroupSample:
    """``CgroupSample(t_ns, usage_ns, nr_periods, nr_throttled, throttled_ns, quotas=quotas)``,
    the same frozen sample, built faster (see above)."""
    sample = _new(CgroupSample)
    _set_t(sample, t_ns)
    _set_usage(sample, usage_ns)
    _set_periods(sample, nr_periods)
    _set_nr(sample, nr_throttled)
    _set_throttled(sample, throttled_ns)
    _set_some(sample, None)
    _set_full(sample, None)
    _set_levels(sample, ())
    _set_quotas(sample, quotas)
    return sample


def _sample(row: list[str], pressure: bool, levels: int = 0,
            quotas: bool = False) -> CgroupSample:
    if not pressure and not levels and len(row) == (7 if quotas else 5):
        # the node agent's rows (and a one-level record's): a sample a line of them, read
        # without the general case's lists (a cluster reads hundreds of thousands)
        return _plain(int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4]),
                      (_quota(row[5], row[6]),) if quotas else ())
    t_ns, usage_ns, periods, throttled, throttled_ns = (int(v) for v in row[:5])
    some: int | None = None
    full: int | None = None
    rest = row[5:]
    if pressure:
        some, full = (int(v) if v.strip() else None for v in rest[:2])
        rest = rest[2:]
    values = [int(v) for v in rest[:3 * levels]]
    counters = tuple((values[i], values[i + 1], values[i + 2])
                     for i in range(0, len(values), 3))
    settings = rest[3 * levels:] if quotas else []
    read = tuple(_quota(settings[i], settings[i + 1]) for i in range(0, len(settings), 2))
    return CgroupSample(t_ns, usage_ns, periods, throttled, throttled_ns, some, full, counters,
                        read)


def read_timeline(path: str | os.PathLike[str]) -> list[CgroupSample]:
    """The samples of a ``<name>.cgroup.csv`` (``TimelineError`` in one line if unreadable)."""
    rows = timeline_rows(path)
    return rows.samples() if isinstance(rows, Rows) else rows


def timeline_rows(path: str | os.PathLike[str]) -> Rows | list[CgroupSample]:
    """:func:`read_timeline`'s samples; those of a five-column file (the node agent's) as
    :class:`Rows`, its numbers read at once and made samples only where read as such."""
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
    layout = _layout(tuple(h.strip() for h in header)) if header else None
    if header is None or layout is None:
        raise TimelineError(f"{p}: not a cgroup timeline (expected the header "
                            f"{','.join(TIMELINE_COLUMNS)}[,...])")
    samples: list[CgroupSample] = []
    if layout == (False, 0, False):   # the node agent's rows: five numbers, no quoting
        columns = _plain_columns(lines)
        if columns is not None:
            return Rows(columns)
    for line_no, row in enumerate(rows, start=2):
        if not row:
            continue
        try:
            if len(row) != len(header):
                raise ValueError(f"{len(row)} fields, expected {len(header)}")
            samples.append(_sample(row, *layout))
        except ValueError as exc:
            raise TimelineError(f"{p}: line {line_no}: {exc}") from None
    return samples


def _plain_columns(lines: list[str]) -> np.ndarray | None:
    """A five-column timeline's lines (its header first) as one int64 array, a row a line
    (blank lines skipped, as the CSV reader does); None where a line is not five integers
    that fit (empty, quoted, short, a float): the CSV reader then reads the file, and says
    which line is wrong."""
    body = lines[1:]
    if not any(body):
        return np.empty((0, len(TIMELINE_COLUMNS)), dtype=np.int64)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")   # numpy's word on a line it would bend
            columns = np.loadtxt(body, dtype=np.int64, delimiter=",", comments=None, ndmin=2)
    except (ValueError, OverflowError, Warning):
        return None
    return columns if columns.shape[1] == len(TIMELINE_COLUMNS) else None


class Rows(Sequence[CgroupSample]):
    """The samples of a five-column timeline (the node agent's rows), held as one int64 array
    (:attr:`columns`, a row a sample: ``TIMELINE_COLUMNS``, no pressure, level or quota),
    made :class:`CgroupSample` objects only when read as such (all at once, and kept):
    ``cluster`` reads a million rows, and judges an idle pod's window on the columns alone.
    A slice is the same kind; equal to a list of the same samples."""

    __slots__ = ("_made", "columns")

    def __init__(self, columns: np.ndarray) -> None:
        self.columns = columns
        self._made: list[CgroupSample] | None = None

    def __len__(self) -> int:
        return len(self.columns)

    @overload
    def __getitem__(self, index: int) -> CgroupSample: ...
    @overload
    def __getitem__(self, index: slice) -> Rows: ...

    def __getitem__(self, index: int | slice) -> CgroupSample | Rows:
        if isinstance(index, slice):
            part = Rows(self.columns[index])
            part._made = None if self._made is None else self._made[index]
            return part
        if self._made is not None:
            return self._made[index]
        return _plain(*self.columns[index].tolist())

    def __iter__(self) -> Iterator[CgroupSample]:
        return iter(self.samples())

    def samples(self) -> list[CgroupSample]:
        """The samples, made once."""
        if self._made is None:
            self._made = [_plain(*row) for row in self.columns.tolist()]
        return self._made

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rows):
            return np.array_equal(self.columns, other.columns)
        if isinstance(other, Sequence):
            return self.samples() == list(other)
        return NotImplemented

    __hash__ = None   # type: ignore[assignment]   # as a list's

    def __repr__(self) -> str:
        return f"Rows({len(self)} samples)"


def columns_of(timeline: Sequence[object]) -> np.ndarray | None:
    """The int64 array a :class:`Rows` holds (``TIMELINE_COLUMNS``); None for other samples."""
    return timeline.columns if isinstance(timeline, Rows) else None


def as_list(timeline: Sequence[T]) -> Sequence[T]:
    """A :class:`Rows`' samples as a list (made once), for a loop that indexes and slices
    them a row at a time; other samples as they are."""
    if isinstance(timeline, Rows):
        return timeline.samples()   # type: ignore[return-value]   # T is CgroupSample here
    return timeline
