"""The concurrency cap (service.guard): the pure counters, the default, and a real server
that answers 503 + Retry-After while its slots are taken, and frees them afterwards."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from service.app import create_app
from service.cli import parse_settings
from service.config import Settings, SettingsError
from service.guard import (
    GUARDED_PATHS,
    GuardState,
    available_cpus,
    busy_body,
    install_guard,
    resolve_max_concurrent,
)
from tests.support import running_service

LONG_BURN = 4_000_000  # ~3-4 s of CPU here: long enough to probe the server while it runs


# ----------------------------------------------------------------------------- pure parts

def test_state_admits_up_to_the_limit_then_rejects() -> None:
    state = GuardState(limit=2)
    assert state.try_enter() and state.try_enter()
    assert not state.try_enter()
    assert (state.in_flight, state.peak, state.admitted, state.rejected) == (2, 2, 2, 1)
    state.leave()
    assert state.try_enter()
    state.leave()
    state.leave()
    assert (state.in_flight, state.peak, state.admitted, state.rejected) == (0, 2, 3, 1)


def test_state_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        GuardState(limit=0)
    with pytest.raises(RuntimeError, match="without a matching"):
        GuardState(limit=1).leave()


def test_default_is_twice_the_cpus_shared_across_workers() -> None:
    assert resolve_max_concurrent(Settings(), cpus=2) == 4
    assert resolve_max_concurrent(Settings(workers=3), cpus=2) == 2  # ceil(4 / 3)
    assert resolve_max_concurrent(Settings(workers=8), cpus=2) == 1  # never 0
    assert resolve_max_concurrent(Settings(max_concurrent=7, workers=8), cpus=2) == 7
    assert resolve_max_concurrent(Settings()) == 2 * available_cpus()


def test_option_from_command_line_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_settings(["--max-concurrent", "3"]).max_concurrent == 3
    monkeypatch.setenv("BURN_SERVICE_MAX_CONCURRENT", "5")
    assert parse_settings([]).max_concurrent == 5
    assert parse_settings(["--max-concurrent", "6"]).max_concurrent == 6  # the flag wins
    with pytest.raises(SettingsError, match="--max-concurrent"):
        Settings.from_env({"BURN_SERVICE_MAX_CONCURRENT": "-1"})
    with pytest.raises(SettingsError, match="BURN_SERVICE_MAX_CONCURRENT"):
        Settings.from_env({"BURN_SERVICE_MAX_CONCURRENT": "two"})


def test_busy_body_says_what_and_when() -> None:
    body = busy_body(3)
    assert body["error"] == "busy" and body["max_concurrent"] == 3 and body["retry_after_s"] == 1
    assert "3 requests" in str(body["message"]) and "--max-concurrent 3" in str(body["message"])
    assert "1 request doing" in str(busy_body(1)["message"])


def test_guarding_a_path_that_is_no_route_is_an_error() -> None:
    app = create_app(Settings())
    with pytest.raises(ValueError, match="/renamed"):
        install_guard(app, 1, paths={"/renamed"})


def test_every_cpu_route_is_guarded_and_limits_reports_the_cap() -> None:
    app = create_app(Settings(max_concurrent=3))
    assert app.state.concurrency.limit == 3
    assert GUARDED_PATHS == {"/cpuBurnFlow", "/pi", "/api/pi"}
    with running_service(app=app) as base:
        assert httpx.get(base + "/limits").json()["max_concurrent"] == 3
        metrics = httpx.get(base + "/metrics").text
    assert "throttle_lab_concurrency_limit 3.0" in metrics
    assert "throttle_lab_concurrency_rejected_total 0.0" in metrics


# ----------------------------------------------------------------------------- real server

def _wait_for(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def test_beyond_the_cap_cpu_routes_get_503_with_retry_after() -> None:
    app = create_app(Settings(max_concurrent=1))
    state = app.state.concurrency
    with running_service(app=app) as base:
        answers: list[httpx.Response] = []
        long = threading.Thread(target=lambda: answers.append(
            httpx.get(base + "/cpuBurnFlow", params={"iterations": LONG_BURN}, timeout=120)))
        long.start()
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
        assert answers and answers[0].status_code == 200

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
        assert (state.in_flight, state.peak, state.rejected) == (0, 1, 4)
        metrics = httpx.get(base + "/metrics").text
        assert "throttle_lab_concurrency_rejected_total 4.0" in metrics
        assert 'route="/cpuBurnFlow",status="503"' in metrics  # counted under its route


def test_a_client_that_leaves_mid_burn_frees_its_slot_when_the_work_ends() -> None:
    app = create_app(Settings(max_concurrent=1))
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
