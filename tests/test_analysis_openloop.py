"""The open-loop quota model: arrivals on a schedule, a queue at the server while throttled."""

from __future__ import annotations

import pytest

from client.analysis.model import Scenario, predict
from client.analysis.openloop import predict_open
from cpuquota.limit import Limit

MS = 1_000_000


def workload(cpus: float, service_ms: float = 5.0, requests: int = 100,
             overhead_ms: float = 0.0, **rest: object) -> Scenario:
    return Scenario.under(Limit(cpus), service_ms, requests=requests, overhead_ms=overhead_ms,
                          **rest)  # type: ignore[arg-type]


def test_spaced_out_requests_are_never_throttled() -> None:
    # 20/s x 5 ms = 0.1 CPU of work under a 0.3 CPU quota
    prediction = predict_open(workload(0.3, overhead_ms=2.0), 20)
    assert [r.latency_ns for r in prediction.records] == [7 * MS] * 100
    assert [r.scheduled_ns for r in prediction.records] == [i * 50 * MS for i in range(100)]
    assert all(r.start_ns == r.scheduled_ns for r in prediction.records)
    assert prediction.throttled_fraction == 0 and prediction.stats.nr_throttled == 0


def test_arrivals_back_to_back_match_the_closed_loop_when_unthrottled() -> None:
    w = workload(2.0, overhead_ms=3.0)
    closed = predict(w)
    opened = predict_open(w, 1000 / 8.0)          # one every 8 ms = 5 ms work + 3 ms network
    assert [r.latency_ns for r in opened.records] == [r.latency_ns for r in closed.records]
    assert [r.start_ns for r in opened.records] == [r.start_ns for r in closed.records]


def test_requests_arriving_during_a_stall_wait_for_the_refill() -> None:
    # 40/s x 10 ms = 0.4 CPU of work under 0.35 CPU: each period runs out 5 ms short
    prediction = predict_open(workload(0.35, service_ms=10.0, requests=40), 40)
    paused = [r for r in prediction.records if r.server_throttle_ns]
    assert paused and prediction.stats.nr_throttled > 0
    assert all(r.latency_ns > 10 * MS for r in paused)
    # the closed loop would only send more slowly; the open loop's backlog grows instead
    lat = [r.latency_ns for r in prediction.records]
    assert lat[-1] > lat[len(lat) // 2] > lat[0]
    closed = predict(workload(0.35, service_ms=10.0, requests=40))
    assert max(lat) > max(r.latency_ns for r in closed.records)


def test_each_request_may_take_its_own_cpu() -> None:
    prediction = predict_open(workload(1.0, requests=6), 10, cpu_ms=(2.0, 4.0, 6.0))
    assert [r.server_cpu_ns for r in prediction.records] == [2 * MS, 4 * MS, 6 * MS] * 2
    assert [r.latency_ns for r in prediction.records] == [2 * MS, 4 * MS, 6 * MS] * 2


def test_two_requests_at_the_server_share_one_core() -> None:
    # a 10 ms request, and a 10 ms request arriving 5 ms later: 5 ms alone, then both at half
    # speed (10 ms for the 5 ms each had left), then none left
    prediction = predict_open(workload(1.0, service_ms=10.0, requests=2), 200)
    assert [r.latency_ns for r in prediction.records] == [15 * MS, 15 * MS]


def test_the_same_workload_gives_the_same_answer() -> None:
    w = workload(0.3, requests=200)
    assert predict_open(w, 70).records == predict_open(w, 70).records


@pytest.mark.parametrize(("rate", "cpu_ms", "message"), [
    (0.0, (), "rate_rps must be a number > 0"),
    (float("nan"), (), "rate_rps must be a number > 0"),
    (10.0, (1.0, -1.0), "cpu_ms must hold numbers > 0"),
])
def test_bad_input(rate: float, cpu_ms: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        predict_open(workload(0.5), rate, cpu_ms)
