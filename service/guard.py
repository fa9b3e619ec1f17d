"""The concurrency cap on CPU work: at most ``--max-concurrent`` requests burn at once,
at most ``--max-queued`` more wait in line for a slot, and the rest get 503 at once.

A CPU-burn service is a denial-of-service endpoint by design. Without a cap, a flood of
``/cpuBurnFlow`` requests queues in front of the threadpool: every waiting request holds a
connection, a task and its memory, and all of them get slower together. With the cap, a
request on a guarded path (``/cpuBurnFlow``, ``/pi``, ``/api/pi``) beyond ``--max-concurrent``
waits in a bounded line, first come first served, like nginx's ``limit_req ... burst`` or a
listen backlog: an ``await`` on a future, no thread, no CPU. When a request finishes, its slot
goes straight to the first in line. Beyond ``--max-concurrent + --max-queued`` a request is
answered at once with ``503`` and ``Retry-After: 1`` (JSON for API clients, the HTML error
page for a browser on ``/pi``), so the work in progress and the memory it needs stay bounded
and the client knows to come back. A modest, well-behaved concurrency (16 keep-alive clients
on 4 slots) is served, not turned into a storm of 503s that clients retry at once.

``ConcurrencyGuard`` is a pure ASGI middleware. Under the cap the hot path is one set lookup,
an integer compare and two integer updates, no extra ``await``. The counters and the line live
in a ``GuardState`` (pure: the line holds opaque waiter tokens; the middleware's are futures)
that the middleware, ``/metrics`` and the tests share. It needs no lock: the middleware runs on
the app's event loop (one per worker process), and the sync routes it guards run in the
threadpool *inside* the guarded call, so a slot is held until the work is done and the response
is sent, also when the client went away mid-burn. A client that goes away while *waiting*
leaves the line without taking a slot (its place is counted as ``abandoned`` and ``/metrics``
logs the request as status 499, nginx's "client closed request"). A request that waited gets
``queue;dur=<ms waited>`` added to its ``Server-Timing`` header; one that did not wait has no
``queue`` metric.

The cap and the line are per worker process (each has its own event loop and counters).
``--max-concurrent 0`` (the default) means ``2 × CPUs`` for the whole service, shared out
across ``--workers``; ``--max-queued 0`` (the default) means 8 × that per-process cap, and
``--max-queued -1`` means no line (503 at once beyond the cap).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import time
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from fastapi import FastAPI
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cpuquota.cgroupfs import available_cpus
from service.config import Settings
from service.errors import error_page, wants_html

__all__ = ["CLIENT_CLOSED_STATUS", "GUARDED_PATHS", "QUEUE_FACTOR", "RETRY_AFTER_S",
           "WAIT_BUCKETS_S", "ConcurrencyGuard", "GuardCollector", "GuardState",
           "available_cpus", "busy_body", "install_guard", "resolve_max_concurrent",
           "resolve_max_queued"]

GUARDED_PATHS = frozenset({"/cpuBurnFlow", "/pi", "/api/pi"})  # the routes that do CPU work
RETRY_AFTER_S = 1  # a burn takes milliseconds to seconds: one second is a fair first retry
QUEUE_FACTOR = 8   # default line: this many waiting requests per slot
CLIENT_CLOSED_STATUS = 499  # nginx's "client closed request": left the line, nothing sent
# upper bounds of the wait-time histogram, in seconds
WAIT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def resolve_max_concurrent(settings: Settings, cpus: int | None = None) -> int:
    """The cap one worker process enforces: ``--max-concurrent`` if set, else ``2 × CPUs``
    shared out across the workers (at least 1 each)."""
    if settings.max_concurrent > 0:
        return settings.max_concurrent
    cpus = available_cpus() if cpus is None else cpus
    return max(1, math.ceil(2 * cpus / settings.workers))


def resolve_max_queued(settings: Settings, cpus: int | None = None) -> int:
    """The line one worker process keeps: ``--max-queued`` if set, ``0`` (no line) for
    ``-1``, else ``QUEUE_FACTOR ×`` that process's cap."""
    if settings.max_queued > 0:
        return settings.max_queued
    if settings.max_queued < 0:
        return 0
    return QUEUE_FACTOR * resolve_max_concurrent(settings, cpus)


