"""Server-rendered pages: ``/`` (landing), ``/pi`` (pi page) and ``/api/pi`` (the same as JSON).

Pi is computed on the server, in the request's worker thread, so a CPU limit on the service
(kernel quota or the in-process throttle) shows up as long gaps in the pi loop. The pages
use Jinja2 templates from ``service/templates`` with autoescaping on and no external assets.

``register_pages(app)`` adds the routes; ``wants_page`` and ``validation_error_page`` let the
app's 422 handler answer a browser with a readable page instead of JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.templating import Jinja2Templates

from service.burn import DEFAULT_ITERATIONS
from service.limits import describe_limits
from service.pi import (
    PAUSE_THRESHOLD_US,
    GapBucket,
    PauseSummary,
    PiResult,
    compute_pi,
    gap_buckets,
    gap_series,
    summarize_pauses,
)
from service.timing import kernel_reading, work_timing

__all__ = [
    "DEFAULT_COUNTER",
    "PAGE_PATHS",
    "Chart",
    "build_chart",
    "describe_pauses",
    "flatten_limits",
    "limit_headline",
    "pi_body",
    "register_pages",
    "templates",
    "validation_error_page",
    "wants_page",
]

DEFAULT_COUNTER = 100_000
PAGE_PATHS = frozenset({"/", "/pi"})  # paths whose bad input gets an HTML 422 for browsers

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
templates = Jinja2Templates(env=jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
    autoescape=True,  # every value is escaped, whatever the template's name
    undefined=jinja2.StrictUndefined,
))

# ----------------------------------------------------------------------------- pure helpers

def describe_pauses(pauses: PauseSummary, wall_ns: int) -> str:
    """``"8 pauses, 712 ms of 797 ms"``: how much of the loop's wall time was pauses."""
    noun = "pause" if pauses.count == 1 else "pauses"
    return f"{pauses.count} {noun}, {_ms(pauses.total_us * 1000)} of {_ms(wall_ns)}"


def _ms(ns: float) -> str:
    ms = ns / 1e6
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    return f"{ms:.2f} ms"


def flatten_limits(limits: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``/limits`` as (name, value) rows: nested sections become ``section.key``; None is off."""
    rows: list[tuple[str, str]] = []
    for key, value in limits.items():
        if isinstance(value, Mapping):
            if not value:
                rows.append((key, "none"))
            for sub, item in value.items():
                rows.append((f"{key}.{sub}", _text(item)))
        else:
            rows.append((key, "off" if value is None else _text(value)))
    return rows


def limit_headline(limits: Mapping[str, Any]) -> str:
    """One line on the limit in force, from ``/limits``'s ``inprocess`` and ``cgroup`` parts."""
    parts = []
    inprocess = limits.get("inprocess")
    if isinstance(inprocess, Mapping):
        per = " per worker thread," if inprocess.get("per") == "worker thread" else ""
        parts.append(f"in-process throttle: {_text(inprocess.get('cpu_limit_percent'))}% of one "
                     f"CPU{per} per {_text(inprocess.get('cycle_ms'))} ms cycle "
                     f"({_text(inprocess.get('mode'))} mode)")
    cgroup = limits.get("cgroup")
    if isinstance(cgroup, Mapping) and cgroup.get("quota_us") is not None:
        text = (f"kernel CPU quota: {_text(cgroup.get('cpus'))} CPU "
                f"({_text(cgroup.get('quota_us'))} µs per {_text(cgroup.get('period_us'))} µs "
                f"period, cgroup v{_text(cgroup.get('version'))})")
        if cgroup.get("burst_us"):
            text += f", burst {_text(cgroup.get('burst_us'))} µs"
        parts.append(text)
    if not parts:
        cpus = limits.get("cpu_count")
        parts.append("no CPU limit: the service may use every CPU"
                     + (f" ({cpus})" if cpus is not None else ""))
    return "; ".join(parts)


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_text(v)}" for k, v in value.items())
    return str(value)


@dataclass(frozen=True)
class Chart:
    """An inline SVG chart of the largest gap against time into the request."""

    width: int
    height: int
    left: int
    bottom: int            # y of the x axis
    stems: str             # SVG path: one vertical stem per point, from the axis to its gap
    pauses: list[tuple[float, float]]  # (x, y) of points whose gap is a pause
    threshold_y: float     # y of the pause threshold line
    y_max_label: str       # the gap at the top of the chart
    x_max_label: str       # the time at the right end
    threshold_label: str

    @property
    def zero_label_fits(self) -> bool:
        """The y axis' "0" would not overlap the threshold's label."""
        return self.bottom - self.threshold_y >= 12


def build_chart(times_ns: Iterable[int], gaps_ns: Iterable[int], wall_ns: int,
                threshold_us: int = PAUSE_THRESHOLD_US, width: int = 640,
                height: int = 220) -> Chart:
    """Scale (time, gap) points to the chart. The y axis reaches at least twice the threshold,
    so an unthrottled run stays flat at the bottom instead of magnifying microsecond noise."""
    left, right, top, bottom = 56, width - 12, 12, height - 28
    times, gaps = list(times_ns), list(gaps_ns)
    threshold_ns = threshold_us * 1000
    y_max = max(max(gaps, default=0) * 1.1, 2 * threshold_ns)
    x_max = max(wall_ns, 1)

    def x(t: float) -> float:
        return round(left + (right - left) * t / x_max, 1)

    def y(g: float) -> float:
        return round(bottom - (bottom - top) * g / y_max, 1)

    stems = " ".join(f"M{x(t)} {bottom}V{y(g)}" for t, g in zip(times, gaps))
    pauses = [(x(t), y(g)) for t, g in zip(times, gaps) if g >= threshold_ns]
    return Chart(width=width, height=height, left=left, bottom=bottom, stems=stems,
                 pauses=pauses, threshold_y=y(threshold_ns), y_max_label=_ms(y_max),
                 x_max_label=_ms(wall_ns), threshold_label=_ms(threshold_ns))


