"""The concurrency cap on CPU work: at most ``--max-concurrent`` requests burn at once.

A CPU-burn service is a denial-of-service endpoint by design. Without a cap, a flood of
``/cpuBurnFlow`` requests queues in front of the threadpool: every waiting request holds a
connection, a task and its memory, and all of them get slower together. With the cap, the
``N + 1``-th concurrent request on a guarded path (``/cpuBurnFlow``, ``/pi``, ``/api/pi``) is
answered at once with ``503`` and ``Retry-After: 1`` (JSON for API clients, the HTML error page
for a browser on ``/pi``), so the work in progress and the memory it needs stay bounded and
the client knows to come back.

``ConcurrencyGuard`` is a pure ASGI middleware: on the hot path one set lookup, an integer
compare and two integer updates. The counters live in a ``GuardState`` (pure, no I/O) that
the middleware, ``/metrics`` and the tests share. It needs no lock: the middleware runs on the
app's event loop (one per worker process), and the sync routes it guards run in the threadpool
*inside* the guarded call, so a slot is held until the work is done and the response is sent,
also when the client went away mid-burn.

The cap is per worker process (each has its own event loop and counters). ``--max-concurrent
0`` (the default) means ``2 × CPUs`` for the whole service, shared out across ``--workers``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from fastapi import FastAPI
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from service.config import Settings
from service.errors import error_page, wants_html

__all__ = ["GUARDED_PATHS", "RETRY_AFTER_S", "ConcurrencyGuard", "GuardCollector", "GuardState",
           "available_cpus", "busy_body", "install_guard", "resolve_max_concurrent"]

GUARDED_PATHS = frozenset({"/cpuBurnFlow", "/pi", "/api/pi"})  # the routes that do CPU work
RETRY_AFTER_S = 1  # a burn takes milliseconds to seconds: one second is a fair first retry


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a cpuset), else ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def resolve_max_concurrent(settings: Settings, cpus: int | None = None) -> int:
    """The cap one worker process enforces: ``--max-concurrent`` if set, else ``2 × CPUs``
    shared out across the workers (at least 1 each)."""
    if settings.max_concurrent > 0:
        return settings.max_concurrent
    cpus = available_cpus() if cpus is None else cpus
    return max(1, math.ceil(2 * cpus / settings.workers))


@dataclass
class GuardState:
    """The cap and its counters. ``try_enter`` / ``leave`` bracket one guarded request."""

    limit: int
    in_flight: int = 0
    peak: int = 0       # the most requests in flight at once since start
    admitted: int = 0
    rejected: int = 0

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"the concurrency limit must be at least 1 (got {self.limit})")

    def try_enter(self) -> bool:
        """Take a slot if one is free (True), or count a rejection (False)."""
        if self.in_flight >= self.limit:
            self.rejected += 1
            return False
        self.in_flight += 1
        self.admitted += 1
        if self.in_flight > self.peak:
            self.peak = self.in_flight
        return True

    def leave(self) -> None:
        if self.in_flight <= 0:
            raise RuntimeError("GuardState.leave() without a matching try_enter()")
        self.in_flight -= 1


def busy_body(limit: int, retry_after_s: int = RETRY_AFTER_S) -> dict[str, object]:
    """The 503 JSON body: what happened, the cap, and when to come back."""
    noun = "request" if limit == 1 else "requests"
    return {"error": "busy",
            "message": f"the service is busy: {limit} {noun} doing CPU work already "
                       f"(--max-concurrent {limit}); retry after {retry_after_s} s",
            "max_concurrent": limit, "retry_after_s": retry_after_s}


class ConcurrencyGuard:
    """Pure ASGI middleware: requests on ``paths`` beyond ``state.limit`` in flight get 503."""

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
        self._json = json.dumps(busy_body(state.limit, retry_after_s),
                                separators=(",", ":")).encode()
        self._headers = [(b"content-type", b"application/json"),
                         (b"content-length", str(len(self._json)).encode()),
                         (b"retry-after", str(retry_after_s).encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _route_path(scope) not in self.paths:
            await self.app(scope, receive, send)
            return
        state = self.state
        if not state.try_enter():
            route = self.routes.get(_route_path(scope))
            if route is not None:
                scope["route"] = route
            await self._reject(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            state.leave()

    async def _reject(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        if wants_html(request):  # a browser on /pi: the HTML error page, as for a 422
            message = str(busy_body(self.state.limit, self.retry_after_s)["message"])
            response = error_page(request, 503, message,
                                  headers={"Retry-After": str(self.retry_after_s)})
            await response(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 503, "headers": self._headers})
        await send({"type": "http.response.body", "body": self._json})


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root = scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


class GuardCollector(Collector):
    """``/metrics`` series of the cap: ``throttle_lab_concurrency_limit``,
    ``..._in_flight``, ``..._peak``, ``..._admitted_total``, ``..._rejected_total``."""

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
        yield CounterMetricFamily(p + "admitted", "Guarded requests let through",
                                  value=s.admitted)
        yield CounterMetricFamily(p + "rejected", "Guarded requests answered 503 because the "
                                  "limit was reached", value=s.rejected)

    def describe(self) -> Iterable[Metric]:
        p = self.PREFIX
        return [GaugeMetricFamily(p + "limit", ""), GaugeMetricFamily(p + "in_flight", ""),
                GaugeMetricFamily(p + "peak", ""), CounterMetricFamily(p + "admitted", ""),
                CounterMetricFamily(p + "rejected", "")]


def install_guard(app: FastAPI, limit: int, paths: Iterable[str] = GUARDED_PATHS,
                  retry_after_s: int = RETRY_AFTER_S) -> GuardState:
    """Cap ``paths`` of ``app`` at ``limit`` requests in flight; the counters are
    ``app.state.concurrency`` and, if the app has ``/metrics``, series there.

    Call it once the routes exist. The guard goes innermost of the user middleware (appended,
    not ``add_middleware``'s outermost), so ``/metrics`` counts each 503 and the error
    middleware catches anything raised below it."""
    paths = frozenset(paths)
    routes = {path: route for route in app.routes
              if (path := getattr(route, "path", None)) in paths}
    missing = paths - routes.keys()
    if missing:
        raise ValueError(f"no route for guarded path(s): {', '.join(sorted(missing))}")
    state = app.state.concurrency = GuardState(limit)
    app.user_middleware.append(Middleware(ConcurrencyGuard, state=state, paths=paths,
                                          retry_after_s=retry_after_s, routes=routes))
    metrics = getattr(app.state, "metrics", None)
    if metrics is not None:
        metrics.register(GuardCollector(state))
    return state