@dataclass
class GuardState:
    """The cap, the waiting line and their counters.

    A guarded request calls ``try_enter``; on False it ``join``s the line with a waiter token
    (False again: the line is full, answer 503). ``leave`` gives a slot back, or hands it
    straight to the first waiter, which it returns. A waiter that gives up calls ``abandon``.
    Invariant: somebody waits only while every slot is taken, so a newcomer never jumps the line.
    """

    limit: int
    queue_limit: int = 0
    in_flight: int = 0
    peak: int = 0           # the most requests in flight at once since start
    admitted: int = 0       # let through, at once or after waiting
    rejected: int = 0       # answered 503: every slot taken and the line full
    queued_peak: int = 0    # the longest the line has been
    abandoned: int = 0      # left the line before getting a slot (client went away)
    wait_counts: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS_S) + 1))
    wait_seconds: float = 0.0  # total time the requests that waited spent in line
    _line: dict[Hashable, None] = field(default_factory=dict, repr=False)  # insertion-ordered

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"the concurrency limit must be at least 1 (got {self.limit})")
        if self.queue_limit < 0:
            raise ValueError(f"the waiting line cannot be negative (got {self.queue_limit})")

    @property
    def queued(self) -> int:
        """Requests waiting in line now."""
        return len(self._line)

    def try_enter(self) -> bool:
        """Take a free slot (True), or False when all are taken: then ``join`` the line."""
        if self.in_flight >= self.limit:
            return False
        self.in_flight += 1
        self.admitted += 1
        if self.in_flight > self.peak:
            self.peak = self.in_flight
        return True

    def join(self, waiter: Hashable) -> bool:
        """Put ``waiter`` at the end of the line (True), or count a rejection (False: full)."""
        if self.in_flight < self.limit:
            raise RuntimeError("GuardState.join() while a slot is free: try_enter() first")
        if len(self._line) >= self.queue_limit:
            self.rejected += 1
            return False
        self._line[waiter] = None
        if len(self._line) > self.queued_peak:
            self.queued_peak = len(self._line)
        return True

    def leave(self) -> Hashable | None:
        """Give a slot back. If somebody waits, the slot goes to the first waiter, which is
        returned (wake it); else None."""
        if self.in_flight <= 0:
            raise RuntimeError("GuardState.leave() without a matching try_enter()")
        if self._line:
            waiter = next(iter(self._line))
            del self._line[waiter]
            self.admitted += 1
            return waiter  # in_flight unchanged: the slot changed hands
        self.in_flight -= 1
        return None

    def abandon(self, waiter: Hashable) -> bool:
        """``waiter`` gives up: True if it was still in line (it held nothing), False if a
        slot was already handed to it (then it must ``leave``)."""
        if waiter not in self._line:
            return False
        del self._line[waiter]
        self.abandoned += 1
        return True

    def observe_wait(self, seconds: float) -> None:
        """Count how long a request waited in line before it got its slot."""
        self.wait_counts[bisect.bisect_left(WAIT_BUCKETS_S, seconds)] += 1
        self.wait_seconds += seconds


def busy_body(limit: int, queue_limit: int = 0,
              retry_after_s: int = RETRY_AFTER_S) -> dict[str, object]:
    """The 503 JSON body: what happened, the cap and the line, and when to come back."""
    noun = "request" if limit == 1 else "requests"
    waiting = (f" and {queue_limit} waiting (--max-queued {queue_limit})" if queue_limit
               else "")
    return {"error": "busy",
            "message": f"the service is busy: {limit} {noun} doing CPU work already "
                       f"(--max-concurrent {limit}){waiting}; retry after {retry_after_s} s",
            "max_concurrent": limit, "max_queued": queue_limit, "retry_after_s": retry_after_s}


