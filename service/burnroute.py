"""``GET /cpuBurnFlow``: the burn, and a lean way to it past FastAPI's per-request machinery.

Whatever the service does around a burn is CPU that a quota charges to the same budget, so it
decides whether a request fits in one period or needs two. FastAPI's path to a sync route
(its own middleware layers, routing, pydantic validation of the query, the AnyIO threadpool
hand-off, a ``JSONResponse``) cost ~0.5 ms of CPU per request here, four times a bare ASGI app
on the same uvicorn. So the plain request, ``GET /cpuBurnFlow`` with no query or exactly
``?iterations=<digits>`` within range, takes a lane in front of FastAPI (:class:`BurnLane`):

- the app's own middleware (metrics, the error handler, the concurrency guard and its waiting
  line: the same classes, sharing the same counters and line) around a pure ASGI endpoint;
- the burn runs in a thread of the lane's own pool (``service.workers``: cheaper than AnyIO's
  per-call capacity limiter and cancel scopes, and one client in sequence always gets the same
  thread, whose budget ``--throttle-mode boundary`` counts), or right on the event loop when it
  is smaller than the hand-off itself (``INLINE_ITERATIONS``, ~0.05-0.1 ms of CPU) and no
  in-process throttle may make it wait;
- the JSON body and ``Server-Timing`` are formatted directly.

Anything else (a bad or unusual query, another method, a ``root_path``) goes to FastAPI's
route, which validates it (422 naming the parameter and its range), documents it in
``/openapi.json``, and runs the same :class:`BurnWork`. Both ways give the same bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from service.burn import DEFAULT_ITERATIONS, BurnResult, Calibration, burn, burn_parallel
from cpuquota.cgroupfs import CpuStatReader
from service.throttle import Throttle
from service.timing import kernel_reading, work_timing
from service.workers import WorkerPool

__all__ = ["BURN_PATH", "INLINE_ITERATIONS", "ITERATIONS_KEY", "BurnAnswer", "BurnLane",
           "BurnStopped", "BurnWork", "parse_iterations"]

BURN_PATH = "/cpuBurnFlow"
ITERATIONS_KEY = "throttle_lab.iterations"  # the lane's parsed query, in the ASGI scope
# A burn this small costs less CPU than handing it to a thread and back (~0.1 ms here): it
# runs on the event loop, which it blocks no longer than parsing a request does.
INLINE_ITERATIONS = 100

BurnAnswer = tuple[bytes, str]  # the JSON body and the Server-Timing header


class BurnStopped(Exception):
    """The service is stopping (:meth:`BurnWork.stop`): the burn gave up at a checkpoint."""


class BurnWork:
    """One burn of ``iterations`` with everything around it: the kernel's cpu.stat before and
    after, the in-process throttle, the burn-CPU metric, the body and ``Server-Timing``.
    Blocking (the throttle may sleep): call it from a worker thread, or inline when
    :meth:`may_run_inline`."""

    def __init__(self, throttle: Throttle, kernel: CpuStatReader | None,
                 observe_burn: Callable[[int], None], max_helpers: int = 1,
                 calibration: Calibration | None = None) -> None:
        self._throttle, self._kernel, self._observe_burn = throttle, kernel, observe_burn
        self._calibration = calibration  # None: one raw pass of the loop per iteration
        # the threads that burn beside a request's own (?threads=T), made at the first use
        self._max_helpers = max(1, max_helpers)
        self._helpers: ThreadPoolExecutor | None = None
        self._stopping = threading.Event()

    def may_run_inline(self, iterations: int) -> bool:
        """Small enough for the event loop, and nothing can make it wait."""
        return iterations <= INLINE_ITERATIONS and not self._throttle.enabled

    def __call__(self, iterations: int, threads: int = 1) -> BurnAnswer:
        kernel, throttle = self._kernel, self._throttle
        before = kernel_reading(kernel)
        if throttle.enabled:
            with throttle.start() as work:  # may wait first (cfs) or at the end (boundary)
                pause = work.checkpoint

                def checkpoint() -> None:
                    self._check()
                    pause()

                result = self._burn(iterations, threads, checkpoint)
                work.add_cpu(result.cpu_ns - result.cpu_ns // threads)  # the other threads'
            paused: int | None = work.paused_ns
        else:
            result, paused = self._burn(iterations, threads, self._check), None
        self._observe_burn(result.cpu_ns)
        body = (b'{"result":"success","iterations":%d,"cpu_ns":%d,"wall_ns":%d'
                % (result.iterations, result.cpu_ns, result.wall_ns))
        body += b',"threads":%d}' % threads if threads > 1 else b"}"
        return body, work_timing(result.wall_ns, result.cpu_ns, paused, kernel, before)

    def _burn(self, iterations: int, threads: int,
              checkpoint: Callable[[], object] | None) -> BurnResult:
        """Today's burn on this thread; with ``threads`` > 1, on that many threads at once
        (this one and helpers; their throttle checkpoints are the process's)."""
        if threads == 1:
            return burn(iterations, checkpoint, calibration=self._calibration)
        if self._helpers is None:
            self._helpers = ThreadPoolExecutor(max_workers=self._max_helpers,
                                               thread_name_prefix="burn-helper")
        helper = self._helper_checkpoint if self._throttle.pauses_work else self._check
        return burn_parallel(iterations, threads, self._helpers.submit, checkpoint, helper,
                             calibration=self._calibration)

    def _check(self) -> None:
        """Every burn's checkpoint: give up once the service is stopping."""
        if self._stopping.is_set():
            raise BurnStopped("the service is stopping")

    def _helper_checkpoint(self) -> None:
        self._check()
        self._throttle.checkpoint()

    def stop(self) -> None:
        """Give up every burn still running, each at its next checkpoint (~0.1-0.3 ms of
        work): uvicorn's shutdown cancelled the requests that wait for them."""
        self._stopping.set()

    def close(self) -> None:
        """Stop the helper threads (after their current burn)."""
        if self._helpers is not None:
            self._helpers.shutdown(wait=False)


def parse_iterations(query: bytes, maximum: int) -> int | None:
    """The lane's query parser: ``b""`` -> the default, ``b"iterations=123"`` -> 123 when
    within ``[0, maximum]``; anything else (other parameters, encodings, signs, leading zeros,
    out of range) -> None, for FastAPI to validate."""
    if not query:
        return DEFAULT_ITERATIONS if DEFAULT_ITERATIONS <= maximum else None
    name, sep, value = query.partition(b"=")
    if name != b"iterations" or not sep or not value.isdigit() or len(value) > 12 \
            or value[:1] == b"0" and len(value) > 1:
        return None
    iterations = int(value)
    return iterations if iterations <= maximum else None


class _Endpoint:
    """The lane's ASGI endpoint: run the work (inline or in the pool) and send the answer."""

    def __init__(self, work: BurnWork, route: object, pool: WorkerPool) -> None:
        self._work, self._route, self._pool = work, route, pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self._route  # what /metrics and the logs name it by
        iterations: int = scope[ITERATIONS_KEY]
        work = self._work
        if work.may_run_inline(iterations):
            body, timing = work(iterations)
        else:
            body, timing = await self._pool.run(work, iterations)
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-length", b"%d" % len(body)), (b"content-type", b"application/json"),
            (b"server-timing", timing.encode())]})
        await send({"type": "http.response.body", "body": body})


