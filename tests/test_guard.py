"""The concurrency cap (service.guard): the pure counters and waiting line, the defaults, and
a real server that lets requests beyond the cap wait in line in arrival order, answers 503 +
Retry-After once the line is full, and frees slots and places afterwards, also when a waiting
client goes away."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from client.data.servertiming import parse_server_timing
from service.app import create_app
from service.cli import parse_settings
from service.config import Settings, SettingsError
from service.guard import (
    GUARDED_PATHS,
    QUEUE_FACTOR,
    WAIT_BUCKETS_S,
    GuardCollector,
    GuardState,
    available_cpus,
    busy_body,
    install_guard,
    resolve_max_concurrent,
    resolve_max_queued,
)
from tests.support import running_service

LONG_BURN = 4_000_000  # ~4 s of CPU here: long enough to probe the server while it runs
STEP_BURN = 200_000    # ~0.2 s: one waiter at a time, so they finish this far apart, in order


# ----------------------------------------------------------------------------- pure parts

def test_state_admits_up_to_the_limit_then_queues_then_rejects() -> None:
    state = GuardState(limit=2, queue_limit=2)
    assert state.try_enter() and state.try_enter()
    assert not state.try_enter()  # all slots taken: not a rejection yet, join the line
    assert state.join("a") and state.join("b")
    assert not state.join("c")    # the line is full: that is the rejection
    assert (state.in_flight, state.queued, state.queued_peak, state.admitted,
            state.rejected) == (2, 2, 2, 2, 1)
    assert state.leave() == "a"   # the slot goes straight to the first in line ...
    assert (state.in_flight, state.queued, state.admitted) == (2, 1, 3)
    assert not state.try_enter()  # ... so a newcomer cannot jump the line
    assert state.leave() == "b"
    assert state.leave() is None and state.leave() is None
    assert (state.in_flight, state.queued, state.peak, state.queued_peak, state.admitted,
            state.rejected, state.abandoned) == (0, 0, 2, 2, 4, 1, 0)


def test_state_without_a_line_rejects_at_the_cap() -> None:
    state = GuardState(limit=1)
    assert state.try_enter() and not state.try_enter()
    assert not state.join("x")
    assert (state.in_flight, state.queued, state.rejected) == (1, 0, 1)


def test_a_waiter_that_gives_up_leaves_the_line_without_a_slot() -> None:
    state = GuardState(limit=1, queue_limit=2)
    assert state.try_enter()
    assert not state.try_enter() and state.join("a")
    assert not state.try_enter() and state.join("b")
    assert state.abandon("a")             # still in line: it held nothing
    assert (state.in_flight, state.queued, state.abandoned) == (1, 1, 1)
    assert state.leave() == "b"           # "a" is skipped: it is gone
    assert not state.abandon("b")         # "b" has the slot already: it must leave()
    assert state.leave() is None
    assert (state.in_flight, state.queued, state.admitted, state.abandoned) == (0, 0, 2, 1)


def test_state_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        GuardState(limit=0)
    with pytest.raises(ValueError, match="negative"):
        GuardState(limit=1, queue_limit=-1)
    with pytest.raises(RuntimeError, match="without a matching"):
        GuardState(limit=1).leave()
    with pytest.raises(RuntimeError, match="slot is free"):
        GuardState(limit=1, queue_limit=1).join("a")


def test_wait_times_go_into_histogram_buckets_and_metrics() -> None:
    state = GuardState(limit=1, queue_limit=3)
    for seconds in (0.0004, 0.001, 0.003, 20.0):
        state.observe_wait(seconds)
    assert state.wait_counts[0] == 2  # le=0.001 is inclusive, as in Prometheus
    assert state.wait_counts[WAIT_BUCKETS_S.index(0.005)] == 1
    assert state.wait_counts[-1] == 1  # beyond the last bound: only in +Inf
    assert math.isclose(state.wait_seconds, 20.0044)
    registry = CollectorRegistry()
    registry.register(GuardCollector(state))
    text = generate_latest(registry).decode()
    assert 'throttle_lab_concurrency_queue_wait_seconds_bucket{le="0.001"} 2.0' in text
    assert 'throttle_lab_concurrency_queue_wait_seconds_bucket{le="0.005"} 3.0' in text
    assert 'throttle_lab_concurrency_queue_wait_seconds_bucket{le="10.0"} 3.0' in text
    assert 'throttle_lab_concurrency_queue_wait_seconds_bucket{le="+Inf"} 4.0' in text
    assert "throttle_lab_concurrency_queue_wait_seconds_count 4.0" in text
    assert "throttle_lab_concurrency_queue_limit 3.0" in text
    assert "throttle_lab_concurrency_queued 0.0" in text


def test_default_is_twice_the_cpus_shared_across_workers() -> None:
    assert resolve_max_concurrent(Settings(), cpus=2) == 4
    assert resolve_max_concurrent(Settings(workers=3), cpus=2) == 2  # ceil(4 / 3)
    assert resolve_max_concurrent(Settings(workers=8), cpus=2) == 1  # never 0
    assert resolve_max_concurrent(Settings(max_concurrent=7, workers=8), cpus=2) == 7
    assert resolve_max_concurrent(Settings()) == 2 * available_cpus()


def test_default_line_is_a_multiple_of_the_resolved_cap() -> None:
    assert QUEUE_FACTOR == 8
    assert resolve_max_queued(Settings(), cpus=2) == 32
    assert resolve_max_queued(Settings(workers=3), cpus=2) == 16    # 8 x ceil(4 / 3)
    assert resolve_max_queued(Settings(max_concurrent=3), cpus=2) == 24
    assert resolve_max_queued(Settings(max_queued=5, max_concurrent=3), cpus=2) == 5
    assert resolve_max_queued(Settings(max_queued=-1), cpus=2) == 0  # no line
    assert resolve_max_queued(Settings()) == 8 * resolve_max_concurrent(Settings())


def test_options_from_command_line_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_settings(["--max-concurrent", "3"]).max_concurrent == 3
    assert parse_settings(["--max-queued", "-1"]).max_queued == -1
    monkeypatch.setenv("BURN_SERVICE_MAX_CONCURRENT", "5")
    monkeypatch.setenv("BURN_SERVICE_MAX_QUEUED", "9")
    assert parse_settings([]).max_concurrent == 5
    assert parse_settings([]).max_queued == 9
    assert parse_settings(["--max-concurrent", "6"]).max_concurrent == 6  # the flag wins
    assert parse_settings(["--max-queued", "2"]).max_queued == 2
    with pytest.raises(SettingsError, match="--max-concurrent"):
        Settings.from_env({"BURN_SERVICE_MAX_CONCURRENT": "-1"})
    with pytest.raises(SettingsError, match="BURN_SERVICE_MAX_CONCURRENT"):
        Settings.from_env({"BURN_SERVICE_MAX_CONCURRENT": "two"})
    with pytest.raises(SettingsError, match=r"--max-queued must be in \[-1, "):
        Settings.from_env({"BURN_SERVICE_MAX_QUEUED": "-2"})


def test_busy_body_says_what_and_when() -> None:
    body = busy_body(3)
    assert body["error"] == "busy" and body["max_concurrent"] == 3 and body["retry_after_s"] == 1
    assert body["max_queued"] == 0 and "--max-queued" not in str(body["message"])
    assert "3 requests" in str(body["message"]) and "--max-concurrent 3" in str(body["message"])
    assert "1 request doing" in str(busy_body(1)["message"])
    queued = busy_body(2, 16)
    assert queued["max_queued"] == 16
    assert "and 16 waiting (--max-queued 16)" in str(queued["message"])


def test_guarding_a_path_that_is_no_route_is_an_error() -> None:
    app = create_app(Settings())
    with pytest.raises(ValueError, match="/renamed"):
        install_guard(app, 1, paths={"/renamed"})


def test_every_cpu_route_is_guarded_and_limits_reports_the_cap_and_line() -> None:
    app = create_app(Settings(max_concurrent=3))
    assert (app.state.concurrency.limit, app.state.concurrency.queue_limit) == (3, 24)
    assert GUARDED_PATHS == {"/cpuBurnFlow", "/pi", "/api/pi"}
    with running_service(app=app) as base:
        limits = httpx.get(base + "/limits").json()
        metrics = httpx.get(base + "/metrics").text
    assert (limits["max_concurrent"], limits["max_queued"]) == (3, 24)
    assert "throttle_lab_concurrency_limit 3.0" in metrics
    assert "throttle_lab_concurrency_queue_limit 24.0" in metrics
    assert "throttle_lab_concurrency_rejected_total 0.0" in metrics
    assert "throttle_lab_concurrency_queue_wait_seconds_count 0.0" in metrics


# ----------------------------------------------------------------------------- real server

def _wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def _in_thread(answers: dict[str, httpx.Response], done: dict[str, float], name: str,
               request: Callable[[], httpx.Response]) -> threading.Thread:
    """Send ``request`` in a thread; its answer and the time it came back go under ``name``."""
    def run() -> None:
        answers[name] = request()
        done[name] = time.monotonic()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _queue_ms(response: httpx.Response) -> float | None:
    """The ``queue;dur`` of the response's Server-Timing (None: it did not wait)."""
    for metric in parse_server_timing(response.headers.get("server-timing", "")):
        if metric.name == "queue":
            return metric.dur_ms
    return None


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_beyond_the_cap_without_a_line_cpu_routes_get_503_at_once() -> None:
    app = create_app(Settings(max_concurrent=1, max_queued=-1))
    state = app.state.concurrency
    with running_service(app=app) as base:
        answers: dict[str, httpx.Response] = {}
        long = _in_thread(answers, {}, "long", lambda: httpx.get(
            base + "/cpuBurnFlow", params={"iterations": LONG_BURN}, timeout=120))
        try:
            _wait_for(lambda: state.in_flight == 1)
            busy = httpx.get(base + "/cpuBurnFlow", params={"iterations": 10})
            busy_pi = httpx.get(base + "/api/pi", params={"counter": 10})
            busy_page = httpx.get(base + "/pi", params={"counter": 10},
                                  headers={"Accept": "text/html"})
            busy_bad = httpx.get(base + "/cpuBurnFlow", params={"iterations": "-1"})
            free = [httpx.get(base + p) for p in ("/healthz", "/limits", "/metrics", "/")]
            still_running = long.is_alive()
        finally:
            long.join(timeout=120)
        assert still_running, "the long burn ended before the probes: make LONG_BURN larger"
        assert answers["long"].status_code == 200 and _queue_ms(answers["long"]) is None

        for r in (busy, busy_pi, busy_bad):
            assert r.status_code == 503
            assert r.headers["retry-after"] == "1"
            assert r.headers["content-type"] == "application/json"
            assert r.json() == busy_body(1)
        assert busy_page.status_code == 503 and busy_page.headers["retry-after"] == "1"
        assert busy_page.headers["content-type"].startswith("text/html")
        assert "Service Unavailable (503)" in busy_page.text
        assert "--max-concurrent 1" in busy_page.text
        assert [r.status_code for r in free] == [200, 200, 200, 200]  # not guarded

        # the slot is free again once the burn is done
        assert httpx.get(base + "/cpuBurnFlow", params={"iterations": 10}).status_code == 200
        _wait_for(lambda: state.in_flight == 0)   # given back once its answer is sent
        assert (state.in_flight, state.peak, state.rejected, state.queued_peak) == (0, 1, 4, 0)
        metrics = httpx.get(base + "/metrics").text
        assert "throttle_lab_concurrency_rejected_total 4.0" in metrics
        assert 'route="/cpuBurnFlow",status="503"' in metrics  # counted under its route


