"""client.run.plan: the load plan of --requests/--concurrency/--rate/--duration (pure)."""

from __future__ import annotations

import re

import pytest

from client.data.metadata import LoadMode
from client.data.record import RequestRecord
from client.data.summary import summarize
from client.run.plan import LoadPlan, LoadPlanError, intended_send_ns, open_loop_workers

MS = 1_000_000


def test_plan_modes() -> None:
    assert LoadPlan.from_options() == LoadPlan(LoadMode.SEQUENTIAL, 100)
    assert LoadPlan.from_options(requests=7) == LoadPlan(LoadMode.SEQUENTIAL, 7)
    assert LoadPlan.from_options(concurrency=4, requests=20) == LoadPlan(LoadMode.CLOSED_LOOP, 20, 4)
    assert LoadPlan.from_options(concurrency=4, duration=2.5) == LoadPlan(LoadMode.CLOSED_LOOP, None, 4,
                                                                         None, 2.5)
    assert LoadPlan.from_options(rate=20, duration=3) == LoadPlan(LoadMode.OPEN_LOOP, 60, 1, 20.0, 3.0)
    assert LoadPlan.from_options(rate=4, requests=10) == LoadPlan(LoadMode.OPEN_LOOP, 10, 1, 4.0, 2.5)
    assert LoadPlan.from_options(rate=0.5, duration=4.1).requests == 2
    assert LoadPlan.from_options(rate=20, duration=3).describe() == (
        "open loop: 20 requests/s for 3 s (60 requests)")
    assert LoadPlan.from_options(concurrency=2, duration=1).describe() == (
        "closed loop: 2 at a time, for 1 s")
    meta = LoadPlan.from_options(rate=20, duration=3).to_metadata()
    assert meta == {"mode": LoadMode.OPEN_LOOP, "requests": 60, "concurrency": 1, "rate_rps": 20.0,
                    "duration_s": 3.0}


@pytest.mark.parametrize(("options", "message"), [
    ({"rate": 10, "concurrency": 2}, "--rate and --concurrency cannot be combined"),
    ({"duration": 3}, "--duration needs --rate R (open loop) or --concurrency C"),
    ({"rate": 10, "duration": 1, "requests": 5}, "give --requests N or --duration D, not both"),
    ({"rate": 1, "duration": 0.5}, "sends no request"),
    ({"rate": float("inf"), "duration": 1}, "--rate must be a number > 0"),
    ({"concurrency": 0}, "--concurrency must be an integer >= 1"),
])
def test_plan_rejects_what_does_not_make_sense(options: dict[str, float], message: str) -> None:
    with pytest.raises(LoadPlanError, match=re.escape(message)) as info:
        LoadPlan.from_options(**options)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_schedule_and_pool_size() -> None:
    assert [intended_send_ns(i, 20) for i in range(4)] == [0, 50 * MS, 100 * MS, 150 * MS]
    assert intended_send_ns(3, 3) == 1_000_000_000
    assert open_loop_workers(1) == 4
    assert open_loop_workers(100) == 25
    assert open_loop_workers(10_000) == 64


def test_open_loop_total_time_runs_from_the_intended_send() -> None:
    late = RequestRecord(1, start_ns=90 * MS, latency_ns=100 * MS, status=200, scheduled_ns=50 * MS)
    first = RequestRecord(0, start_ns=1 * MS, latency_ns=10 * MS, status=200, scheduled_ns=0)
    assert summarize([first, late]).total_ms == pytest.approx(150.0)  # ends at 50 + 100
