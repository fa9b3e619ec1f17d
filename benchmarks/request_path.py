"""What the service costs around a burn: CPU beyond the burn, and a trivial burn vs bare ASGI.

    .venv/bin/python -m benchmarks.request_path [--seconds 5] [--iterations 5000] [--rounds 3]
                                                [--quota-cpus 0.1] [--no-quota] [--no-reference]

Needs ``wrk`` (Debian: ``sudo apt-get -o DPkg::Lock::Timeout=600 install -y wrk``, or
``sudo bash scripts/install-system-deps.sh wrk``); without it the benchmark says so and exits 0.
The kernel-quota row needs root and a cgroup cpu controller (it is skipped with a message
otherwise). Every figure is a ratio or a difference taken within one run, side by side:

(a) **CPU beyond the burn, no limit.** ``wrk -t1 -c1`` (one keep-alive connection, sequential)
    sends ``/cpuBurnFlow?iterations=N`` (default 5000, the original demo's request) to a
    default ``burn-service`` for ``--seconds``, ``--rounds`` times (the median is the
    result: the load of a shared machine drifts). From ``/metrics`` before and after: the
    process's CPU (``throttle_lab_process_cpu_seconds_total``, all threads, ns) minus the burns'
    own CPU (``throttle_lab_burn_cpu_seconds_total``, the ``cpu_ns`` of each response), divided
    by the requests answered. That is everything the service does around a burn (HTTP parsing,
    routing, the hand-off to a worker thread, metrics, Server-Timing, cpu.stat reads, the
    access log), i.e. what a CPU quota charges besides the work. Goal: <= 0.3 ms.
    **A reference beside it** (``--no-reference`` skips it): the same measurement on the
    least ASGI app that hands the same burn (calibrated as the service's: 1 us of CPU an
    iteration) to a worker thread the usual way (``loop.run_in_executor``;
    :class:`ReferenceApp`, same uvicorn options): what Python, uvicorn, the loopback and a
    thread hand-off cost around a burn on this machine now, with none of the service's
    features. Both serve at once and their windows alternate, so each pair sees about the
    same load; the median of the pairs' ratios is the figure. Goal: <= 1.1x. (A longer burn
    leaves colder caches and costs more beyond it: the two burns must be the same.)
(b) **The same under a kernel quota of ``--quota-cpus``** (``burn-service --cpus 0.1``): the
    throttling itself makes each request dearer (wake-ups after a stall, cold caches).
    Goal: <= 1.0 ms.
(c) **A trivial burn against a bare ASGI app.** p50 of ``wrk -t1 -c1`` on
    ``/cpuBurnFlow?iterations=1`` and on an ASGI app that answers a constant JSON body, served
    by the same uvicorn (``uvicorn.run`` with the same options: httptools, uvloop, access log at
    ``info``), alternated ``--rounds`` times. Goal: <= 2.5x (stretch 1.2x).

The two scrapes of ``/metrics`` per measurement add their own CPU once (a few ms over
thousands of requests: well under 0.01 ms per request).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date

from benchmarks.support import (WRK_MISSING, WrkResult, burn_service, describe_load, free_port,
                                get, http_server, keep_record, require_wrk, run_main, run_wrk,
                                scrape)
from cpuquota.limit import Limit

BURN_ROUTE = "throttle_lab_http_requests_total{method=GET,route=/cpuBurnFlow,status=200}"
GOAL_BEYOND_MS, GOAL_BEYOND_QUOTA_MS, GOAL_RATIO, STRETCH_RATIO = 0.3, 1.0, 2.5, 1.2
GOAL_REFERENCE_RATIO = 1.1  # (a) against the reference beside it (issue 42)
REFERENCE_LABEL = "reference: bare ASGI app, burn via run_in_executor"


@dataclass(frozen=True)
class Beyond:
    label: str
    requests: int
    cpu_s: float       # the process's CPU in the window
    burn_cpu_s: float  # of which the burns'

    @property
    def beyond_ms(self) -> float:
        return 1000 * (self.cpu_s - self.burn_cpu_s) / max(1, self.requests)

    @property
    def burn_ms(self) -> float:
        return 1000 * self.burn_cpu_s / max(1, self.requests)


Window = Callable[[float], Beyond]  # one measurement of ``seconds``


@contextmanager
def service_windows(label: str, limit: Limit | None, iterations: int) -> Iterator[Window]:
    """A ``burn-service`` (a kernel quota of ``limit``, the access log on), warmed up: yields
    what measures it for ``seconds``, from its ``/metrics`` before and after."""
    with burn_service(limit, access_log=True, health_timeout=120) as served:
        base = served.base_url
        url = f"{base}/cpuBurnFlow?iterations={iterations}"

        def window(seconds: float) -> Beyond:
            before = scrape(base)
            run_wrk(url, seconds)
            after = scrape(base)

            def delta(name: str) -> float:
                return after.get(name, 0.0) - before.get(name, 0.0)

            return Beyond(label, round(delta(BURN_ROUTE)),
                          delta("throttle_lab_process_cpu_seconds_total"),
                          delta("throttle_lab_burn_cpu_seconds_total"))

        run_wrk(url, 1)   # warm-up
        yield window


def beyond_burn(label: str, limit: Limit | None, iterations: int, seconds: float,
                rounds: int) -> list[Beyond]:
    """``rounds`` measurements of ``seconds`` each, one service: the machine's load drifts,
    and the median of a few windows is steadier than one long window."""
    with service_windows(label, limit, iterations) as window:
        return [window(seconds) for _ in range(rounds)]


async def bare_app(scope: dict[str, object], receive: object, send: object) -> None:
    """The least an ASGI app can do: a constant JSON answer to every request."""
    if scope["type"] != "http":
        return
    body = b'{"result":"success"}'
    await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


class ReferenceApp:
    """The reference beside (a): the least an ASGI app can do around the same burn. ``GET
    /cpuBurnFlow?iterations=N`` runs ``service.burn.burn(N)`` in one worker thread (an
    executor of one, so a sequential client always gets the same thread, as the service's
    pool does) and answers a constant body; ``GET /cpu`` answers the process's CPU and the
    burns' own so far (ns). No routing, middleware, metrics, Server-Timing or guard."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from service.burn import Calibration, measured

        self.executor = ThreadPoolExecutor(max_workers=1)
        self.calibration = Calibration(measured())  # the service's default: 1 us an iteration
        self.burn_ns = 0

    def _burn(self, iterations: int) -> None:
        from service.burn import burn

        self.burn_ns += burn(iterations, calibration=self.calibration).cpu_ns

    async def __call__(self, scope: dict[str, object], receive: object, send: object) -> None:
        import asyncio
        import time

        if scope["type"] != "http":
            return
        if scope["path"] == "/cpu":
            body = b'{"process_ns":%d,"burn_ns":%d}' % (time.process_time_ns(), self.burn_ns)
        else:
            query = bytes(scope["query_string"])  # type: ignore[call-overload]
            iterations = int(query.partition(b"=")[2] or 0)
            await asyncio.get_running_loop().run_in_executor(self.executor, self._burn,
                                                             iterations)
            body = b'{"result":"success"}'
        await send({"type": "http.response.start", "status": 200,  # type: ignore[operator]
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})  # type: ignore[operator]