def test_the_line_fills_in_arrival_order_then_503_and_frees_everything() -> None:
    app = create_app(Settings(max_concurrent=1, max_queued=3))
    state = app.state.concurrency
    answers: dict[str, httpx.Response] = {}
    done: dict[str, float] = {}
    waiters = ["first", "second", "third"]
    with running_service(app=app) as base:
        def burn(iterations: int) -> Callable[[], httpx.Response]:
            return lambda: httpx.get(base + "/cpuBurnFlow", params={"iterations": iterations},
                                     timeout=120)

        threads = [_in_thread(answers, done, "long", burn(LONG_BURN))]
        try:
            _wait_for(lambda: state.in_flight == 1)
            for n, name in enumerate(waiters, start=1):  # one after the other: a known order
                threads.append(_in_thread(answers, done, name, burn(STEP_BURN)))
                _wait_for(lambda n=n: state.queued == n)  # type: ignore[misc]
            # the line is full: the next ones are answered at once, on every CPU route
            busy = httpx.get(base + "/cpuBurnFlow", params={"iterations": 10})
            busy_pi = httpx.get(base + "/api/pi", params={"counter": 10})
            busy_page = httpx.get(base + "/pi", params={"counter": 10},
                                  headers={"Accept": "text/html"})
            free = [httpx.get(base + p) for p in ("/healthz", "/limits", "/metrics")]
            still_running = threads[0].is_alive()
            waiting = (state.in_flight, state.queued)
        finally:
            for thread in threads:
                thread.join(timeout=120)
        assert still_running, "the long burn ended before the probes: make LONG_BURN larger"
        assert waiting == (1, 3)
        for r in (busy, busy_pi):
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json() == busy_body(1, 3)
        assert busy_page.status_code == 503 and "--max-queued 3" in busy_page.text
        assert [r.status_code for r in free] == [200, 200, 200]

        # every waiter was served, in the order it arrived, and says how long it waited
        assert [answers[name].status_code for name in ["long", *waiters]] == [200] * 4
        assert sorted(waiters, key=done.__getitem__) == waiters
        queue_ms = [_queue_ms(answers[name]) for name in waiters]
        assert all(ms is not None and ms > 0 for ms in queue_ms), queue_ms
        assert _queue_ms(answers["long"]) is None  # it did not wait: no queue metric
        timing = [m.name for m in parse_server_timing(answers["first"].headers["server-timing"])]
        assert timing[:2] == ["burn", "cpu"] and timing[-1] == "queue"

        # slots and places are all given back
        after = httpx.get(base + "/cpuBurnFlow", params={"iterations": 10})
        assert after.status_code == 200 and _queue_ms(after) is None
        _wait_for(lambda: state.in_flight == 0)   # given back once its answer is sent
        assert (state.in_flight, state.queued, state.peak, state.queued_peak, state.admitted,
                state.rejected, state.abandoned) == (0, 0, 1, 3, 5, 3, 0)
        metrics = httpx.get(base + "/metrics").text
    assert _metric(metrics, "throttle_lab_concurrency_queued_peak") == 3
    assert _metric(metrics, "throttle_lab_concurrency_queued") == 0
    assert _metric(metrics, "throttle_lab_concurrency_queue_wait_seconds_count") == 3
    total_wait = _metric(metrics, "throttle_lab_concurrency_queue_wait_seconds_sum")
    assert math.isclose(total_wait, sum(queue_ms) / 1e3, rel_tol=1e-3)  # type: ignore[arg-type]


