"""The threads that run the burns: a small pool whose idle threads are reused last-in first-out.

``loop.run_in_executor`` with a ``ThreadPoolExecutor`` hands a call to whichever thread is
free, and starts another thread when the one that just finished has not yet said it is idle:
a sequential client's requests then wander over several threads. The in-process throttle's
``boundary`` mode gives every worker thread a budget of its own (the seed's CpuThrottler), so
which thread runs a request must not depend on such a race. Here a thread is back on the idle
stack *before* the event loop hears its result, and the next call takes the thread that was
idle last: one client in sequence is always served by the same thread, ``c`` concurrent
clients by ``c`` threads (at most the concurrency the guard lets through). It is also leaner
than ``run_in_executor`` (no ``concurrent.futures`` future chained to an asyncio one).

Threads are made on demand and never idle-spin (an idle thread blocks on its queue: no CPU).
:meth:`WorkerPool.close` lets each one end after its current call.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["WorkerPool"]

T = TypeVar("T")
_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, asyncio.Future[Any]]


def _deliver(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class _Worker:
    def __init__(self, pool: WorkerPool, name: str) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._pool = pool
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            fn, args, loop, future = job
            try:
                value, ok = fn(*args), True
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                value, ok = exc, False
            del job, fn, args
            self._pool._idle.append(self)  # idle again before the loop hears of the result
            try:
                loop.call_soon_threadsafe(_deliver, future, ok, value)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
            del value, future, loop


class WorkerPool:
    """``await pool.run(fn, *args)`` runs ``fn(*args)`` in one of the pool's threads."""

    def __init__(self, name: str = "worker") -> None:
        self._name = name
        self._idle: list[_Worker] = []   # LIFO; list.append/pop are atomic under the GIL
        self._all: list[_Worker] = []
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads made so far (the most calls that ran at once)."""
        return len(self._all)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        loop = asyncio.get_running_loop()
        worker = self._idle.pop() if self._idle else self._spawn()
        future: asyncio.Future[T] = loop.create_future()
        worker.jobs.put((fn, args, loop, future))
        return await future

    def _spawn(self) -> _Worker:
        worker = _Worker(self, f"{self._name}_{len(self._all)}")
        self._all.append(worker)
        return worker

    def close(self) -> None:
        """Every thread ends after its current call (idle ones at once)."""
        self._closed = True
        for worker in self._all:
            worker.jobs.put(None)