def serve_bare(port: int, app: object = bare_app) -> int:
    """``burn-service``'s ``uvicorn.run`` call (service.cli.serve), with a bare app."""
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="info",  # type: ignore[arg-type]
                timeout_graceful_shutdown=5)
    return 0


@contextmanager
def reference_windows(iterations: int) -> Iterator[Window]:
    """:func:`service_windows` for :class:`ReferenceApp`: the CPU beyond the same burn that
    Python, uvicorn and a thread hand-off cost on this machine with nothing of the service's
    around them."""
    import json

    port = free_port()
    with http_server(_serve_self("--serve-reference", port), port,
                     what="the reference app") as served:
        base = served.base_url
        url = f"{base}/cpuBurnFlow?iterations={iterations}"

        def cpu() -> dict[str, int]:
            return json.loads(get(base, "/cpu")[1])  # type: ignore[no-any-return]

        def window(seconds: float) -> Beyond:
            before = cpu()
            done = run_wrk(url, seconds)
            after = cpu()
            return Beyond(REFERENCE_LABEL, done.requests,
                          (after["process_ns"] - before["process_ns"]) / 1e9,
                          (after["burn_ns"] - before["burn_ns"]) / 1e9)

        run_wrk(url, 1)   # warm-up
        yield window


def side_by_side(iterations: int, seconds: float, rounds: int
                 ) -> tuple[list[Beyond], list[Beyond]]:
    """(a) and its reference, both serving, their windows alternated (which one goes first
    too): each pair of windows sees about the same load of the machine."""
    service: list[Beyond] = []
    reference: list[Beyond] = []
    with service_windows("no limit", None, iterations) as ours, \
            reference_windows(iterations) as theirs:
        for i in range(rounds):
            if i % 2:
                reference.append(theirs(seconds))
                service.append(ours(seconds))
            else:
                service.append(ours(seconds))
                reference.append(theirs(seconds))
    return service, reference


def _serve_self(flag: str, port: int) -> list[str]:
    """This benchmark again, serving an app on ``port`` (the same ``-m``: the child inherits
    the working directory and environment that found this package)."""
    return [sys.executable, "-m", "benchmarks.request_path", flag, str(port)]


def trivial_vs_bare(rounds: int, seconds: float) -> list[tuple[WrkResult, WrkResult]]:
    port = free_port()
    pairs = []
    with burn_service(access_log=True) as burn, \
            http_server(_serve_self("--serve-bare", port), port, what="the bare app") as bare_app:
        trivial, bare = f"{burn.base_url}/cpuBurnFlow?iterations=1", f"{bare_app.base_url}/"
        run_wrk(trivial, 1), run_wrk(bare, 1)  # warm-up
        for _ in range(rounds):
            pairs.append((run_wrk(trivial, seconds), run_wrk(bare, seconds)))
    return pairs


def _mark(ok: bool) -> str:
    return "yes" if ok else "NO"


