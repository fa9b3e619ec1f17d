"""Keeping what a run measured, and stopping it cleanly: one mechanism for every load mode.

- :class:`Recorder` passes completed requests to ``on_record`` (the CSV row, the printed line,
  the progress bar) one at a time, keeps them in the :class:`RunOutcome`, stops the run after
  too many transport failures in a row, and once :meth:`Recorder.freeze` returns lets nothing
  through any more (a record being handed over is finished first). So a record is in the
  outcome exactly when ``on_record`` finished with it, whatever interrupts the run.
- The requests themselves are sent by worker threads (``client.run.modes``); the calling
  (main) thread only waits for them, where Ctrl-C and SIGTERM arrive: ``stop_on_terminate``
  turns SIGTERM into the same ``KeyboardInterrupt`` as Ctrl-C, ``files_first`` holds off
  a second Ctrl-C while the files are completed, and ``holding_signals`` delays both until a
  process that was being started has its id kept.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from client.data.record import RequestRecord

__all__ = ["RunOutcome", "Recorder", "Terminated", "Tickets", "files_first", "holding_signals",
           "stop_on_terminate"]


@dataclass
class RunOutcome:
    records: list[RequestRecord] = field(default_factory=list)
    stop_reason: str | None = None  # why the run ended before ``requests`` (None: it did not)
    own_ns: int = 0           # a closed loop's own time outside the waits for answers ...
    own_requests: int = 0     # ... over this many requests

    @property
    def reached(self) -> bool:
        """Whether any request got an HTTP response at all."""
        return any(r.status > 0 for r in self.records)


class Recorder:
    """Hands completed requests to ``on_record`` until frozen (thread-safe)."""

    def __init__(self, on_record: Callable[[RequestRecord], None], outcome: RunOutcome,
                 max_consecutive_failures: int) -> None:
        self._on_record = on_record
        self._outcome = outcome
        self._max_failures = max_consecutive_failures
        self._failures = 0
        self._lock = threading.Lock()
        self._frozen = False
        self.stop = threading.Event()

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            if self._frozen:
                return
            self._outcome.records.append(record)
            self._on_record(record)
            self._failures = self._failures + 1 if record.status == 0 else 0
            if self._max_failures and self._failures >= self._max_failures:
                self._outcome.stop_reason = (f"stopped after {self._failures} consecutive "
                                             "connection failures")
                self._frozen = True
                self.stop.set()

    def note_own_time(self, own_ns: int, requests: int) -> None:
        """A closed-loop worker's own time (outside the waits) over its ``requests``."""
        with self._lock:
            self._outcome.own_ns += own_ns
            self._outcome.own_requests += requests

    def freeze(self) -> None:
        """No record gets through after this returns (one being handed over is finished)."""
        self.stop.set()
        with self._lock:
            self._frozen = True


class Tickets:
    """Request numbers 0, 1, 2, ... handed to workers, up to ``limit`` (None: no limit)."""

    def __init__(self, limit: int | None) -> None:
        self._next = 0
        self._limit = limit
        self._lock = threading.Lock()

    def take(self) -> int | None:
        with self._lock:
            if self._limit is not None and self._next >= self._limit:
                return None
            seq = self._next
            self._next += 1
            return seq


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: stop and keep what was collected."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


@contextmanager
def stop_on_terminate() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) in the main thread while
    inside; elsewhere (not the main thread) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def files_first() -> Iterator[None]:
    """Ignore Ctrl-C while inside (the files of a run are being completed, or the services
    it started stopped), so a second Ctrl-C cannot leave them half done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def holding_signals() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM while inside (starting a process whose id must be kept) and
    deliver them, to the handlers in force, right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, lambda number, frame: pending.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for number in pending:
            signal.raise_signal(number)
