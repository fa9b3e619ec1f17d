"""The FastAPI application: ``/cpuBurnFlow``, ``/healthz``, ``/limits``.

``create_app(settings)`` builds an app; the module-level ``app`` is built from the
``BURN_SERVICE_*`` environment, so ``uvicorn service.app:app`` works as well as ``burn-service``.
The plain ``GET /cpuBurnFlow`` takes a lean lane in front of FastAPI (``service.burnroute``),
through the app's own middleware; everything else, a bad query included, is FastAPI's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from service import __version__
from service.accesslog import install_access_log_filter
from service.burn import DEFAULT_ITERATIONS, calibration_for, resolve_max_threads
from service.burnroute import BURN_PATH, BurnLane, BurnWork
from cpuquota.cgroupfs import CpuStatReader
from service.config import Settings
from service.errors import error_body, install_error_handlers
from service.guard import install_guard, resolve_max_concurrent, resolve_max_queued
from service.limits import describe_limits
from service.metrics import CalibrationCollector, install_metrics
from service.pages import register_pages, validation_error_page, wants_page
from service.throttle import Throttle
from service.timing import format_server_timing, kernel_throttling

# format_server_timing and kernel_throttling live in service.timing; still importable from here
__all__ = ["BurnServiceApp", "app", "create_app", "format_server_timing", "kernel_throttling"]


class BurnServiceApp(FastAPI):
    """FastAPI with :class:`~service.burnroute.BurnLane` in front: a plain ``GET /cpuBurnFlow``
    goes through the app's middleware straight to the burn, past FastAPI's own layers."""

    burn_lane: BurnLane | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        lane = self.burn_lane
        if scope["type"] == "lifespan":
            receive = _shutdown_when_cancelled(receive)
        try:
            if lane is not None and lane.takes(scope):
                if not lane.built:  # at the first request, like Starlette's middleware stack
                    lane.build(self.user_middleware)
                scope["app"] = self
                await lane(scope, receive, send)
                return
            await super().__call__(scope, receive, send)
        except asyncio.CancelledError:
            if scope["type"] != "http":
                raise
            await self._stopping(send)

    async def _stopping(self, send: Send) -> None:
        """uvicorn's shutdown cancelled a request still running after its graceful wait
        (Ctrl-C or SIGTERM): its burn gives up, and it gets a 503 instead of a traceback in
        the log (nothing, when its answer had begun)."""
        if self.burn_lane is not None:
            self.burn_lane.work.stop()
        body = json.dumps(error_body(503, "the service is stopping")).encode()
        try:
            await send({"type": "http.response.start", "status": 503, "headers": [
                (b"content-length", b"%d" % len(body)), (b"content-type", b"application/json"),
                (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
        except (RuntimeError, OSError):  # the answer had begun, or the client is gone
            pass


def _shutdown_when_cancelled(receive: Receive) -> Receive:
    """The lifespan's ``receive``, for a second Ctrl-C: uvicorn then skips the lifespan's
    shutdown and cancels it at the end; taken as the shutdown, the app's clean-up runs and
    nothing is logged as failed."""

    async def wrapped() -> Message:
        try:
            return await receive()
        except asyncio.CancelledError:
            return {"type": "lifespan.shutdown"}

    return wrapped


def _enter_quota() -> None:
    """``burn-service --cpus``: the quota written into the service's own group now that it has
    started and before it listens (``service.cpu_quota.quota_at_ready``). When it cannot be,
    one line and exit 125: the service never answers without its quota."""
    from cpuquota.cgroupfs import CgroupError
    from service.cpu_quota import EXIT_SETUP_FAILED, quota_at_ready

    log = logging.getLogger("uvicorn.error")
    try:
        limit = quota_at_ready()
    except CgroupError as exc:
        log.error("burn-service: %s", exc)
        sys.stderr.flush()
        os._exit(EXIT_SETUP_FAILED)
    if limit is not None:
        log.info("quota in force from now on: %s", limit.describe_kernel())


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    calibration = getattr(app.state, "calibration", None)
    if calibration is not None:  # what an iteration costs here, next to uvicorn's own lines
        logging.getLogger("uvicorn.error").info("%s", calibration.startup_line())
    _enter_quota()
    yield
    lane = getattr(app, "burn_lane", None)
    if lane is not None:
        lane.close()


def create_app(settings: Settings | None = None) -> BurnServiceApp:
    settings = settings if settings is not None else Settings.from_env()
    app = BurnServiceApp(
        title="throttle-lab burn service",
        version=__version__,
        description="A CPU-burn service to see what CPU limits do to latency.",
        lifespan=_lifespan,
    )
    app.state.settings = settings
    # what one burn iteration is on this machine (measured once per process, CPU time)
    calibration = app.state.calibration = calibration_for(settings)
    # the cgroup whose quota is in force, read around each burn (None: no cpu.stat readable)
    kernel = app.state.kernel_probe = CpuStatReader.locate()
    # the in-process throttle (--cpu-limit; off at 0): cfs charges this process's CPU time,
    # boundary each worker thread's work
    throttle = app.state.throttle = Throttle.from_settings(settings)
    metrics = install_metrics(app, throttle, kernel)
    metrics.register(CalibrationCollector(calibration))
    # parameter name -> (minimum, maximum), for 422 messages that give the allowed range
    max_threads = app.state.max_threads = resolve_max_threads(settings)
    app.state.parameter_ranges = {"iterations": (0, settings.max_iterations),
                                  "counter": (0, settings.max_counter),
                                  "threads": (1, max_threads)}

    @app.exception_handler(RequestValidationError)
    async def _invalid_parameter(request: Request, exc: RequestValidationError) -> Response:
        body = describe_validation_error(app, exc)
        if wants_page(request):  # a browser on /pi or /: a readable page, never the input
            return validation_error_page(request, body, describe_limits(app))
        return JSONResponse(status_code=422, content=body)

    work = BurnWork(throttle, kernel, metrics.observe_burn,
                    max_helpers=resolve_max_concurrent(settings) * (max_threads - 1),
                    calibration=calibration)

    @app.get(BURN_PATH, summary="Burn CPU in a busy loop of `iterations` iterations")
    def cpu_burn_flow(
        iterations: int = Query(DEFAULT_ITERATIONS, ge=0, le=settings.max_iterations,
                                description="loop iterations (1 microsecond of CPU each, "
                                "calibrated at start: --iteration-us)"),
        threads: int = Query(1, ge=1, le=max_threads,
                             description="burn `iterations` on each of this many threads at "
                             "once (really in parallel: the burn runs in C, without the GIL)"),
    ) -> Response:
        # FastAPI's way, for what the lane does not take: a sync route, run in the threadpool
        body, timing = work(iterations, threads)
        return Response(body, media_type="application/json",
                        headers={"Server-Timing": timing})

    @app.get("/healthz", summary="Liveness and readiness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/limits", summary="The CPU limits in force")
    async def limits() -> dict[str, Any]:
        return describe_limits(app)

    register_pages(app)  # /, /pi, /api/pi: they read app.state like the routes above
    # last, once every route exists: JSON/HTML errors and a logged 500, then the cap on CPU
    # work (a waiting line beyond --max-concurrent, 503 + Retry-After beyond --max-queued),
    # innermost, and a query-free access log
    install_error_handlers(app)
    install_guard(app, resolve_max_concurrent(settings), resolve_max_queued(settings))
    install_access_log_filter(str(getattr(route, "path", "")) for route in app.routes)
    # the plain GET /cpuBurnFlow: through the same middleware, in the lane's worker threads
    route = next(r for r in app.routes if getattr(r, "path", None) == BURN_PATH)
    app.burn_lane = BurnLane(work, route, settings.max_iterations)
    return app


def describe_validation_error(app: FastAPI, exc: RequestValidationError) -> dict[str, Any]:
    """A 422 body that names each bad parameter and its allowed range, without echoing input."""
    ranges: dict[str, tuple[int, int]] = app.state.parameter_ranges
    problems: list[dict[str, Any]] = []
    for error in exc.errors():
        loc = error.get("loc", ())
        name = str(loc[-1]) if loc else "request"
        if name in ranges:
            lo, hi = ranges[name]
            message = f"{name} must be an integer in [{lo}, {hi}]"
            problems.append({"parameter": name, "allowed": {"min": lo, "max": hi},
                             "message": message})
        else:
            problems.append({"parameter": name, "message": f"{name}: {error.get('msg', 'invalid')}"})
    return {"error": "invalid request", "detail": problems,
            "message": "; ".join(p["message"] for p in problems)}


app = create_app()