class ConcurrencyGuard:
    """Pure ASGI middleware: requests on ``paths`` beyond ``state.limit`` in flight wait in
    line (at most ``state.queue_limit``), beyond that they get 503."""

    def __init__(self, app: ASGIApp, state: GuardState,
                 paths: Iterable[str] = GUARDED_PATHS, retry_after_s: int = RETRY_AFTER_S,
                 routes: Mapping[str, object] | None = None) -> None:
        self.app = app
        self.state = state
        self.paths = frozenset(paths)
        # path -> route object: a 503 is answered before routing, so the guard sets
        # scope["route"] itself and /metrics counts the 503 under its route, not "other"
        self.routes = dict(routes or {})
        self.retry_after_s = retry_after_s
        self._body = busy_body(state.limit, state.queue_limit, retry_after_s)
        self._json = json.dumps(self._body, separators=(",", ":")).encode()
        self._headers = [(b"content-type", b"application/json"),
                         (b"content-length", str(len(self._json)).encode()),
                         (b"retry-after", str(retry_after_s).encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _route_path(scope) not in self.paths:
            await self.app(scope, receive, send)
            return
        if not self.state.try_enter():  # every slot taken: wait in line, or 503
            await self._wait_in_line(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._release()

    def _release(self) -> None:
        """Give the slot back, or hand it to the first waiter still waiting."""
        while (waiter := self.state.leave()) is not None:
            assert isinstance(waiter, asyncio.Future)
            if not waiter.done():
                waiter.set_result(None)
                return
            # a waiter that can no longer take its slot (never expected): pass it on

    async def _wait_in_line(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = self.state
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not state.join(slot):
            route = self.routes.get(_route_path(scope))
            if route is not None:
                scope["route"] = route
            await self._reject(scope, receive, send)
            return
        start = time.perf_counter()
        # While waiting, listen for the client going away: read what the server delivers
        # (the request, then http.disconnect) and replay it to the app later.
        received: list[Message] = []
        listener = asyncio.ensure_future(_listen(receive, received))
        try:
            await asyncio.wait((slot, listener), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled (server shutdown): leave the line or the slot
            listener.cancel()
            if not state.abandon(slot):
                self._release()
            raise
        if listener.done():  # the client went away (or receiving failed) while waiting
            if not listener.cancelled():
                listener.exception()  # retrieved, so asyncio does not log it
            if not state.abandon(slot):  # the slot came at the same moment: pass it on
                self._release()
            await self._closed(scope, send)
            return
        listener.cancel()
        waited = time.perf_counter() - start
        state.observe_wait(waited)
        timing = f"queue;dur={waited * 1e3:.3f}".encode()

        async def replay() -> Message:
            return received.pop(0) if received else await receive()

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": _add_server_timing(
                    message.get("headers", ()), timing)}
            await send(message)

        try:
            await self.app(scope, replay, send_with_timing)
        finally:
            self._release()

    async def _closed(self, scope: Scope, send: Send) -> None:
        """The client left the line: nothing to say to it, but /metrics logs a 499 under
        the route (the server drops a response to a closed connection)."""
        route = self.routes.get(_route_path(scope))
        if route is not None:
            scope["route"] = route
        try:
            await send({"type": "http.response.start", "status": CLIENT_CLOSED_STATUS,
                        "headers": [(b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
        except OSError:  # a server that raises on a closed connection: nothing to do
            pass

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        if wants_html(request):  # a browser on /pi: the HTML error page, as for a 422
            response = error_page(request, 503, str(self._body["message"]),
                                  headers={"Retry-After": str(self.retry_after_s)})
            await response(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 503, "headers": self._headers})
        await send({"type": "http.response.body", "body": self._json})


async def _listen(receive: Receive, received: list[Message]) -> None:
    """Keep the server's messages for a waiting request until the client disconnects."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        received.append(message)


def _add_server_timing(headers: Iterable[tuple[bytes, bytes]],
                       metric: bytes) -> list[tuple[bytes, bytes]]:
    """``headers`` with ``metric`` appended to the Server-Timing header (added if absent)."""
    out, found = [], False
    for name, value in headers:
        if not found and name.lower() == b"server-timing":
            value, found = value + b", " + metric, True
        out.append((name, value))
    if not found:
        out.append((b"server-timing", metric))
    return out


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root = scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


class GuardCollector(Collector):
    """``/metrics`` series of the cap and its line (prefix ``throttle_lab_concurrency_``):
    ``limit``, ``in_flight``, ``peak``, ``admitted_total``, ``rejected_total``,
    ``queue_limit``, ``queued``, ``queued_peak``, ``abandoned_total`` and the histogram
    ``queue_wait_seconds`` (how long the requests that waited spent in line)."""

    PREFIX = "throttle_lab_concurrency_"

    def __init__(self, state: GuardState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        s, p = self._state, self.PREFIX
        yield GaugeMetricFamily(p + "limit", "Most guarded requests (CPU work) allowed in "
                                "flight at once in this process (--max-concurrent)", value=s.limit)
        yield GaugeMetricFamily(p + "in_flight", "Guarded requests in flight now",
                                value=s.in_flight)
        yield GaugeMetricFamily(p + "peak", "Most guarded requests in flight at once since "
                                "start", value=s.peak)
        yield CounterMetricFamily(p + "admitted", "Guarded requests let through, at once or "
                                  "after waiting in line", value=s.admitted)
        yield CounterMetricFamily(p + "rejected", "Guarded requests answered 503 because every "
                                  "slot was taken and the waiting line was full", value=s.rejected)
        yield GaugeMetricFamily(p + "queue_limit", "Most guarded requests allowed to wait for "
                                "a slot in this process (--max-queued)", value=s.queue_limit)
        yield GaugeMetricFamily(p + "queued", "Guarded requests waiting for a slot now",
                                value=s.queued)
        yield GaugeMetricFamily(p + "queued_peak", "Most guarded requests waiting for a slot "
                                "at once since start", value=s.queued_peak)
        yield CounterMetricFamily(p + "abandoned", "Guarded requests whose client went away "
                                  "while they waited for a slot", value=s.abandoned)
        cumulative, buckets = 0, []
        for bound, count in zip((*WAIT_BUCKETS_S, math.inf), s.wait_counts):
            cumulative += count
            buckets.append(("+Inf" if bound == math.inf else repr(bound), cumulative))
        yield HistogramMetricFamily(p + "queue_wait_seconds", "Time guarded requests waited "
                                    "in line for a slot (only those that waited)",
                                    buckets=buckets, sum_value=s.wait_seconds)

    def describe(self) -> Iterable[Metric]:
        p = self.PREFIX
        return [GaugeMetricFamily(p + "limit", ""), GaugeMetricFamily(p + "in_flight", ""),
                GaugeMetricFamily(p + "peak", ""), CounterMetricFamily(p + "admitted", ""),
                CounterMetricFamily(p + "rejected", ""), GaugeMetricFamily(p + "queue_limit", ""),
                GaugeMetricFamily(p + "queued", ""), GaugeMetricFamily(p + "queued_peak", ""),
                CounterMetricFamily(p + "abandoned", ""),
                HistogramMetricFamily(p + "queue_wait_seconds", "")]


def install_guard(app: FastAPI, limit: int, queue_limit: int = 0,
                  paths: Iterable[str] = GUARDED_PATHS,
                  retry_after_s: int = RETRY_AFTER_S) -> GuardState:
    """Cap ``paths`` of ``app`` at ``limit`` requests in flight and ``queue_limit`` more
    waiting; the counters are ``app.state.concurrency`` and, if the app has ``/metrics``,
    series there.

    Call it once the routes exist. The guard goes innermost of the user middleware (appended,
    not ``add_middleware``'s outermost), so ``/metrics`` counts each 503 and the error
    middleware catches anything raised below it."""
    paths = frozenset(paths)
    routes = {path: route for route in app.routes
              if (path := getattr(route, "path", None)) in paths}
    missing = paths - routes.keys()
    if missing:
        raise ValueError(f"no route for guarded path(s): {', '.join(sorted(missing))}")
    state = app.state.concurrency = GuardState(limit, queue_limit)
    app.user_middleware.append(Middleware(ConcurrencyGuard, state=state, paths=paths,
                                          retry_after_s=retry_after_s, routes=routes))
    metrics = getattr(app.state, "metrics", None)
    if metrics is not None:
        metrics.register(GuardCollector(state))
    return state
