from __future__ import annotations

import httpx

from tests.support import running_service


def test_burn_returns_original_body_plus_server_times() -> None:
    with running_service() as base:
        r = httpx.get(base + "/cpuBurnFlow", params={"iterations": 2000})
    assert r.status_code == 200
    body = r.json()
    assert body["result"] == "success" and body["iterations"] == 2000
    assert body["cpu_ns"] > 0 and body["wall_ns"] > 0
    assert "burn;dur=" in r.headers["server-timing"]


def test_default_iterations_is_5000() -> None:
    with running_service() as base:
        assert httpx.get(base + "/cpuBurnFlow").json()["iterations"] == 5000


def test_bad_iterations_get_422_naming_parameter_and_range() -> None:
    with running_service(max_iterations=1000) as base:
        for bad in ("-1", "1001", "abc", "1.5", "99999999999999999999999"):
            r = httpx.get(base + "/cpuBurnFlow", params={"iterations": bad})
            assert r.status_code == 422, bad
            body = r.json()
            assert body["detail"][0]["parameter"] == "iterations"
            assert "[0, 1000]" in body["message"]
            assert bad not in r.text  # input is not reflected


def test_healthz_limits_docs() -> None:
    with running_service(max_iterations=1234) as base:
        assert httpx.get(base + "/healthz").status_code == 200
        limits = httpx.get(base + "/limits").json()
        assert limits["max_iterations"] == 1234 and limits["cpu_count"] >= 1
        assert httpx.get(base + "/openapi.json").json()["paths"]["/cpuBurnFlow"]
        assert httpx.get(base + "/docs").status_code == 200


def test_threads_burn_in_parallel_and_are_bounded() -> None:
    with running_service(max_threads=3) as base:
        two = httpx.get(base + "/cpuBurnFlow", params={"iterations": 20000, "threads": 2})
        assert two.status_code == 200
        body = two.json()
        assert body["threads"] == 2 and body["cpu_ns"] > 0
        assert "cpu;dur=" in two.headers["server-timing"]
        one = httpx.get(base + "/cpuBurnFlow", params={"iterations": 20000}).json()
        assert "threads" not in one  # the original body, unchanged
        for bad in ("0", "4", "two", "-1"):
            r = httpx.get(base + "/cpuBurnFlow", params={"iterations": 10, "threads": bad})
            assert r.status_code == 422, bad
            assert r.json()["detail"][0] == {"parameter": "threads",
                                             "allowed": {"min": 1, "max": 3},
                                             "message": "threads must be an integer in [1, 3]"}
        assert httpx.get(base + "/limits").json()["max_threads"] == 3
