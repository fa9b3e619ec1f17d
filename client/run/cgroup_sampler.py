"""Read a watched group's counters during a run: a cheap reading (:func:`read_sample`,
:class:`CgroupReader`) and a thread that samples them every ``interval`` (:class:`CgroupSampler`).

One sample is ``cpu.stat``'s ``nr_periods``, ``nr_throttled`` and throttled time (ns) of the
quota in force (the group's own or an ancestor's, and those of the other groups above with a
quota: ``ServiceGroup.levels``), the group's CPU usage (ns, see
``client.run.service_group.UsageSource``) and, on cgroup v2, its ``cpu.pressure`` totals
(PSI), stamped with the
monotonic ``perf_counter_ns`` clock since the run's start: the clock the requests are timed
with, so a timeline and the requests line up. The files stay open and are re-read with
``os.pread`` (the kernel regenerates a cgroup or proc file read from offset 0).

The sampler keeps its samples in memory and appends each to ``<name>.cgroup.csv``
(``client.data.timeline``), flushed, so an interrupted run keeps them. It shares nothing with the timed path but a list append. Its ticks are dithered around
a fixed grid (``interval`` on average) so that they do not lock to the kernel's period grid:
that is what lets ``client.data.attribution.period_phase`` place the boundaries precisely.

With a file, it also reads the group's threads every ``threads_every`` seconds, right after
that tick's counters (``client.run.thread_usage``), into ``<name>.threads.csv``
(``client.data.threads``): who spent the quota. A problem there stops the threads' readings
only (the file's ``(not seen)`` row says why); the counters go on.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO

from client.data.threads import ThreadsFile, threads_path
from client.data.timeline import (CgroupSample, LevelCounters, QuotaSetting, open_timeline,
                                  timeline_columns, timeline_row)
from client.run.service_group import ServiceGroup, ServiceGroupError, UsageSource
from client.run.process_usage import ProcessUsage
from client.run.thread_usage import ThreadUsage
from cpuquota.cgroupfs import (CpuStatReader, parse_cfs_value, parse_cpu_max, parse_pressure,
                               parse_usage_usec)

__all__ = ["DEFAULT_INTERVAL", "THREADS_EVERY", "CgroupReader", "CgroupSampler", "PodsReader",
           "open_reader", "read_sample", "usage_note"]

DEFAULT_INTERVAL = 0.01   # seconds: 100 samples per second, 10 per 100 ms period
GOLDEN = 0.6180339887498949   # the sampler's dither sequence: frac(k * GOLDEN)
DITHER = 0.8                  # ... spread over 0.8 of a step
THREADS_EVERY = 0.1           # seconds between two readings of the group's threads


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


class CgroupReader:
    """Keeps one group's counter files open; :meth:`read` is one ``pread`` of ``cpu.stat``
    per quota level (plus the group's own ``cpu.stat`` on v2 when its quota is above it, or
    ``cpuacct.usage``, or its processes' figures on v1; plus ``cpu.pressure`` on v2). Not for
    two threads at once: give each thread its own reader (``read_sample`` does)."""

    def __init__(self, target: ServiceGroup) -> None:
        self.target = target
        self.version = target.version
        source: UsageSource = target.usage_source
        # the quota in force's cpu.stat first (or the group's own without any quota)
        self._levels = [CpuStatReader(path, target.version)
                        for path in ([lvl.directory for lvl in target.levels] or
                                     [target.directory])]
        self._own: CpuStatReader | None = None   # the group's own cpu.stat, for usage_usec
        if source.kind == "cpu.stat" and self._levels[0].path != source.path:
            self._own = CpuStatReader(source.path.parent, target.version)
        self._fds: list[int] = []
        self._usage_fd: int | None = None
        self._pressure_fd: int | None = None
        self.processes: ProcessUsage | None = None
        self._finalizer = weakref.finalize(self, _close_fds, self._fds)
        try:
            for reader in [*self._levels, *([self._own] if self._own else [])]:
                reader.read_bytes()   # opens the file now: OSError when the group is gone
            if source.kind == "cpuacct":
                self._usage_fd = os.open(source.path, os.O_RDONLY)
                self._fds.append(self._usage_fd)
            elif source.kind == "proc":
                self.processes = ProcessUsage(source.path, source.proc)
            elif source.kind != "cpu.stat":
                raise OSError(f"cannot read usage from {source.kind}")
            if target.pressure:
                self._pressure_fd = os.open(target.directory / "cpu.pressure", os.O_RDONLY)
                self._fds.append(self._pressure_fd)
        except OSError:
            self.close()
            raise
        self._quota_fds = self._open_quotas()

    def _open_quotas(self) -> list[tuple[int, ...]] | None:
        """Each level's quota files, kept open (v1 ``cpu.cfs_quota_us`` and
        ``cpu.cfs_period_us``, v2 ``cpu.max``); None when one cannot be opened (the samples
        then carry no quota)."""
        names = ("cpu.cfs_quota_us", "cpu.cfs_period_us") if self.version == 1 else ("cpu.max",)
        opened: list[tuple[int, ...]] = []
        try:
            for reader in self._levels:
                fds = []
                for name in names:
                    fds.append(os.open(reader.path.parent / name, os.O_RDONLY))
                    self._fds.append(fds[-1])
                opened.append(tuple(fds))
        except OSError:
            return None
        return opened

    @property
    def reads_quota(self) -> bool:
        """Whether each sample carries every level's quota (``CgroupSample.quotas``)."""
        return self._quota_fds is not None

    def _quotas(self) -> tuple[QuotaSetting, ...]:
        if self._quota_fds is None:
            return ()
        out: list[QuotaSetting] = []
        for fds in self._quota_fds:
            if len(fds) == 2:
                quota = parse_cfs_value(os.pread(fds[0], 64, 0).decode("ascii"))
                period = parse_cfs_value(os.pread(fds[1], 64, 0).decode("ascii")) or 0
            else:
                quota, period = parse_cpu_max(os.pread(fds[0], 64, 0).decode("ascii"))
            out.append((quota, period))
        return tuple(out)

    def read(self, since_ns: int = 0) -> CgroupSample:
        """The counters now; ``t_ns`` is ``perf_counter_ns() - since_ns`` at the ``cpu.stat``
        read (OSError when the group is gone)."""
        before = time.perf_counter_ns()
        text = self._levels[0].read_bytes()
        after = time.perf_counter_ns()
        stat = self._levels[0].parse(text)
        if stat is None:
            raise OSError(f"{self.target.stat_path}: no throttling counters")
        levels: list[LevelCounters] = []
        for reader in self._levels[1:]:
            more = reader.parse(reader.read_bytes())
            if more is None:
                raise OSError(f"{reader.path}: no throttling counters")
            levels.append((more.nr_periods, more.nr_throttled, more.throttled_ns))
        if self._usage_fd is not None:
            usage = int(os.pread(self._usage_fd, 64, 0))
        elif self.processes is not None:
            usage = self.processes.read()
        else:
            usage = parse_usage_usec(self._own.read_bytes() if self._own else text) * 1000
        some = full = None
        if self._pressure_fd is not None:
            pressure = parse_pressure(os.pread(self._pressure_fd, 256, 0).decode("ascii"))
            some, full = pressure.some_ns, pressure.full_ns
        return CgroupSample((before + after) // 2 - since_ns, usage, stat.nr_periods,
                            stat.nr_throttled, stat.throttled_ns, some, full, tuple(levels),
                            self._quotas())

    def close(self) -> None:
        if self.processes is not None:
            self.processes.close()
        for reader in [*self._levels, *([self._own] if self._own else [])]:
            reader.close()
        self._finalizer()

    def __enter__(self) -> CgroupReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PodsReader:
    """Several pods' groups as one (``ServiceGroup.pods``, ``combine_pods``): :meth:`read`
    reads each pod's :class:`CgroupReader` in turn (a few µs each) and sums the counters, level
    by level: usage, ``nr_periods``, ``nr_throttled``, throttled time, and each level's quota
    (None when a pod has none there). ``t_ns`` is the middle of the first and last pod's
    reading. The pods' period grids have phases of their own: a throttle found in the sum is
    placed within the sample interval that counted it (``client.data.attribution``)."""

    processes: ProcessUsage | None = None   # pods' groups have their own usage counters

    def __init__(self, target: ServiceGroup) -> None:
        self.target = target
        self.version = target.version
        self._readers: list[CgroupReader] = []
        try:
            for pod in target.pods:
                self._readers.append(CgroupReader(pod))
        except OSError:
            self.close()
            raise
        if any(reader.processes is not None for reader in self._readers):
            self.close()
            raise OSError("a pod's group has no usage counter of its own: cannot sum")

    @property
    def reads_quota(self) -> bool:
        return all(reader.reads_quota for reader in self._readers)

    def read(self, since_ns: int = 0) -> CgroupSample:
        samples = [reader.read(since_ns) for reader in self._readers]
        levels = tuple(tuple(sum(s.levels[k][i] for s in samples) for i in range(3))
                       for k in range(len(samples[0].levels)))
        quotas: list[QuotaSetting] = []
        if self.reads_quota:
            for k, (_, period) in enumerate(samples[0].quotas):
                each = [s.quotas[k][0] for s in samples]
                quotas.append((None if any(q is None for q in each) else
                               sum(q for q in each if q is not None), period))
        return CgroupSample((samples[0].t_ns + samples[-1].t_ns) // 2,
                            sum(s.usage_ns for s in samples),
                            sum(s.nr_periods for s in samples),
                            sum(s.nr_throttled for s in samples),
                            sum(s.throttled_ns for s in samples), None, None,
                            levels, tuple(quotas))   # type: ignore[arg-type]

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def __enter__(self) -> PodsReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_reader(target: ServiceGroup) -> CgroupReader | PodsReader:
    """The reader of a target: its group's, or the sum over its pods' (``target.pods``)."""
    return PodsReader(target) if target.pods else CgroupReader(target)


