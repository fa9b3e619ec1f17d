"""``measure``: one run against one target, from starting it to stopping it: the sequence every
command (``run``, ``sweep``, ``advise``) and benchmark goes through.

    target.start() (once healthy) -> the run's spec for the started target (``target_spec``)
    -> record_run, the progress shown -> [caller's look while the target still runs]
    -> target.stop() by its own id, whatever happened

- **What is sent where** is decided in one place: :class:`Traffic` (the plan, the path and its
  ``?iterations=N``, timeout, warm-up) and :func:`target_spec` (a started target's URLs,
  what it is, the run's name and files). ``http-timing run`` times a URL it is given, not a
  target it starts: it builds its own :class:`RunSpec` and calls ``measure(spec)``.
- **Ctrl-C or SIGTERM** during the requests ends the run with every completed request on disk
  (``record_run``): the :class:`Measurement` says ``interrupted`` and the caller decides what
  follows (a sweep stops, ``run`` exits 130). While the target starts, it is stopped and the
  ``KeyboardInterrupt`` goes on to the caller. Either way nothing is left running: the target
  is stopped in a ``finally`` with a second Ctrl-C held off (``files_first``).
- **Nothing is printed here**: the caller shows progress (a :class:`Progress`, e.g.
  ``client.render.progress.RunProgress``), each request (``observers``) and what happened
  (the ``on_*`` hooks), and builds the report from the :class:`Measurement`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from client.data.files import Run, write_metadata
from client.data.metadata import ReplicaInfo, SweepInfo
from client.data.record import RequestRecord
from client.run.http import build_url
from client.run.observer import RunObserver
from client.run.plan import LoadPlan
from client.run.record import RecordedRun, RunSpec, record_run
from client.run.recorder import files_first, stop_on_terminate
from client.run.targets import Target
from client.run.targets.replicas import ReplicaSet
from client.run.usage import UsageSample, UsageSampler
from cpuquota.limit import DEFAULT_PERIOD_MS

__all__ = ["BURN_PATH", "Measurement", "Progress", "Started", "Traffic", "measure", "target_spec"]

BURN_PATH = "/cpuBurnFlow"   # burn-service's request (``?iterations=N``: N calibrated 1 us steps)

Started = Target | ReplicaSet      # what ``measure`` starts and stops
Observer = Callable[[RequestRecord], None]


class Progress(Protocol):
    """What shows a run's progress: entered for the run, told of each completed request."""

    def __enter__(self) -> Any: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Any: ...

    def advance(self, record: RequestRecord) -> None: ...


@dataclass(frozen=True)
class Traffic:
    """What each run of a command sends to a target it started, and how: the same for every
    target (a sweep's limits, an advice's runs)."""

    plan: LoadPlan
    iterations: int = 5000
    timeout: float = 30.0
    warmup: int = 0
    path: str = BURN_PATH

    def urls(self, target: Started) -> tuple[str, ...]:
        """The URL timed at each of the target's base URLs (one, or a replica set's)."""
        return tuple(build_url(base + self.path, self.iterations) for base in target.urls)


def target_spec(target: Started, load: Traffic, *, name: str, data_dir: Path,
                command: Sequence[str], sweep: SweepInfo | None = None,
                settle_s: float = DEFAULT_PERIOD_MS / 1000) -> RunSpec:
    """The run of ``load`` against a started ``target``: its URL (a replica set's requests go
    round-robin over every replica's), what the target is, the load average noted."""
    urls = load.urls(target)
    replicas = None
    if isinstance(target, ReplicaSet):
        replicas = ReplicaInfo(target.count, target.limit.cpus if target.limit else 0,
                               round(target.start_s or 0.0, 2))
    return RunSpec(url=urls[0], plan=load.plan, name=name, data_dir=data_dir,
                   iterations=load.iterations, command=list(command), timeout=load.timeout,
                   warmup=load.warmup, settle_s=settle_s, service=target.describe(),
                   note_load_average=True,
                   replica_urls=urls if replicas else (), replicas=replicas, sweep=sweep)


