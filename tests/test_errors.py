"""Errors are JSON for API clients and HTML for browsers, never a traceback, never the input;
500s are logged server side; the access log carries no query string and no unknown path;
and (hypothesis) any value of a query parameter gets a 200 or the one 422 body."""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from service.accesslog import (
    ACCESS_FORMAT,
    ACCESS_LOGGER,
    OTHER_PATH,
    AccessLogFilter,
    LeanAccessFormatter,
    install_access_log_filter,
    log_config,
    safe_path,
)
from service.app import create_app
from service.config import Settings
from service.errors import error_response, route_name, wants_html
from tests.support import running_service, service_process

TOKEN = "zq7-hunter2"  # something a client sent that must never come back or be logged
MAX = 1000


class Records(logging.Handler):
    """Collects the records of one logger during a test."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(self.format(r) for r in self.records)


@contextmanager
def error_log() -> Iterator[Records]:
    """Records of ``uvicorn.error``. Enter it after the server started: uvicorn's logging
    setup (when its Config is made) removes the handlers of its loggers."""
    handler, logger = Records(), logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _assert_json_error(r: httpx.Response, status: int, error: str) -> dict[str, object]:
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["error"] == error and isinstance(body["message"], str) and body["message"]
    assert "Traceback" not in r.text and TOKEN not in r.text
    return body


# ----------------------------------------------------------------------------- 404 / 405

def test_unknown_path_is_json_404_without_the_path() -> None:
    with running_service() as base:
        r = httpx.get(f"{base}/no-such-{TOKEN}", params={"q": TOKEN})
        body = _assert_json_error(r, 404, "not found")
        assert "/docs" in str(body["message"])
        api = httpx.get(f"{base}/api/{TOKEN}", headers={"Accept": "text/html"})
        _assert_json_error(api, 404, "not found")  # /api/ stays JSON, even for a browser


def test_unknown_path_is_an_html_page_for_a_browser() -> None:
    with running_service() as base:
        r = httpx.get(f"{base}/no-such-<b>{TOKEN}</b>", headers={"Accept": "text/html"})
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "Not Found (404)" in r.text and TOKEN not in r.text and "Traceback" not in r.text


def test_wrong_method_is_json_405_with_allow() -> None:
    with running_service() as base:
        r = httpx.post(base + "/cpuBurnFlow", content=TOKEN)
    body = _assert_json_error(r, 405, "method not allowed")
    assert "GET" in r.headers["allow"] and "GET" in str(body["message"])


def test_a_bad_parameter_on_a_page_is_still_the_422_page() -> None:
    with running_service(max_counter=MAX) as base:
        page = httpx.get(base + "/pi", params={"counter": TOKEN}, headers={"Accept": "text/html"})
        api = httpx.get(base + "/api/pi", params={"counter": TOKEN},
                        headers={"Accept": "text/html"})
    assert page.status_code == 422 and page.headers["content-type"].startswith("text/html")
    assert "Invalid request (422)" in page.text and f"[0, {MAX}]" in page.text
    assert TOKEN not in page.text
    _assert_json_error(api, 422, "invalid request")


# ----------------------------------------------------------------------------- 500

def _app_that_fails() -> FastAPI:
    app = create_app(Settings())

    @app.get("/boom-sync")
    def boom_sync() -> None:
        raise RuntimeError(f"secret detail {TOKEN}")

    @app.get("/boom-async")
    async def boom_async() -> None:
        raise KeyError(TOKEN)

    return app


def test_an_exception_is_a_generic_500_and_logged_server_side() -> None:
    with running_service(app=_app_that_fails()) as base, error_log() as log:
        sync = httpx.get(base + "/boom-sync", params={"x": TOKEN})
        async_ = httpx.get(base + "/boom-async")
        after = httpx.get(base + "/healthz")
        metrics = httpx.get(base + "/metrics").text
    for r in (sync, async_):
        body = _assert_json_error(r, 500, "internal server error")
        assert "logged" in str(body["message"])
    assert after.status_code == 200  # the service goes on
    assert 'route="/boom-sync",status="500"' in metrics

    errors = [r for r in log.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2, log.text()  # each logged once, with its traceback
    by_route = {r.getMessage(): r for r in errors}
    sync_record = by_route["unhandled RuntimeError in GET /boom-sync"]
    assert sync_record.exc_info and "secret detail" in str(sync_record.exc_info[1])
    assert "unhandled KeyError in GET /boom-async" in by_route
    assert "x=" not in log.text()  # the query is not logged


def _request(path: str, accept: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": path, "root_path": "",
                    "query_string": b"", "scheme": "http", "server": ("127.0.0.1", 80),
                    "headers": [(b"accept", accept.encode())]})


def test_a_500_on_a_page_is_html_for_a_browser_and_json_otherwise() -> None:
    page = error_response(_request("/pi", "text/html,*/*"), 500, "failed")
    assert page.status_code == 500 and page.media_type == "text/html"
    assert b"Internal Server Error (500)" in page.body and b"failed" in page.body
    api = error_response(_request("/api/pi", "text/html"), 500, "failed")
    assert api.media_type == "application/json"
    assert not wants_html(_request("/cpuBurnFlow", "text/html"), 503)
    assert wants_html(_request("/elsewhere", "text/html"), 404)
    assert not wants_html(_request("/elsewhere", "application/json"), 404)
    assert route_name({"type": "http"}) == OTHER_PATH


# ----------------------------------------------------------------------------- access log

def _uvicorn_record(path: str) -> logging.LogRecord:
    return logging.LogRecord(ACCESS_LOGGER, logging.INFO, __file__, 1,
                             '%s - "%s %s HTTP/%s" %d',
                             ("127.0.0.1:5000", "GET", path, "1.1", 200), None)


def test_access_log_filter_drops_queries_and_unknown_paths() -> None:
    known = {"/cpuBurnFlow", "/pi"}
    assert safe_path("/cpuBurnFlow?iterations=5", known) == "/cpuBurnFlow"
    assert safe_path("/pi", known) == "/pi"
    assert safe_path(f"/{TOKEN}?a=b", known) == OTHER_PATH
    log_filter = AccessLogFilter(known)
    record = _uvicorn_record(f"/cpuBurnFlow?iterations={TOKEN}")
    assert log_filter.filter(record)
    assert record.getMessage() == '127.0.0.1:5000 - "GET /cpuBurnFlow HTTP/1.1" 200'
    other = _uvicorn_record(f"/%1B%5B31m{TOKEN}")
    log_filter.filter(other)
    assert TOKEN not in other.getMessage() and OTHER_PATH in other.getMessage()


def test_access_log_filter_is_installed_once_per_logger() -> None:
    logger = logging.getLogger("test.access.once")
    first = install_access_log_filter(["/a"], logger)
    second = install_access_log_filter(["/b"], logger)
    assert first is second and logger.filters == [first]
    assert first.known_paths == {"/a", "/b"}
    create_app(Settings())
    create_app(Settings())
    uvicorn_filters = [f for f in logging.getLogger(ACCESS_LOGGER).filters
                       if isinstance(f, AccessLogFilter)]
    assert len(uvicorn_filters) == 1 and "/cpuBurnFlow" in uvicorn_filters[0].known_paths


@pytest.mark.parametrize("status", [200, 404, 422, 499, 503, 799])
@pytest.mark.parametrize("level", [logging.INFO, logging.WARNING, logging.CRITICAL])
def test_lean_access_formatter_writes_uvicorns_text(status: int, level: int) -> None:
    from uvicorn.logging import AccessFormatter

    record = logging.LogRecord(ACCESS_LOGGER, level, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "GET", "/pi", "1.1", status), None)
    stock = AccessFormatter(ACCESS_FORMAT, use_colors=False).format(record)
    assert LeanAccessFormatter(ACCESS_FORMAT, use_colors=False).format(record) == stock
    coloured = AccessFormatter(ACCESS_FORMAT, use_colors=True).format(record)
    assert LeanAccessFormatter(ACCESS_FORMAT, use_colors=True).format(record) == coloured
    other = "%(levelname)s %(message)s"      # another format: uvicorn's formatter does it
    assert LeanAccessFormatter(other).format(record) == AccessFormatter(other).format(record)


def test_burn_service_logs_through_the_lean_formatter() -> None:
    config = log_config()
    assert config["formatters"]["access"]["()"] == "service.accesslog.LeanAccessFormatter"
    assert config["formatters"]["access"]["fmt"] == ACCESS_FORMAT
    assert config["loggers"]["uvicorn.access"]["handlers"] == ["access"]


def test_the_running_service_logs_requests_without_their_input() -> None:
    with service_process(["--log-level", "info", "--max-iterations", str(MAX)]) as (base, proc):
        with httpx.Client(base_url=base) as client:
            ok = client.get("/cpuBurnFlow", params={"iterations": 7, "k": TOKEN})
            assert ok.status_code == 200
            assert client.get("/cpuBurnFlow", params={"iterations": TOKEN}).status_code == 422
            assert client.get(f"/{TOKEN}").status_code == 404
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        assert proc.stdout is not None and proc.stderr is not None
        log = proc.stdout.read().decode() + proc.stderr.read().decode()
    access = [line for line in log.splitlines() if '"GET ' in line]
    assert len(access) >= 4, log  # /healthz probes + our three
    assert TOKEN not in log and "iterations" not in log and "?" not in "".join(access)
    assert any('"GET /cpuBurnFlow HTTP/1.1" 200' in line for line in access)
    assert any('"GET /cpuBurnFlow HTTP/1.1" 422' in line for line in access)
    assert any(f'"GET {OTHER_PATH} HTTP/1.1" 404' in line for line in access)


# ----------------------------------------------------------------------------- 422 properties

@pytest.fixture(scope="module")
def small_service() -> Iterator[httpx.Client]:
    """One server and one keep-alive client for all examples (a new client per request
    would cost more than the request)."""
    with running_service(max_iterations=MAX, max_counter=MAX) as base, \
            httpx.Client(base_url=base) as client:
        yield client


def _canonical_422(name: str) -> dict[str, object]:
    message = f"{name} must be an integer in [0, {MAX}]"
    return {"error": "invalid request", "message": message,
            "detail": [{"parameter": name, "allowed": {"min": 0, "max": MAX},
                        "message": message}]}


ANY_VALUE = st.one_of(st.text(max_size=30), st.integers().map(str),
                      st.floats(allow_nan=True, allow_infinity=True).map(str))
PROPERTY = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@PROPERTY
@given(value=ANY_VALUE)
@example(value="")
@example(value=" 5")
@example(value="1e3")
@example(value="1_000")
@example(value="\x00")
@example(value="9" * 5000)
def test_any_iterations_is_200_in_range_or_the_one_422(small_service: httpx.Client,
                                                        value: str) -> None:
    r = small_service.get("/cpuBurnFlow", params={"iterations": value})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 200:
        assert 0 <= r.json()["iterations"] <= MAX
    else:
        assert r.json() == _canonical_422("iterations")  # names the range, echoes nothing


@PROPERTY
@given(value=ANY_VALUE)
def test_any_counter_is_200_in_range_or_the_one_422(small_service: httpx.Client,
                                                     value: str) -> None:
    r = small_service.get("/api/pi", params={"counter": value})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 200:
        assert 0 <= r.json()["counter"] <= MAX
    else:
        assert r.json() == _canonical_422("counter")


@PROPERTY
@given(n=st.integers(min_value=-10**30, max_value=10**30))
@example(n=-1)
@example(n=0)
@example(n=MAX)
@example(n=MAX + 1)
def test_integers_are_accepted_exactly_in_range(small_service: httpx.Client, n: int) -> None:
    r = small_service.get("/cpuBurnFlow", params={"iterations": str(n)})
    if 0 <= n <= MAX:
        assert r.status_code == 200 and r.json()["iterations"] == n
    else:
        assert r.status_code == 422 and r.json() == _canonical_422("iterations")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(min_size=1, max_size=30).filter(lambda s: not s.strip().isdigit()))
def test_the_422_page_is_the_same_whatever_was_typed(small_service: httpx.Client,
                                                     value: str) -> None:
    reference = small_service.get("/pi", params={"counter": "abc"},
                                  headers={"Accept": "text/html"})
    r = small_service.get("/pi", params={"counter": value}, headers={"Accept": "text/html"})
    if r.status_code == 200:  # something pydantic reads as a number in range
        return
    assert r.status_code == 422 and r.text == reference.text