def test_a_waiter_whose_client_leaves_gives_back_its_place_and_takes_no_slot() -> None:
    app = create_app(Settings(max_concurrent=1, max_queued=1))
    state = app.state.concurrency
    answers: dict[str, httpx.Response] = {}
    with running_service(app=app) as base:
        threads = [_in_thread(answers, {}, "long", lambda: httpx.get(
            base + "/cpuBurnFlow", params={"iterations": LONG_BURN}, timeout=120))]
        try:
            _wait_for(lambda: state.in_flight == 1)
            with pytest.raises(httpx.ReadTimeout):  # waits in line, then hangs up
                httpx.get(base + "/cpuBurnFlow", params={"iterations": 10}, timeout=0.5)
            _wait_for(lambda: state.queued == 0)  # it left the line ...
            left = (state.in_flight, state.abandoned, state.rejected)
            # ... so its place is free for the next one, which is served in its turn
            threads.append(_in_thread(answers, {}, "next", lambda: httpx.get(
                base + "/cpuBurnFlow", params={"iterations": 10}, timeout=120)))
            _wait_for(lambda: state.queued == 1)
            full = httpx.get(base + "/cpuBurnFlow", params={"iterations": 10})
            still_running = threads[0].is_alive()
        finally:
            for thread in threads:
                thread.join(timeout=120)
        assert still_running, "the long burn ended before the probes: make LONG_BURN larger"
        assert left == (1, 1, 0)  # no slot taken, nothing rejected
        assert full.status_code == 503
        assert answers["long"].status_code == 200 and answers["next"].status_code == 200
        assert (state.in_flight, state.queued, state.admitted, state.abandoned,
                state.rejected) == (0, 0, 2, 1, 1)
        assert httpx.get(base + "/cpuBurnFlow", params={"iterations": 10}).status_code == 200
        metrics = httpx.get(base + "/metrics").text
    assert _metric(metrics, "throttle_lab_concurrency_abandoned_total") == 1
    assert _metric(metrics, "throttle_lab_concurrency_queue_wait_seconds_count") == 1
    # logged as nginx's "client closed request", under its route
    assert 'route="/cpuBurnFlow",status="499"' in metrics


