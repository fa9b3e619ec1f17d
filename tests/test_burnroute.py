"""service.burnroute: the lean lane to ``GET /cpuBurnFlow`` and FastAPI's route behind it give
the same answers, through the same middleware; only the plain request takes the lane."""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.app import create_app
from service.burn import DEFAULT_ITERATIONS
from service.burnroute import INLINE_ITERATIONS, BurnWork, parse_iterations
from service.config import Settings
from service.throttle import Throttle
from tests.support import running_service

MAX = 100_000


@pytest.mark.parametrize(("query", "expected"), [
    (b"", DEFAULT_ITERATIONS), (b"iterations=0", 0), (b"iterations=7", 7),
    (b"iterations=100000", MAX),
    (b"iterations=100001", None), (b"iterations=-1", None), (b"iterations=+5", None),
    (b"iterations=007", None), (b"iterations=%35", None), (b"iterations=", None),
    (b"iterations", None), (b"iterations=5&x=1", None), (b"x=1", None), (b"iterations=5.0", None),
    (b"iterations=1e3", None), (b"iterations=%20%35", None), (b"iterations=9" * 3, None),
])
def test_the_lane_takes_only_the_plain_query(query: bytes, expected: int | None) -> None:
    assert parse_iterations(query, MAX) == expected


@given(st.integers(min_value=0, max_value=10 * MAX))
def test_any_plain_count_is_taken_within_the_range(n: int) -> None:
    assert parse_iterations(b"iterations=%d" % n, MAX) == (n if n <= MAX else None)


def test_a_default_above_the_maximum_is_left_to_fastapi() -> None:
    assert parse_iterations(b"", DEFAULT_ITERATIONS - 1) is None


def test_only_small_unthrottled_burns_run_on_the_event_loop() -> None:
    work = BurnWork(Throttle(), None, lambda cpu_ns: None)
    assert work.may_run_inline(INLINE_ITERATIONS) and not work.may_run_inline(INLINE_ITERATIONS + 1)
    throttled = BurnWork(Throttle(50), None, lambda cpu_ns: None)
    assert not throttled.may_run_inline(1)    # the throttle may sleep: never on the loop


def _shape(response: httpx.Response) -> tuple[int, str, tuple[str, ...], tuple[str, ...]]:
    body = json.loads(response.content)
    names = re.findall(r"(?:^|, )([\w-]+);dur=", response.headers["server-timing"])
    return (response.status_code, response.headers["content-type"], tuple(sorted(body)),
            tuple(names))


def test_lane_and_fastapi_answer_alike_and_are_counted_alike() -> None:
    app = create_app(Settings(max_iterations=MAX))
    burns: list[int] = []
    with running_service(app=app) as base, httpx.Client(base_url=base) as client:
        lane_small = client.get("/cpuBurnFlow", params={"iterations": 7})
        lane_big = client.get("/cpuBurnFlow", params={"iterations": 2 * INLINE_ITERATIONS})
        lane_default = client.get("/cpuBurnFlow")
        fastapi = client.get("/cpuBurnFlow", params={"iterations": 7, "other": "x"})
        encoded = client.get("/cpuBurnFlow?iterations=%37")
        bad = client.get("/cpuBurnFlow", params={"iterations": MAX + 1})
        head = client.head("/cpuBurnFlow")
        metrics = client.get("/metrics").text
        burns = [t.ident or 0 for t in threading.enumerate() if t.name.startswith("burn")]
    shapes = {_shape(r) for r in (lane_small, lane_big, lane_default, fastapi, encoded)}
    assert len(shapes) == 1, shapes
    status, content_type, keys, names = shapes.pop()
    assert (status, content_type) == (200, "application/json")
    assert keys == ("cpu_ns", "iterations", "result", "wall_ns")
    assert names[:2] == ("burn", "cpu")
    assert [r.json()["iterations"] for r in (lane_small, lane_big, lane_default, fastapi,
                                             encoded)] == [7, 2 * INLINE_ITERATIONS,
                                                           DEFAULT_ITERATIONS, 7, 7]
    assert bad.status_code == 422 and bad.json()["detail"][0]["parameter"] == "iterations"
    assert head.status_code == 405
    assert burns, "a burn above INLINE_ITERATIONS runs in the lane's pool"
    counted = re.search(r'throttle_lab_http_requests_total\{method="GET",route="/cpuBurnFlow",'
                        r'status="200"\} (\S+)', metrics)
    assert counted is not None and float(counted.group(1)) == 5
    burn_cpu = re.search(r"^throttle_lab_burn_cpu_seconds_total (\S+)$", metrics, re.M)
    assert burn_cpu is not None and float(burn_cpu.group(1)) > 0
    assert 'route="/cpuBurnFlow",status="422"' in metrics


def test_the_pool_ends_with_the_app() -> None:
    before = {t.ident for t in threading.enumerate()}
    with running_service(max_iterations=MAX) as base:
        assert httpx.get(base + "/cpuBurnFlow", params={"iterations": 1000}).status_code == 200
    for thread in threading.enumerate():
        if thread.ident not in before and thread.name.startswith("burn"):
            thread.join(timeout=10)
            assert not thread.is_alive(), thread.name
