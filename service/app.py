"""The FastAPI application: ``/cpuBurnFlow``, ``/healthz``, ``/limits``.

``create_app(settings)`` builds an app; the module-level ``app`` is built from the
``BURN_SERVICE_*`` environment, so ``uvicorn service.app:app`` works as well as ``burn-service``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from service import __version__
from service.accesslog import install_access_log_filter
from service.burn import burn
from service.cgroup import CpuStat, CpuStatProbe, limit_in_force
from service.config import Settings
from service.errors import install_error_handlers
from service.guard import install_guard, resolve_max_concurrent, resolve_max_queued
from service.metrics import install_metrics
from service.pages import register_pages, validation_error_page, wants_page
from service.throttle import Throttle

__all__ = ["app", "create_app", "format_server_timing", "kernel_throttling", "work_checkpoint"]

DEFAULT_ITERATIONS = 5000


def format_server_timing(metrics: Mapping[str, float | tuple[float, str]]) -> str:
    """``{"burn": 4.93, "kernel-throttled": (70.0, "periods=1")}`` ->
    ``burn;dur=4.930, kernel-throttled;dur=70.000;desc="periods=1"`` (durations in ms)."""
    parts = []
    for name, value in metrics.items():
        ms, desc = value if isinstance(value, tuple) else (value, "")
        parts.append(f"{name};dur={ms:.3f}" + (f';desc="{desc}"' if desc else ""))
    return ", ".join(parts)


def kernel_throttling(probe: CpuStatProbe | None,
                      before: CpuStat | None) -> dict[str, tuple[float, str]]:
    """The kernel's throttling of our cgroup since ``before`` as a Server-Timing metric: the
    delta of cpu.stat's throttled time and nr_throttled. Exact for sequential requests; under
    concurrency it also counts throttling that hit while other requests ran."""
    after = probe.sample() if probe is not None and before is not None else None
    if after is None or before is None:
        return {}
    delta = after - before
    return {"kernel-throttled": (delta.throttled_ns / 1e6, f"periods={delta.nr_throttled}")}


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings if settings is not None else Settings.from_env()
    app = FastAPI(
        title="throttle-lab burn service",
        version=__version__,
        description="A CPU-burn service to see what CPU limits do to latency.",
    )
    app.state.settings = settings
    # the cgroup whose quota is in force, read around each burn (None: no cpu.stat readable)
    kernel = app.state.kernel_probe = CpuStatProbe.locate()
    # the in-process throttle (--cpu-limit; off at 0): budget = this process's CPU time
    throttle = app.state.throttle = Throttle.from_settings(settings)
    metrics = install_metrics(app, throttle, kernel)
    # parameter name -> (minimum, maximum), for 422 messages that give the allowed range
    app.state.parameter_ranges = {"iterations": (0, settings.max_iterations),
                                  "counter": (0, settings.max_counter)}

    @app.exception_handler(RequestValidationError)
    async def _invalid_parameter(request: Request, exc: RequestValidationError) -> Response:
        body = describe_validation_error(app, exc)
        if wants_page(request):  # a browser on /pi or /: a readable page, never the input
            return validation_error_page(request, body, describe_limits(settings))
        return JSONResponse(status_code=422, content=body)

    @app.get("/cpuBurnFlow", summary="Burn CPU in a busy loop of `iterations` iterations")
    def cpu_burn_flow(
        iterations: int = Query(DEFAULT_ITERATIONS, ge=0, le=settings.max_iterations,
                                description="loop iterations (~1 microsecond of CPU each)"),
    ) -> JSONResponse:
        # A sync route: FastAPI runs it in the threadpool, never on the event loop.
        before = kernel.sample() if kernel is not None else None
        with throttle.start() as work:  # waits first while the process is throttled
            result = burn(iterations, work.checkpoint)
        metrics.observe_burn(result.cpu_ns)
        body = {"result": "success", "iterations": result.iterations,
                "cpu_ns": result.cpu_ns, "wall_ns": result.wall_ns}
        timing = {"burn": result.wall_ns / 1e6, "cpu": result.cpu_ns / 1e6,
                  **({"throttle": work.paused_ns / 1e6} if throttle.enabled else {}),
                  **kernel_throttling(kernel, before)}
        return JSONResponse(body, headers={"Server-Timing": format_server_timing(timing)})

    @app.get("/healthz", summary="Liveness and readiness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/limits", summary="The CPU limits in force")
    async def limits() -> dict[str, Any]:
        return describe_limits(settings)

    register_pages(
        app, max_counter=settings.max_counter, limits=lambda: describe_limits(settings),
        checkpoint=lambda: work_checkpoint(app),
        before_work=lambda: kernel.sample() if kernel is not None else None,
        server_timing=lambda result, throttle_ns, before: format_server_timing(
            {"burn": result.wall_ns / 1e6, "cpu": result.cpu_ns / 1e6,
             **({"throttle": (throttle_ns or 0) / 1e6} if throttle.enabled else {}),
             **kernel_throttling(kernel, before)}),
    )
    # last, once every route exists: JSON/HTML errors and a logged 500, then the cap on CPU
    # work (a waiting line beyond --max-concurrent, 503 + Retry-After beyond --max-queued),
    # innermost, and a query-free access log
    install_error_handlers(app)
    install_guard(app, resolve_max_concurrent(settings), resolve_max_queued(settings))
    install_access_log_filter(getattr(route, "path", "") for route in app.routes)
    return app


def work_checkpoint(app: FastAPI) -> Callable[[], object] | None:
    """The in-process throttle's checkpoint for one request's work loop (the pi page, ...).

    Call it once per request, from a sync route (its checkpoint sleeps), and call what it
    returns every ~0.1-0.5 ms of CPU, between chunks of the loop; the wall time spent in those
    calls is the request's ``throttle;dur``. None when ``--cpu-limit`` is off. In ``cfs`` mode
    each call pauses while this process's quota is spent (the first one also makes a request
    that arrived while throttled wait); in ``boundary`` mode only the first call waits.
    Routes that can wrap their work use ``app.state.throttle.start()`` instead (a ``Work``
    with ``checkpoint`` and ``paused_ns``; see ``service.throttle``).
    """
    throttle: Throttle = app.state.throttle
    return throttle.work_checkpoint()


def describe_limits(settings: Settings) -> dict[str, Any]:
    """What ``/limits`` reports: the machine's CPUs and the configured maxima."""
    return {
        "cpu_count": os.cpu_count(),
        "max_iterations": settings.max_iterations,
        "max_counter": settings.max_counter,
        "max_concurrent": resolve_max_concurrent(settings),
        "max_queued": resolve_max_queued(settings),
        "workers": settings.workers,
        "inprocess": ({"cpu_limit_percent": settings.cpu_limit, "cycle_ms": settings.throttle_cycle,
                       "mode": settings.throttle_mode} if settings.cpu_limit > 0 else None),
        "cgroup": limit.as_dict() if (limit := limit_in_force()) is not None else None,
    }


def describe_validation_error(app: FastAPI, exc: RequestValidationError) -> dict[str, Any]:
    """A 422 body that names each bad parameter and its allowed range, without echoing input."""
    ranges: dict[str, tuple[int, int]] = app.state.parameter_ranges
    problems = []
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