def usage_note(reader: CgroupReader | PodsReader, base: dict[str, object]) -> dict[str, object]:
    """``base`` (``UsageSource.to_metadata()``) brought up to date with what the reader's
    processes' figures could not count so far (a group without a usage counter): the
    resolution of reaped children's clock ticks, and why the usage cannot be known."""
    note = dict(base)
    if reader.processes is None:
        return note
    account = reader.processes.account
    if account.children_ns:
        note["resolution_ns"] = reader.processes.tick_ns
    why: list[str] = []
    if account.lost:
        why.append(f"{account.lost} process(es) of the group ended after their last reading "
                   "and were reaped outside it: what they used since is not counted anywhere "
                   "this can read")
    if account.blind:
        pids = ", ".join(str(p) for p in sorted(account.blind))
        why.append(f"process(es) {pids} ignore SIGCHLD: a child of theirs that ends between "
                   "two samples is counted by no one")
    if why:
        note["unknown"] = "; ".join(why) + (" (only a group counter knows: give the group a "
                                            "cpuacct twin, or use cgroup v2)")
    return note


_readers = threading.local()


def read_sample(target: ServiceGroup, since_ns: int = 0) -> CgroupSample:
    """The target's counters now (see :meth:`CgroupReader.read`), through a reader kept open
    for this thread, so repeated calls cost one ``pread`` and a parse."""
    cache: dict[ServiceGroup, CgroupReader | PodsReader] | None = getattr(_readers, "cache",
                                                                          None)
    if cache is None:
        cache = _readers.cache = {}
    reader = cache.get(target)
    if reader is None:
        reader = cache[target] = open_reader(target)
    return reader.read(since_ns)


