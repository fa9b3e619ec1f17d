"""A live progress bar (rich) for runs that take more than a few seconds.

Shown only when stdout is a terminal, and only once the run has lasted ``after_s`` seconds
(2 s by default), so short runs and piped or redirected output look exactly as before. The
per-request lines keep their exact text: while the bar is up, rich prints what is written to
stdout above it, and the bar is removed when the run ends (``transient``).

The bar shows requests done (of how many), elapsed and remaining time, and the latency so
far: p50, p99, requests the server's counters said were delayed by throttling, errors (``LiveStats``: pure, no I/O).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from client.data.record import RequestRecord

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["DEFAULT_AFTER_S", "LiveStats", "RunProgress", "StartProgress"]

DEFAULT_AFTER_S = 2.0
_STATS_EVERY_S = 0.25  # recompute the percentiles at most this often


class LiveStats:
    """Running counts and latency percentiles of the requests completed so far."""

    def __init__(self) -> None:
        self.count = 0
        self.errors = 0
        self.throttled = 0
        self._latencies_ms: list[float] = []

    def add(self, record: RequestRecord) -> None:
        self.count += 1
        if record.ok:
            self._latencies_ms.append(record.latency_ms)
        else:
            self.errors += 1
        if record.counters_throttled:
            self.throttled += 1

    def text(self) -> str:
        """e.g. ``p50 5.2  p99 71.0 ms, 14 delayed by throttling`` (``, 2 errors``: any)."""
        parts: list[str] = []
        if self._latencies_ms:
            p50, p99 = np.percentile(np.asarray(self._latencies_ms), [50, 99])
            parts.append(f"p50 {p50:.1f}  p99 {p99:.1f} ms")
        parts.append(f"{self.throttled} delayed by throttling")
        if self.errors:
            parts.append(f"{self.errors} error{'s' if self.errors != 1 else ''}")
        return ", ".join(parts)


class RunProgress:
    """``advance(record)`` after each completed request; use as a context manager.

    ``total`` is the number of requests (None when the run is bounded by time). Thread-safe.
    ``enabled`` defaults to whether ``file`` (stdout) is a terminal.
    """

    def __init__(self, total: int | None, description: str = "requests", *,
                 file: IO[str] | None = None, enabled: bool | None = None,
                 after_s: float = DEFAULT_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.description = description
        self.stats = LiveStats()
        self._file = file if file is not None else sys.stdout
        self.enabled = _is_terminal(self._file) if enabled is None else enabled
        self._after_s = after_s
        self._clock = clock
        self._started_at = clock()
        self._stats_at = float("-inf")
        self._lock = threading.RLock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._closed = False

    @property
    def shown(self) -> bool:
        """Whether the bar is on screen now."""
        return self._progress is not None

    def advance(self, record: RequestRecord) -> None:
        with self._lock:
            self.stats.add(record)
            if not self.enabled or self._closed:
                return
            now = self._clock()
            if self._progress is None:
                if now - self._started_at < self._after_s:
                    return
                self._show()
            assert self._progress is not None and self._task is not None
            fields: dict[str, Any] = {}
            if now - self._stats_at >= _STATS_EVERY_S:
                self._stats_at = now
                fields["stats"] = self.stats.text()
            self._progress.update(self._task, completed=self.stats.count, **fields)

    def _show(self) -> None:
        # rich is imported only now: most runs never show a bar, and it costs start-up time
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        console = Console(file=self._file, force_terminal=True, highlight=False)
        columns = [TextColumn("[bold]{task.description}"), BarColumn(bar_width=10),
                   MofNCompleteColumn(),
                   TimeElapsedColumn()]
        if self.total is not None:
            columns.append(TimeRemainingColumn())
        columns.append(TextColumn("{task.fields[stats]}"))
        progress = Progress(*columns, console=console, transient=True, redirect_stdout=True,
                            redirect_stderr=False, refresh_per_second=8)
        # Count the time already spent, so elapsed and remaining are right from the start.
        self._task = progress.add_task(self.description, total=self.total,
                                       completed=self.stats.count, stats=self.stats.text())
        task = progress.tasks[0]
        task.start_time = progress.get_time() - (self._clock() - self._started_at)
        progress.start()
        self._progress = progress

    def close(self) -> None:
        """Remove the bar (if shown); later ``advance`` calls only count."""
        with self._lock:
            self._closed = True
            if self._progress is not None:
                self._progress.stop()
                self._progress = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _is_terminal(file: IO[str]) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


class StartProgress:
    """Replicas started so far: a line at each tenth of them (and the last).
    ``advance(done, total)`` is called from the threads that wait for each replica."""

    def __init__(self, total: int, description: str, *, file: IO[str] | None = None) -> None:
        self.total, self.description = total, description
        self._file = file if file is not None else sys.stdout
        self._began = time.monotonic()
        self._lock = threading.Lock()
        self._shown = 0

    def advance(self, done: int, total: int) -> None:
        with self._lock:
            step = max(1, total // 10)
            if done == total or done - self._shown >= step:
                self._shown = done
                print(f"  started {done}/{total} replicas ({time.monotonic() - self._began:.1f} "
                      "s)", file=self._file, flush=True)