def test_a_client_that_leaves_mid_burn_frees_its_slot_when_the_work_ends() -> None:
    app = create_app(Settings(max_concurrent=1, max_queued=-1))
    state = app.state.concurrency
    with running_service(app=app) as base:
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(base + "/cpuBurnFlow", params={"iterations": 2_000_000}, timeout=0.3)
        # the work still runs (a thread cannot be stopped): its slot stays taken ...
        assert state.in_flight == 1
        assert httpx.get(base + "/cpuBurnFlow", params={"iterations": 10}).status_code == 503
        # ... and is given back when it ends: no slot leaks
        _wait_for(lambda: state.in_flight == 0)
        assert httpx.get(base + "/cpuBurnFlow", params={"iterations": 10}).status_code == 200
        assert state.in_flight == 0


def test_errors_and_bad_input_give_their_slot_back() -> None:
    app = create_app(Settings(max_concurrent=1, max_iterations=100))
    state = app.state.concurrency
    with running_service(app=app) as base, httpx.Client(base_url=base) as client:
        for _ in range(20):
            assert client.get("/cpuBurnFlow", params={"iterations": "x"}).status_code == 422
            assert client.get("/api/pi", params={"counter": "-3"}).status_code == 422
            assert client.post("/cpuBurnFlow").status_code == 405
        assert client.get("/cpuBurnFlow", params={"iterations": 100}).status_code == 200
    assert state.in_flight == 0 and state.rejected == 0 and state.peak == 1


