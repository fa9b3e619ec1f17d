"""Who spent the quota: the CPU of a watched group's threads, by name (``<name>.threads.csv``
beside the run's ``<name>.cgroup.csv``, written by ``client.run.cgroup_sampler``).

Columns ``t_ns,name,cpu_ns``: the time of a reading of the group's threads (since the run's
start, the timeline's clock), a thread name folded (:func:`fold_name`) and the CPU the
threads of that name have used since the first reading (ns, cumulative). A reading writes a
``(total)`` row first (all its threads), then a row per name whose figure changed: a name
keeps its figure until its next row. A row ``(not seen)`` with an empty ``cpu_ns`` says in
its name why threads could not be read (``(not seen) no permission to read /proc/1/task``).
A row ``(as their process) NAME`` holds in ``cpu_ns`` how many live threads bear the name of
their process, ``NAME``, at that reading (written when it changes; kept until then): threads
nobody named at the OS level (``prctl(PR_SET_NAME)``) all read as their process.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from client.data.folders import make_folder
from client.data.timeline import TimelineError

__all__ = ["AS_PROCESS", "ENDED", "NOT_SEEN", "THREADS_COLUMNS", "TOTAL", "RunThreads",
           "ThreadReading", "ThreadsFile", "fold_name", "read_run_threads", "read_threads",
           "threads_path"]

THREADS_COLUMNS = ("t_ns", "name", "cpu_ns")
TOTAL = "(total)"
NOT_SEEN = "(not seen)"
AS_PROCESS = "(as their process) "   # + the process's folded name; cpu_ns: threads bearing it
ENDED = " (ended threads)"   # appended to a process's command name

# a trailing number after a separator or a word ("GC Thread#3", "exec-12", "CompilerThread0")
_NUMBERED = re.compile(r"^(.*?[^\d])\d+$")
# ... but not a program's version ("python3", "python3.11", "php8")
_VERSIONED = re.compile(r"^(python|pypy|perl|php|ruby|lua|java|node|bash|sh)[\d.]*$")
# ... nor a number of a dotted one: an address or a version the kernel cut ("ajp-nio-0.0.0.0")
_DOTTED = re.compile(r"\d\.\d+$")


def fold_name(name: str) -> str:
    """One name for numbered threads: ``GC Thread#7`` -> ``GC Thread#N``,
    ``http-nio-8080-exec-12`` -> ``http-nio-8080-exec-N``; ``python3`` stays.

    The kernel keeps 15 bytes of a name (``comm``): ``C2 CompilerThread1`` is read as
    ``C2 CompilerThre`` and every thread of the compiler shares it, as ``http-nio-8080-e``
    holds the connector's ``exec`` threads; those stay as read. A cut through a counter
    (``pool-1-thread-12`` read as ``pool-1-thread-1``) folds like the whole name."""
    name = "".join(c if c.isprintable() else "?" for c in name)
    if _VERSIONED.match(name) or _DOTTED.search(name):
        return name
    match = _NUMBERED.match(name)
    return f"{match.group(1)}N" if match else name


@dataclass
class ThreadReading:
    """The group's threads at ``t_ns``: cumulative CPU per folded name and in all."""

    t_ns: int
    total_ns: int = 0
    cpu_ns: dict[str, int] = field(default_factory=dict)
    # live threads bearing their process's own (folded) name, by that name
    as_process: dict[str, int] = field(default_factory=dict)


def threads_path(path: Path) -> Path:
    """``raw-data/x.csv`` or ``raw-data/x.cgroup.csv`` -> ``raw-data/x.threads.csv``."""
    stem = path.name[:-len(".cgroup.csv")] if path.name.endswith(".cgroup.csv") else path.stem
    return path.with_name(stem + ".threads.csv")