class CgroupSampler:
    """Samples a group every ``interval`` seconds (on average) on its own daemon thread::

        with CgroupSampler(target, timeline_path(csv_path)) as sampler:
            sampler.start(run_start_ns)      # the run's perf_counter_ns origin
            ... time the requests ...
        timeline = sampler.samples

    ``stop()`` (or leaving the ``with``) takes a last sample, joins the thread and closes the
    file. A group that disappears mid-run (the container stopped) ends the sampling:
    ``error`` says why; the samples so far are kept."""

    def __init__(self, target: ServiceGroup, csv_path: Path | None = None,
                 interval: float = DEFAULT_INTERVAL, *, max_bytes: int | None = None,
                 keep: bool = True, flush_every: float = 0.0,
                 threads_every: float | None = THREADS_EVERY) -> None:
        if not interval > 0:
            raise ValueError(f"--cgroup-interval must be > 0 (got {interval})")
        self.target, self.csv_path, self.interval = target, csv_path, interval
        # ``max_bytes``: the file never grows past it (sampling stops, ``error`` says so);
        # ``keep`` False: the samples are only written (a long recording), ``last``/``count`` kept
        # ``flush_every``: seconds between two flushes of the file (0: every row)
        self.max_bytes, self.keep = max_bytes, keep
        self._flush_ns, self._flushed_ns = round(flush_every * 1e9), 0
        self.samples: list[CgroupSample] = []
        self.last: CgroupSample | None = None
        self.count = 0
        self.written = 0
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._file: IO[str] | None = None
        self._reader: CgroupReader | PodsReader | None = None
        self._since_ns = 0
        # where the usage comes from and what it could not count (``UsageSource.to_metadata``,
        # ``unknown`` and ``resolution_ns`` brought up to date by ``stop()``)
        self.usage: dict[str, object] = target.usage_source.to_metadata()
        self._usage_seen: tuple[bool, int, int] = (False, 0, 0)
        # the threads, by name (None: not read; needs a file to write them to)
        self.threads_path = (threads_path(csv_path) if csv_path is not None and threads_every
                             else None)
        self._threads_ns = round((threads_every or 0) * 1e9)
        self._threads: ThreadUsage | None = None
        self._threads_file: ThreadsFile | None = None
        self._threads_due = 0
        self._threads_written = 0
        self.threads_cost_ns = 0   # the time the threads' readings took, in all

    def start(self, run_start_ns: int | None = None) -> CgroupSampler:
        """Start sampling (``run_start_ns``: the run's origin; default now). Takes the first
        sample before returning, so the timeline starts at or before the first request.
        ``ServiceGroupError`` (one line) when the group's files cannot be opened."""
        if self._thread is not None:
            raise RuntimeError("this sampler was already started")
        self._since_ns = time.perf_counter_ns() if run_start_ns is None else run_start_ns
        try:
            self._reader = open_reader(self.target)
        except OSError as exc:   # the group went away since it was resolved
            raise ServiceGroupError(f"cannot open {self.target.stat_path}: "
                                    f"{exc.strerror or exc}") from None
        if self.csv_path is not None:
            self._file = open_timeline(self.csv_path, timeline_columns(
                self.target.pressure, max(0, len(self.target.levels) - 1),
                self._reader.reads_quota))
            self.written = self._file.tell()
        if self.threads_path is not None:
            self._threads_file = ThreadsFile(self.threads_path)
            self._threads = ThreadUsage([pod.directory for pod in self.target.pods] or
                                        [self.target.directory], self.target.usage_source.proc)
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="cgroup-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> bool:
        assert self._reader is not None
        try:
            sample = self._reader.read(self._since_ns)
        except (OSError, ValueError) as exc:
            self.error = f"stopped sampling {self.target.directory}: {exc}"
            return False
        if self._file is not None:
            row = timeline_row(sample, self.target.pressure)
            if self.max_bytes is not None and self.written + len(row) > self.max_bytes:
                self.error = f"stopped sampling: the timeline reached {self.max_bytes} bytes"
                return False
            self._file.write(row)
            if sample.t_ns - self._flushed_ns >= self._flush_ns:
                self._file.flush()
                self._flushed_ns = sample.t_ns
            self.written += len(row)
        if self.keep:
            self.samples.append(sample)
        self.last = sample
        self.count += 1
        self._follow_usage(self._reader)
        if self._threads is not None and sample.t_ns >= self._threads_due:
            self._read_threads()
        return True

    def _read_threads(self) -> None:
        """One reading of the group's threads into their file (a problem ends them)."""
        assert self._threads is not None and self._threads_file is not None
        before = time.perf_counter_ns()
        stopped: str | None = None
        try:
            reading = self._threads.read(before - self._since_ns)
            self._threads_written += self._threads_file.write(reading)
            if self._threads.problem:
                self._threads_file.not_seen(reading.t_ns, self._threads.problem)
                self._threads.problem = ""   # said once
            if self.max_bytes is not None and self._threads_written > self.max_bytes:
                stopped = f"the threads file reached {self.max_bytes} bytes"
            self._threads_file.flush()
        except OSError as exc:
            stopped = f"stopped reading threads: {exc.strerror or exc}"
        if stopped is not None:
            self._threads_file.not_seen(before - self._since_ns, stopped)
            self._threads.close()
            self._threads = None
        after = time.perf_counter_ns()
        self.threads_cost_ns += after - before
        # the next reading at the first tick this long after this one's start
        self._threads_due = before - self._since_ns + self._threads_ns - round(self.interval
                                                                               * 5e8)

    def _follow_usage(self, reader: CgroupReader | PodsReader) -> None:
        """``usage`` kept up to date in place while the run goes (a live view reads it: the
        run's metadata holds this very dict), each time what the processes' figures could not
        count changes (a first reaped child's ticks, a process lost): a few comparisons a
        sample otherwise."""
        processes = reader.processes
        if processes is None:
            return
        account = processes.account
        seen = (account.children_ns > 0, account.lost, len(account.blind))
        if seen != self._usage_seen:
            self._usage_seen = seen
            self.usage.update(usage_note(reader, self.usage))

    def _loop(self) -> None:
        """Sample on a grid of ``interval`` steps, each tick moved by a dither in
        ``[-0.4, 0.4)`` steps (a golden-ratio sequence): a fixed grid would keep one phase
        against the kernel's period grid (10 ms divides 100 ms), so every interval that
        holds a boundary would hold it at the same place and pin it no closer than a step."""
        step = round(self.interval * 1e9)
        origin = time.perf_counter_ns()
        tick = 0
        while not self._stop.is_set():
            tick += 1
            due = origin + tick * step + round(((tick * GOLDEN) % 1.0 - 0.5) * DITHER * step)
            wait = (due - time.perf_counter_ns()) / 1e9
            if wait > 0 and self._stop.wait(wait):
                break
            if not self._sample():
                return
            behind = time.perf_counter_ns() - (origin + tick * step)
            if behind > step:   # late (a busy machine): skip ticks, never sample in a burst
                tick += behind // step

    def stop(self) -> list[CgroupSample]:
        """Last sample, join the thread, close the file; returns the samples."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            if self.error is None:
                self._threads_due = 0   # the last sample reads the threads too
                self._sample()
            self._thread = None
        if self._threads is not None:
            self._threads.close()
            self._threads = None
        if self._threads_file is not None:
            self._threads_file.close()
            self._threads_file = None
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
        if self._reader is not None:
            self._note_usage(self._reader)
            self._reader.close()
            self._reader = None
        return self.samples

    def _note_usage(self, reader: CgroupReader | PodsReader) -> None:
        self.usage.update(usage_note(reader, self.usage))

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> CgroupSampler:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