def test_bad_input_and_wrong_methods_wait_in_line_and_give_their_place_back() -> None:
    app = create_app(Settings(max_concurrent=1, max_queued=3))
    state = app.state.concurrency
    answers: dict[str, httpx.Response] = {}
    with running_service(app=app) as base:
        threads = [_in_thread(answers, {}, "long", lambda: httpx.get(
            base + "/cpuBurnFlow", params={"iterations": LONG_BURN}, timeout=120))]
        try:
            _wait_for(lambda: state.in_flight == 1)
            threads.append(_in_thread(answers, {}, "bad", lambda: httpx.get(
                base + "/cpuBurnFlow", params={"iterations": "x"}, timeout=120)))
            _wait_for(lambda: state.queued == 1)
            # a request with a body: the guard keeps what it read while waiting for the app
            threads.append(_in_thread(answers, {}, "post", lambda: httpx.post(
                base + "/api/pi", content=b"x" * 100_000, timeout=120)))
            _wait_for(lambda: state.queued == 2)
            still_running = threads[0].is_alive()
        finally:
            for thread in threads:
                thread.join(timeout=120)
        assert still_running, "the long burn ended before the probes: make LONG_BURN larger"
        assert answers["bad"].status_code == 422
        assert answers["bad"].json()["detail"][0]["parameter"] == "iterations"
        assert answers["post"].status_code == 405
        assert _queue_ms(answers["bad"]) is not None
        # each place is given back once its answer is sent: the client may hold it first
        _wait_for(lambda: (state.in_flight, state.queued) == (0, 0))
        assert (state.rejected, state.abandoned) == (0, 0)
        assert httpx.get(base + "/api/pi", params={"counter": 10}).status_code == 200
