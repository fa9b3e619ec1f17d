"""``http-timing record``: a group's timeline on its own, no requests (``<name>.cgroup.csv`` and
``<name>.json``, see ``client.data.timeline_meta``).

The sampler (``client.run.cgroup_sampler.CgroupSampler``) writes every row as it takes it
and flushes the file every half second, so a killed recorder loses at most that much; it
keeps no samples in memory (a recording may last days). The main thread only waits: once a
second it hands the sampler to the ``observers`` (a live view hooks in there) until the
duration is over, the file is full (``max_bytes``), the group is gone, or Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from client import __version__
from client.data.files import FileWriteError
from client.data.timeline_meta import TimelineClock, TimelineMetadata, write_timeline_metadata
from client.run.cgroup_sampler import DEFAULT_INTERVAL, CgroupSampler
from client.run.service_group import ServiceGroup
from client.run.recorder import files_first, stop_on_terminate

__all__ = ["TimelineSpec", "anchor_clock", "record_timeline"]

TICK_S = 1.0        # how often the main thread looks (and the observers are called)
FLUSH_EVERY_S = 0.5  # the file is flushed this often: a SIGKILL loses at most this much


@dataclass(frozen=True)
class TimelineSpec:
    target: ServiceGroup
    name: str
    data_dir: Path
    duration_s: float | None = None
    max_bytes: int | None = None
    interval_s: float = DEFAULT_INTERVAL
    command: tuple[str, ...] = ()

    @property
    def csv_path(self) -> Path:
        return self.data_dir / f"{self.name}.cgroup.csv"

    @property
    def meta_path(self) -> Path:
        return self.data_dir / f"{self.name}.json"


def anchor_clock(zero_ns: int, tries: int = 5) -> TimelineClock:
    """The wall-clock time of ``perf_counter_ns() == zero_ns``: a monotonic reading between two
    wall-clock readings, the tightest of ``tries``."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        before = time.time_ns()
        mono = time.perf_counter_ns()
        after = time.time_ns()
        gap = after - before
        if best is None or gap < best[1]:
            best = ((before + after) // 2 - (mono - zero_ns), gap)
    assert best is not None
    return TimelineClock(best[0], (best[1] + 1) // 2)


def record_timeline(spec: TimelineSpec,
                    observers: Sequence[Callable[[CgroupSampler], None]] = ()
                    ) -> TimelineMetadata:
    """Record until the duration, the size limit, the group's end, or Ctrl-C/SIGTERM; returns
    the metadata written (``interrupted`` True for Ctrl-C/SIGTERM). ``ServiceGroupError`` when
    the group cannot be opened; ``OSError`` (the timeline) or ``FileWriteError`` (its JSON)
    when the files cannot be written."""
    sampler = CgroupSampler(spec.target, spec.csv_path, spec.interval_s,
                            max_bytes=spec.max_bytes, keep=False, flush_every=FLUSH_EVERY_S)
    zero_ns = time.perf_counter_ns()
    meta = TimelineMetadata(name=spec.name, clock=anchor_clock(zero_ns),
                            cgroup=spec.target.to_metadata(), version=__version__,
                            host=socket.gethostname(),
                            started_at=datetime.now(timezone.utc).isoformat(),
                            interval_s=spec.interval_s, max_size=spec.max_bytes,
                            command=list(spec.command))
    sampler.start(zero_ns)   # the group's files open (or a one-line error), first sample
    try:
        write_timeline_metadata(spec.meta_path, meta)
    except FileWriteError:
        sampler.stop()
        raise
    deadline = None if spec.duration_s is None else zero_ns + round(spec.duration_s * 1e9)
    try:
        with stop_on_terminate():
            while sampler.running:
                now = time.perf_counter_ns()
                if deadline is not None and now >= deadline:
                    break
                wait = TICK_S if deadline is None else min(TICK_S, (deadline - now) / 1e9)
                time.sleep(max(wait, 0.0))
                for observe in observers:
                    observe(sampler)
    except KeyboardInterrupt:
        meta.interrupted = True
    finally:
        with files_first():
            sampler.stop()
    meta.ended_at = datetime.now(timezone.utc).isoformat()
    meta.samples = sampler.count
    if meta.cgroup is not None:
        meta.cgroup["usage"] = sampler.usage
    meta.stop_reason = sampler.error or ("interrupted" if meta.interrupted else
                                         "duration" if deadline is not None else None)
    with files_first():
        write_timeline_metadata(spec.meta_path, meta)
    return meta