def report(beyond: Sequence[Sequence[Beyond]], pairs: Sequence[tuple[WrkResult, WrkResult]],
           iterations: int) -> list[str]:
    """Print the tables; return the side-by-side figures."""
    print(f"\n(a, b) CPU the service spends per request beyond the burn "
          f"(/cpuBurnFlow?iterations={iterations}, wrk -t1 -c1)\n")
    print("| limit | requests | burn CPU/request | CPU beyond the burn/request (per round) "
          "| median | goal | met |")
    print("|---|---|---|---|---|---|---|")
    side = []
    for rounds in beyond:
        label = rounds[0].label
        median = statistics.median(b.beyond_ms for b in rounds)
        burn = statistics.median(b.burn_ms for b in rounds)
        each = " / ".join(f"{b.beyond_ms:.3f}" for b in rounds)
        if label == REFERENCE_LABEL:
            verdict = "(reference) | |"
        else:
            goal = GOAL_BEYOND_MS if label == "no limit" else GOAL_BEYOND_QUOTA_MS
            verdict = f"<= {goal} ms | {_mark(median <= goal)} |"
        print(f"| {label} | {sum(b.requests for b in rounds)} | {burn:.3f} ms | {each} ms | "
              f"{median:.3f} ms | {verdict}")
        side.append(f"beyond the burn ({label}) {median:.3f} ms")
    ours = next((r for r in beyond if r[0].label == "no limit"), None)
    theirs = next((r for r in beyond if r[0].label == REFERENCE_LABEL), None)
    if ours is not None and theirs is not None:
        paired = [a.beyond_ms / b.beyond_ms for a, b in zip(ours, theirs) if b.beyond_ms > 0]
        if paired:
            against = statistics.median(paired)
            print(f"\nno limit / reference, the same burn, windows alternated: "
                  f"{' / '.join(f'{r:.2f}x' for r in paired)}, median {against:.2f}x; "
                  f"goal <= {GOAL_REFERENCE_RATIO}x: {_mark(against <= GOAL_REFERENCE_RATIO)}")
            side.append(f"no limit / reference {against:.2f}x")
    if not pairs:
        return side
    print("\n(c) A trivial burn (/cpuBurnFlow?iterations=1) against a bare ASGI app on the same "
          "uvicorn, wrk -t1 -c1, alternated\n")
    print("| round | trivial burn p50 / p90 | bare ASGI p50 / p90 | req/s burn / bare "
          "| p50 ratio |")
    print("|---|---|---|---|---|")
    ratios = []
    for i, (t, b) in enumerate(pairs, 1):
        ratios.append(t.p50_us / b.p50_us)
        print(f"| {i} | {t.p50_us:.0f} / {t.p90_us:.0f} µs | {b.p50_us:.0f} / {b.p90_us:.0f} µs "
              f"| {t.rate:,.0f} / {b.rate:,.0f} | {ratios[-1]:.2f}x |")
    ratio = statistics.median(ratios)
    stretch = " (stretch 1.2x: met)" if ratio <= STRETCH_RATIO else ""
    print(f"\nmedian p50 ratio {ratio:.2f}x; goal <= {GOAL_RATIO}x: "
          f"{_mark(ratio <= GOAL_RATIO)}{stretch}")
    return [*side, f"trivial burn / bare ASGI {ratio:.2f}x"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per wrk measurement")
    parser.add_argument("--iterations", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="windows per measurement in (a, b); alternations in (c)")
    parser.add_argument("--quota-cpus", type=float, default=0.1)
    parser.add_argument("--no-quota", action="store_true", help="skip (b)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the reference row (a bare ASGI app around the same burn)")
    parser.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--serve-reference", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_bare:
        return serve_bare(args.serve_bare)
    if args.serve_reference:
        return serve_bare(args.serve_reference, ReferenceApp())
    if args.seconds <= 0 or args.iterations < 0 or args.rounds < 1 or args.quota_cpus <= 0:
        parser.error("--seconds, --rounds and --quota-cpus must be positive")
    if require_wrk() is None:
        print(WRK_MISSING)
        return 0
    print(f"{date.today().isoformat()}, {describe_load('before')}")
    if args.no_reference:
        beyond = [beyond_burn("no limit", None, args.iterations, args.seconds, args.rounds)]
    else:
        beyond = list(side_by_side(args.iterations, args.seconds, args.rounds))
    if args.no_quota:
        pass
    elif os.geteuid() != 0:
        print(f"(b) skipped: a kernel quota (burn-service --cpus {args.quota_cpus:g}) needs root")
    else:
        beyond.append(beyond_burn(f"{args.quota_cpus:g} CPU (kernel quota)",
                                  Limit(args.quota_cpus), args.iterations, args.seconds,
                                  args.rounds))
    pairs = trivial_vs_bare(args.rounds, args.seconds)
    side = report(beyond, pairs, args.iterations)
    print("\nside by side: " + ", ".join(side))
    print(describe_load("after"))
    keep_record("request_path", {"iterations": args.iterations, "beyond": beyond,
                                 "trivial_vs_bare": pairs, "side_by_side": side})
    return 0


if __name__ == "__main__":
    run_main(main)
