"""client.data.pace: the send lag, the achieved rate and when the client fell behind."""

from __future__ import annotations

from client.data.pace import closed_loop_pace, fell_behind_words, open_loop_pace
from client.data.record import RequestRecord


def records(rate: float, lag_ns: list[int]) -> list[RequestRecord]:
    step = round(1e9 / rate)
    return [RequestRecord(i, i * step + lag, 1_000_000, 200, scheduled_ns=i * step)
            for i, lag in enumerate(lag_ns)]


def test_on_time_is_not_behind() -> None:
    pace = open_loop_pace(records(1000, [20_000] * 200), 1000)
    assert pace is not None and not pace.fell_behind
    assert round(pace.achieved_rps) == 1000 and pace.send_lag_p99_ms == 0.02
    assert fell_behind_words(pace.fell_behind, pace.to_dict()) is None


def test_a_lag_over_one_ms_at_p99_is_behind() -> None:
    lags = [0] * 195 + [3_000_000] * 5   # 2.5 % of the requests went 3 ms late
    pace = open_loop_pace(records(1000, lags), 1000)
    assert pace is not None and pace.fell_behind and pace.send_lag_p99_ms == 3.0
    assert pace.achieved_rps >= 980  # the rate alone would not say so
    assert fell_behind_words(pace.fell_behind, pace.to_dict()) == (
        "http-timing fell behind: its sends lagged up to 3 ms (p99) behind schedule (at the "
        "1000 requests/s asked); these latencies include its own queue, not only the service's")


def test_a_rate_under_98_percent_is_behind() -> None:
    # every request 1 % later than the last: 1000/s asked, ~990/s sent... and growing lag
    growing = [i * 100_000 for i in range(100)]
    pace = open_loop_pace(records(1000, growing), 1000)
    assert pace is not None and pace.fell_behind and pace.achieved_rps < 980
    words = fell_behind_words(True, pace.to_dict())
    assert words is not None and words.startswith(
        f"http-timing fell behind: it sent {pace.to_dict()['achieved_rps']:g} of the 1000 "
        "requests/s asked, its sends lagging up to ")
    assert "include its own queue" in words


def test_too_few_requests_say_nothing_and_closed_loops_keep_their_own_time() -> None:
    assert open_loop_pace(records(10, [0]), 10) is None
    assert closed_loop_pace(3_000_000, 100) == {"own_time_per_request_us": 30.0,
                                                "requests": 100}
    assert closed_loop_pace(0, 0) is None