class BurnLane:
    """The plain ``GET /cpuBurnFlow`` past FastAPI: :meth:`takes` decides, :meth:`build` makes
    the lane from the app's middleware (call it once every middleware is installed), and
    :meth:`close` stops the pool (the app's lifespan does)."""

    def __init__(self, work: BurnWork, route: object, max_iterations: int) -> None:
        self.work = work
        self._route, self._max = route, max_iterations
        self.pool = WorkerPool("burn")  # as many threads as burns ran at once (the guard's cap)
        self._app: ASGIApp | None = None

    def takes(self, scope: Scope) -> bool:
        """A plain burn request: note its iterations in the scope and answer True."""
        if scope["type"] != "http" or scope["path"] != BURN_PATH or scope["method"] != "GET" \
                or scope.get("root_path"):
            return False
        iterations = parse_iterations(scope["query_string"], self._max)
        if iterations is None:
            return False
        scope[ITERATIONS_KEY] = iterations
        return True

    @property
    def built(self) -> bool:
        return self._app is not None

    def build(self, middleware: Sequence[Middleware]) -> ASGIApp:
        """The endpoint wrapped in ``middleware`` (outermost first), as Starlette does."""
        app: ASGIApp = _Endpoint(self.work, self._route, self.pool)
        for cls, args, kwargs in reversed(middleware):
            app = cls(app, *args, **kwargs)
        self._app = app
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self._app is not None, "BurnLane.build() first"
        await self._app(scope, receive, send)

    def close(self) -> None:
        """Let the pool's threads (and the burns' helpers) end once their burns are done."""
        self.pool.close()
        self.work.close()
