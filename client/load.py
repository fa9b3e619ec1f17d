"""Load modes beyond sequential: a closed loop of C workers, an open loop at a constant rate.

- **sequential** (the original): one request after another (``client.timing.time_sequential``).
- **closed loop** (``--concurrency C``, like ``hey -c``/``oha -c``): C workers, each with its
  own keep-alive connection, send their next request as soon as the previous one is answered.
  Latency runs from the send to the end of the body. When the server stalls, the workers
  wait with it and send less: a closed loop shows what the server gives, not what users see.
- **open loop** (``--rate R``, like wrk2, vegeta, k6's constant-arrival-rate): request ``i``
  is *due* ``i / R`` seconds after the start, whatever happened before. A pool of workers
  (connections) sends each request when it is due and a worker is free. Its latency is
  measured from the **intended** send time (``scheduled_ns``), not from when it went out:
  a request held back because a stall kept every connection busy counts the time it was held
  back, so coordinated omission cannot hide the stall. ``start_ns`` is the actual send.

Every mode hands each completed request to the same ``on_record`` (the CSV writer and the
original per-request line), one at a time, in completion order. The request is built once
per worker before the clock starts; only ``client.send`` (send, wait, read the body) is timed.
Ctrl-C/SIGTERM in the calling thread stops the run; requests completed until then are kept
and nothing reaches ``on_record`` afterwards.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from client.rawdata import RequestRecord
from client.timing import RunOutcome, request_headers, send_timed, time_sequential

__all__ = ["DEFAULT_REQUESTS", "MODES", "LoadPlan", "LoadPlanError", "intended_send_ns",
           "open_loop_workers", "time_closed_loop", "time_open_loop", "time_plan"]

MODES = ("sequential", "closed-loop", "open-loop")
DEFAULT_REQUESTS = 100
MAX_OPEN_LOOP_WORKERS = 64
_JOIN_POLL_S = 0.1  # the main thread wakes this often, so Ctrl-C/SIGTERM are handled promptly


class LoadPlanError(ValueError):
    """Options that do not make a load plan; the message is one line naming the options."""


@dataclass(frozen=True)
class LoadPlan:
    """How requests are sent: the mode and its numbers, validated (see ``from_options``).

    ``requests`` is None only for a closed loop bounded by ``duration_s``.
    """

    mode: str = "sequential"
    requests: int | None = DEFAULT_REQUESTS
    concurrency: int = 1
    rate_rps: float | None = None
    duration_s: float | None = None

    @classmethod
    def from_options(cls, *, requests: int | None = None, concurrency: int | None = None,
                     rate: float | None = None, duration: float | None = None) -> LoadPlan:
        """The plan for ``--requests/--concurrency/--rate/--duration`` (None: not given)."""
        if rate is not None and concurrency is not None:
            raise LoadPlanError("--rate and --concurrency cannot be combined: --rate R is an "
                                "open loop (R requests per second, whatever the answers), "
                                "--concurrency C a closed loop (C requests at a time)")
        for flag, value in (("--requests", requests), ("--concurrency", concurrency)):
            if value is not None and value < 1:
                raise LoadPlanError(f"{flag} must be an integer >= 1 (got {value})")
        for flag, number in (("--rate", rate), ("--duration", duration)):
            if number is not None and not (math.isfinite(number) and number > 0):
                raise LoadPlanError(f"{flag} must be a number > 0 (got {number})")
        if duration is not None and requests is not None:
            raise LoadPlanError("give --requests N or --duration D, not both")
        if rate is not None:
            if duration is not None:
                count = math.floor(rate * duration + 1e-9)
                if count < 1:
                    raise LoadPlanError(f"--rate {rate:g} for --duration {duration:g} s sends "
                                        "no request: make the rate or the duration larger")
            else:
                count = requests if requests is not None else DEFAULT_REQUESTS
            return cls("open-loop", count, 1, float(rate), count / rate)
        if concurrency is not None:
            if duration is not None:
                return cls("closed-loop", None, concurrency, None, float(duration))
            return cls("closed-loop", requests if requests is not None else DEFAULT_REQUESTS,
                       concurrency)
        if duration is not None:
            raise LoadPlanError("--duration needs --rate R (open loop) or --concurrency C "
                                "(closed loop); a sequential run takes --requests N")
        return cls("sequential", requests if requests is not None else DEFAULT_REQUESTS)

    def describe(self) -> str:
        """One line, e.g. ``open loop: 20 requests/s for 10 s (200 requests)``."""
        if self.mode == "open-loop":
            return (f"open loop: {self.rate_rps:g} requests/s for {self.duration_s:g} s "
                    f"({self.requests} requests)")
        if self.mode == "closed-loop":
            amount = (f"for {self.duration_s:g} s" if self.requests is None
                      else f"{self.requests} requests")
            return f"closed loop: {self.concurrency} at a time, {amount}"
        return f"sequential: {self.requests} requests"

    def to_metadata(self) -> dict[str, Any]:
        return {"mode": self.mode, "requests": self.requests, "concurrency": self.concurrency,
                "rate_rps": self.rate_rps, "duration_s": self.duration_s}


def intended_send_ns(seq: int, rate_rps: float) -> int:
    """When request ``seq`` is due in an open loop, in ns since the start: ``seq / rate``."""
    return round(seq * 1e9 / rate_rps)


def open_loop_workers(rate_rps: float) -> int:
    """Connections an open loop keeps: enough for a quarter second of arrivals (a throttling
    stall is ~0.1 s), at least 4, at most 64. Beyond that, due requests wait for a free
    connection, and that wait is part of their latency."""
    return max(4, min(MAX_OPEN_LOOP_WORKERS, math.ceil(rate_rps * 0.25)))


class _Recorder:
    """Passes completed requests to ``on_record`` one at a time until it is frozen, and
    stops the run after too many transport failures in a row."""

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

    def freeze(self) -> None:
        """No record gets through after this returns (one being written is finished first)."""
        self.stop.set()
        with self._lock:
            self._frozen = True


class _Tickets:
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


def _run_workers(count: int, work: Callable[[httpx.Client, httpx.Request, int], None], url: str,
                 recorder: _Recorder, *, new_connection: bool, timeout: float) -> None:
    """Run ``work(client, request, run_start_ns)`` in ``count`` threads, each with its own
    client and request, and wait for them in a way Ctrl-C/SIGTERM can interrupt.

    Clients and requests are made first (sharing one TLS context: making one per client costs
    ~80 ms of CPU) and the clock starts when every worker is ready, so the set-up is never
    counted in a latency nor delays the first due requests of an open loop."""
    tls = httpx.create_ssl_context()
    headers = request_headers(new_connection)
    clients = [httpx.Client(timeout=timeout, headers=headers, verify=tls) for _ in range(count)]
    errors: list[BaseException] = []
    clock: list[int] = []
    ready = threading.Barrier(count, action=lambda: clock.append(time.perf_counter_ns()))

    def body(client: httpx.Client) -> None:
        try:
            with client:
                request = client.build_request("GET", url)
                ready.wait()
                work(client, request, clock[0])
        except threading.BrokenBarrierError:
            pass  # another worker failed before the start; its error is reported
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            errors.append(exc)
            recorder.stop.set()
            ready.abort()

    threads = [threading.Thread(target=body, args=(client,), name=f"http-timing-worker-{i}",
                                daemon=True) for i, client in enumerate(clients)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(_JOIN_POLL_S)
    finally:
        # Interrupted or done: nothing more reaches on_record. Workers still waiting for an
        # answer are daemons; they end with their request (or with the process).
        recorder.freeze()
        ready.abort()
    if errors:
        raise errors[0]


def time_closed_loop(
    url: str,
    concurrency: int,
    on_record: Callable[[RequestRecord], None],
    *,
    requests: int | None = DEFAULT_REQUESTS,
    duration_s: float | None = None,
    new_connection: bool = False,
    timeout: float = 30.0,
    max_consecutive_failures: int = 5,
    outcome: RunOutcome | None = None,
) -> RunOutcome:
    """``concurrency`` workers send ``requests`` GETs in all (or, with ``duration_s``, start
    new ones until that many seconds have passed), each as soon as its previous one is done."""
    if requests is None and duration_s is None:
        raise ValueError("a closed loop needs requests or duration_s")
    outcome = outcome if outcome is not None else RunOutcome()
    recorder = _Recorder(on_record, outcome, max_consecutive_failures)
    tickets = _Tickets(requests)

    def work(client: httpx.Client, request: httpx.Request, run_start: int) -> None:
        deadline = None if duration_s is None else run_start + round(duration_s * 1e9)
        while not recorder.stop.is_set():
            if deadline is not None and time.perf_counter_ns() >= deadline:
                return
            seq = tickets.take()
            if seq is None:
                return
            recorder.add(send_timed(client, request, seq, run_start))

    _run_workers(concurrency, work, url, recorder, new_connection=new_connection,
                 timeout=timeout)
    return outcome


def time_open_loop(
    url: str,
    rate_rps: float,
    requests: int,
    on_record: Callable[[RequestRecord], None],
    *,
    workers: int | None = None,
    new_connection: bool = False,
    timeout: float = 30.0,
    max_consecutive_failures: int = 5,
    outcome: RunOutcome | None = None,
) -> RunOutcome:
    """Send ``requests`` GETs, request ``i`` due at ``i / rate_rps`` s, over ``workers``
    connections (default ``open_loop_workers``); latency from the intended send time."""
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise ValueError(f"rate must be > 0 (got {rate_rps})")
    outcome = outcome if outcome is not None else RunOutcome()
    recorder = _Recorder(on_record, outcome, max_consecutive_failures)
    tickets = _Tickets(requests)
    pool = min(workers or open_loop_workers(rate_rps), requests)

    def work(client: httpx.Client, request: httpx.Request, run_start: int) -> None:
        while not recorder.stop.is_set():
            seq = tickets.take()
            if seq is None:
                return
            scheduled = intended_send_ns(seq, rate_rps)
            wait_ns = run_start + scheduled - time.perf_counter_ns()
            if wait_ns > 0 and recorder.stop.wait(wait_ns / 1e9):
                return  # stopped while waiting: this request was never sent
            recorder.add(send_timed(client, request, seq, run_start, scheduled_ns=scheduled))

    _run_workers(pool, work, url, recorder, new_connection=new_connection, timeout=timeout)
    return outcome


def time_plan(
    url: str,
    plan: LoadPlan,
    on_record: Callable[[RequestRecord], None],
    *,
    new_connection: bool = False,
    timeout: float = 30.0,
    max_consecutive_failures: int = 5,
    outcome: RunOutcome | None = None,
) -> RunOutcome:
    """Run ``plan`` against ``url`` (sequential, closed loop or open loop)."""
    outcome = outcome if outcome is not None else RunOutcome()
    common: dict[str, Any] = dict(new_connection=new_connection, timeout=timeout,
                                  max_consecutive_failures=max_consecutive_failures,
                                  outcome=outcome)
    if plan.mode == "open-loop":
        assert plan.rate_rps is not None and plan.requests is not None
        return time_open_loop(url, plan.rate_rps, plan.requests, on_record, **common)
    if plan.mode == "closed-loop":
        return time_closed_loop(url, plan.concurrency, on_record, requests=plan.requests,
                                duration_s=plan.duration_s, **common)
    assert plan.requests is not None
    return time_sequential(url, plan.requests, on_record, **common)