class ThreadsFile:
    """Appends readings to a threads file, a changed name's row at a time."""

    def __init__(self, path: Path) -> None:
        make_folder(path.parent)
        self.path = path
        self._file: IO[str] = open(path, "w", encoding="utf-8", newline="")
        self._file.write(",".join(THREADS_COLUMNS) + "\n")
        self._last: dict[str, int] = {}
        self._last_as_process: dict[str, int] = {}
        self._line = io.StringIO()
        self._csv = csv.writer(self._line, lineterminator="\n")

    def write(self, reading: ThreadReading) -> int:
        """The reading's rows (its changed names); returns the bytes written."""
        self._line.seek(0)
        self._line.truncate()
        self._csv.writerow((reading.t_ns, TOTAL, reading.total_ns))
        for name, ns in reading.cpu_ns.items():
            if self._last.get(name) != ns:
                self._csv.writerow((reading.t_ns, name, ns))
                self._last[name] = ns
        for name in self._last_as_process.keys() | reading.as_process.keys():
            count = reading.as_process.get(name, 0)
            if self._last_as_process.get(name, 0) != count:
                self._csv.writerow((reading.t_ns, AS_PROCESS + name, count))
                self._last_as_process[name] = count
        text = self._line.getvalue()
        self._file.write(text)
        return len(text)

    def not_seen(self, t_ns: int, reason: str) -> None:
        """A row saying why the threads could not be read (from then on)."""
        self._line.seek(0)
        self._line.truncate()
        self._csv.writerow((t_ns, f"{NOT_SEEN} {' '.join(reason.split())}", ""))
        self._file.write(self._line.getvalue())

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()


def read_threads(path: Path) -> tuple[list[ThreadReading], list[str]]:
    """The readings of a threads file and the reasons it gives for threads not seen
    (``TimelineError`` in one line when it cannot be read)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TimelineError(f"{path}: not a text file (expected a threads CSV)") from None
    except OSError as exc:
        raise TimelineError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if text and not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]   # a last row cut off by a kill
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    if header is None or tuple(h.strip() for h in header) != THREADS_COLUMNS:
        raise TimelineError(f"{path}: not a threads file (expected the header "
                            f"{','.join(THREADS_COLUMNS)})")
    readings: list[ThreadReading] = []
    problems: list[str] = []
    current: dict[str, int] = {}
    as_process: dict[str, int] = {}
    for line_no, row in enumerate(rows, start=2):
        if not row:
            continue
        try:
            if len(row) != 3:
                raise ValueError(f"{len(row)} fields, expected 3")
            t_ns, name = int(row[0]), row[1]
            if name.startswith(NOT_SEEN):
                problems.append(name[len(NOT_SEEN):].strip())
                continue
            ns = int(row[2])
        except ValueError as exc:
            raise TimelineError(f"{path}: line {line_no}: {exc}") from None
        if name == TOTAL:
            readings.append(ThreadReading(t_ns, ns, current, as_process))
            current, as_process = dict(current), dict(as_process)
        elif name.startswith(AS_PROCESS) and readings and readings[-1].t_ns == t_ns:
            readings[-1].as_process[name[len(AS_PROCESS):]] = ns
            as_process[name[len(AS_PROCESS):]] = ns
        elif readings and readings[-1].t_ns == t_ns:
            readings[-1].cpu_ns[name] = ns
            current[name] = ns
        else:
            raise TimelineError(f"{path}: line {line_no}: a name before its reading's "
                                f"{TOTAL} row")
    return readings, problems


@dataclass(frozen=True)
class RunThreads:
    """A run's threads file as read: its readings and the reasons it gives for threads not
    seen, or why it could not be read (``error``, one line; no readings then)."""

    path: Path
    readings: list[ThreadReading] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    error: str | None = None


def read_run_threads(run_path: Path) -> RunThreads | None:
    """The threads file beside a run (``<name>.threads.csv``), None when it has none."""
    path = threads_path(run_path)
    if not path.exists():
        return None
    try:
        readings, problems = read_threads(path)
    except TimelineError as exc:
        return RunThreads(path, error=str(exc))
    return RunThreads(path, readings, problems)