@dataclass
class Measurement:
    """What ``measure`` gives: the recorded run (files written), and what the target showed."""

    recorded: RecordedRun
    usage: list[UsageSample] = field(default_factory=list)  # /metrics, per second (sample_usage)
    usage_counter: str | None = None   # the counter ``usage`` was read from (None: none found)

    @property
    def run(self) -> Run:
        return self.recorded.run

    @property
    def interrupted(self) -> bool:
        """Ctrl-C or SIGTERM ended the requests early (every completed one is saved)."""
        return self.recorded.interrupted


def measure(spec: RunSpec | Callable[[Started], RunSpec], *, target: Started | None = None,
            progress: Progress | None = None, observers: Sequence[Observer] = (),
            sample_usage: bool = False, started: datetime | None = None,
            on_started: Callable[[Started, float], None] | None = None,
            on_recorded: Callable[[Measurement], None] | None = None,
            on_stopped: Callable[[str], None] | None = None,
            watcher: RunObserver | None = None) -> Measurement:
    """Time one run, starting and stopping ``target`` around it (see the module docstring).

    ``spec``: the run, or (with ``target``) how to make it from the started target, usually
    ``lambda t: target_spec(t, load, name=..., ...)``. ``target``: a service or replica set
    not started yet (None: time ``spec``'s URL as it is). ``progress`` is entered for the
    requests and advanced after ``observers`` for each. ``sample_usage``: scrape the target's
    ``/metrics`` every second meanwhile (:class:`client.run.usage.UsageSampler`).
    ``started``: the run's start time for its metadata (default: now). ``watcher``: told the
    run's start, each request and its end (``--live``'s page, :mod:`client.run.observer`).

    Hooks: ``on_started(target, seconds to healthy)``; ``on_recorded(measurement)`` when the
    requests ended without an interruption, while the target still runs (a sweep prints and
    draws there, so its lines come before the target's last words); ``on_stopped(words)``
    with what the target said when stopped (also when starting it failed). Without a target
    only ``on_recorded`` is called.

    Raises what ``record_run`` raises (``RawDataError``: the files cannot be written), the
    target's ``ServiceError`` when it does not start, and ``KeyboardInterrupt`` for a Ctrl-C
    or SIGTERM while it starts; the target is stopped first in every case.
    """
    with stop_on_terminate():
        if target is None:
            if not isinstance(spec, RunSpec):
                raise TypeError("measure: a spec made from the target needs a target")
            measurement = Measurement(_record(spec, progress, observers, started, watcher))
            if on_recorded is not None and not measurement.interrupted:
                on_recorded(measurement)
            return measurement
        sampler: UsageSampler | None = None
        try:
            began = time.monotonic()
            target.start()
            if on_started is not None:
                on_started(target, time.monotonic() - began)
            if sample_usage:
                sampler = UsageSampler(target.base_url).start()
            recorded = _record(spec if isinstance(spec, RunSpec) else spec(target), progress,
                               observers, started, watcher)
            measurement = Measurement(recorded)
            if sampler is not None:
                measurement.usage, measurement.usage_counter = sampler.stop(), sampler.counter
            if not measurement.interrupted:
                _note_memory(target, recorded)
                if on_recorded is not None:
                    on_recorded(measurement)
            return measurement
        finally:
            if sampler is not None:
                sampler.stop()
            with files_first():  # a second Ctrl-C must not leave the target running
                words = target.stop()
            if on_stopped is not None:
                on_stopped(words)


def _record(spec: RunSpec, progress: Progress | None, observers: Sequence[Observer],
            started: datetime | None, watcher: RunObserver | None) -> RecordedRun:
    if progress is None:
        return record_run(spec, observers, started=started, watcher=watcher)
    with progress:
        return record_run(spec, [*observers, progress.advance], started=started,
                          watcher=watcher)


def _note_memory(target: Started, recorded: RecordedRun) -> None:
    """A replica set's resident memory after the load, into the run's metadata."""
    replicas = recorded.run.metadata.replicas
    if replicas is None or not isinstance(target, ReplicaSet):
        return
    recorded.run.metadata.replicas = replace(
        replicas, rss_mib=[round(mib, 1) for mib in target.memory_mib()])
    write_metadata(recorded.meta_path, recorded.run.metadata)