def pi_body(result: PiResult, buckets: list[GapBucket], pauses: PauseSummary,
            throttle_ns: int | None = None) -> dict[str, Any]:
    """The ``/api/pi`` JSON body."""
    body: dict[str, Any] = {
        "pi": result.pi,
        "counter": result.counter,
        "wall_ns": result.wall_ns,
        "cpu_ns": result.cpu_ns,
        "error": result.error,
        "gaps": [{"us": b.us, "count": b.count} for b in buckets],
        "pauses": {"threshold_us": pauses.threshold_us, "count": pauses.count,
                   "total_us": pauses.total_us, "longest_us": pauses.longest_us},
    }
    if throttle_ns is not None:
        body["throttle_ns"] = throttle_ns
    return body


# ----------------------------------------------------------------------------- HTTP side

def wants_page(request: Request) -> bool:
    """A browser asking for one of the HTML pages (not an API client)."""
    return (request.url.path in PAGE_PATHS
            and "text/html" in request.headers.get("accept", ""))


def validation_error_page(request: Request, problems: Mapping[str, Any],
                          limits: Mapping[str, Any] | None = None) -> HTMLResponse:
    """A readable 422 page from ``describe_validation_error``'s body (which never holds the
    rejected input), so nothing the user typed is reflected."""
    return templates.TemplateResponse(
        request, "error.html",
        {"title": "Invalid request", "problems": list(problems.get("detail", [])),
         **_limits_context(limits)},
        status_code=422)


def _limits_context(limits: Mapping[str, Any] | None) -> dict[str, Any]:
    if limits is None:
        return {"limits": [], "limit_headline": ""}
    return {"limits": flatten_limits(limits), "limit_headline": limit_headline(limits)}


def register_pages(app: FastAPI) -> None:
    """Add ``/``, ``/pi`` and ``/api/pi`` to an app built by ``service.app.create_app``.

    The routes read ``app.state`` as ``/cpuBurnFlow`` does: ``settings.max_counter``, the
    in-process ``throttle`` (the pi loop is its work: ``cfs`` pauses it at its checkpoints,
    ``boundary`` charges it to the worker thread, see ``service.throttle``) and the
    ``kernel_probe`` (cpu.stat around the loop, for Server-Timing).
    """
    max_counter: int = app.state.settings.max_counter
    throttle = app.state.throttle
    kernel = app.state.kernel_probe
    counter_query = Query(DEFAULT_COUNTER, ge=0, le=max_counter,
                          description="pi series iterations; each one is timed")

    def run(counter: int) -> tuple[PiResult, int | None, dict[str, str]]:
        before = kernel_reading(kernel)
        with throttle.start() as work:  # the pi loop is the work: cfs pauses it mid-loop
            result = compute_pi(counter, checkpoint=work.checkpoint if throttle.pauses_work
                                else None)
        throttle_ns = work.paused_ns if throttle.enabled else None
        timing = work_timing(result.wall_ns, result.cpu_ns, throttle_ns, kernel, before)
        return result, throttle_ns, {"Server-Timing": timing}

    @app.get("/", response_class=HTMLResponse, summary="Landing page", include_in_schema=False)
    def landing(request: Request) -> HTMLResponse:
        return templates.TemplateResponse(request, "landing.html", {
            "title": "throttle-lab", **_limits_context(describe_limits(app)),
            "default_counter": DEFAULT_COUNTER, "max_counter": max_counter,
            "default_iterations": DEFAULT_ITERATIONS,
            "max_iterations": app.state.settings.max_iterations,
        })

    @app.get("/pi", response_class=HTMLResponse,
             summary="Compute pi in `counter` timed iterations; show the gaps as a page")
    def pi_page(request: Request, counter: int = counter_query) -> HTMLResponse:
        # A sync route: FastAPI runs it in the threadpool, never on the event loop.
        result, throttle_ns, headers = run(counter)
        buckets = gap_buckets(result.histogram)
        pauses = summarize_pauses(buckets)
        times, gaps = gap_series(result)
        context = {
            "title": f"pi in {counter:,} iterations",
            **_limits_context(describe_limits(app)),
            "result": result,
            "error_abs": abs(result.error),
            "wall": _ms(result.wall_ns),
            "cpu": _ms(result.cpu_ns),
            "cpu_share": (f"{100 * result.cpu_ns / result.wall_ns:.0f}%"
                          if result.wall_ns else "n/a"),
            "cpu_per_iteration_ns": (result.cpu_ns / counter if counter else 0.0),
            "throttle": _ms(throttle_ns) if throttle_ns is not None else None,
            "pauses": pauses,
            "pause_text": describe_pauses(pauses, result.wall_ns),
            "buckets": buckets,
            "chart": build_chart(times.tolist(), gaps.tolist(), result.wall_ns),
            "max_counter": max_counter,
            "math_pi": math.pi,
        }
        return templates.TemplateResponse(request, "pi.html", context, headers=headers)

    @app.get("/api/pi", summary="Compute pi in `counter` timed iterations; the gaps as JSON")
    def pi_api(counter: int = counter_query) -> JSONResponse:
        result, throttle_ns, headers = run(counter)
        buckets = gap_buckets(result.histogram)
        body = pi_body(result, buckets, summarize_pauses(buckets), throttle_ns)
        return JSONResponse(body, headers=headers)
