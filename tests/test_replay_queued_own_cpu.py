"""A throttled open loop whose requests carry their own CPU (``Server-Timing``): each request
is replayed with its own CPU (times what the group ran over what the requests said), not with
a share of the rows it lasted over (issue 57's matrix: burn-service's open loop at 55/s,
recorded at 0.3 CPU, advised 0.637 CPU where live met the goal at 0.412).

Under the quota a one-thread server queues the requests: each one waits most of its latency
and runs its CPU at the end. Shared by each one's CPU spread evenly over its latency, the rows
of the queue's drain (the loop has stopped sending, the group still runs the backlog at its
quota) went to the few requests still in flight, two to three times their own, and a replay at
a limit that keeps up sent a burst of heavy requests at the window's end.

The record is a fake clock's (the quota model, rows 10 ms apart): a one-thread FIFO server,
requests sent every 12 ms for 2 s (4, 5 or 6 ms of CPU each: 0.42 CPU), recorded at 0.3 CPU
until the queue drained. Known answers: each request's CPU is its own; at 0.6 CPU the replay's
latencies are the same server's under the quota model at 0.6 CPU."""

from __future__ import annotations

import pytest

from client.analysis.replay import Request, demand_of, load_of, replay_limits
from client.data.attribution import held
from client.data.summary import percentile
from client.data.timeline import CgroupSample
from cpuquota.account import QuotaAccount

MS = 1_000_000
PERIOD = 100 * MS
ROW = 10 * MS
GAP = 12 * MS
SENT = 167   # 2 s of the loop
FIRST = 50 * MS   # the loop's first send (past the grid's first boundary)


def own_ms(i: int) -> int:
    return (4, 5, 6)[i % 3]


def served(cpus: float) -> tuple[list[CgroupSample], list[tuple[int, int]]]:
    """The FIFO server under ``cpus`` of the quota model (on a grid 37 ms off the clock's
    zero): its timeline until the queue drained, and each request's (send, end)."""
    account = QuotaAccount(round(cpus * PERIOD), PERIOD, origin_ns=37 * MS)
    samples: list[CgroupSample] = []
    spans: list[tuple[int, int]] = []
    usage, t, at, left = 0, 0, 0, own_ms(0) * MS
    end_at = None
    while end_at is None or t <= end_at:
        if t % ROW == 0:
            stats = account.stats(t)
            samples.append(CgroupSample(t, usage, stats.nr_periods, stats.nr_throttled,
                                        stats.throttled_ns))
        if at < SENT and FIRST + at * GAP <= t and account.throttled_until(t) == t:
            step = min(MS, left, account.remaining(t))
            account.charge(step, t + MS)
            usage, left = usage + step, left - step
            if left == 0:
                spans.append((FIRST + at * GAP, t + MS))
                at += 1
                left = own_ms(at) * MS
                if at == SENT:
                    end_at = t + 200 * MS
        t += MS
    return samples, spans


def recorded() -> tuple[list[CgroupSample], list[Request]]:
    samples, spans = served(0.3)
    holds = held(spans, [samples], [PERIOD])
    return samples, [Request(s, e - s, h, own_ms(i) * MS)
                     for i, ((s, e), h) in enumerate(zip(spans, holds))]


def test_the_record_queued_and_drained() -> None:
    samples, requests = recorded()
    latencies = sorted(r.latency_ns for r in requests)
    assert samples[-1].nr_throttled > 0
    assert latencies[-1] > 500 * MS   # a queue built under the quota
    assert samples[-1].t_ns > FIRST + SENT * GAP + 500 * MS   # and drained after the loop stopped


def test_each_queued_request_runs_its_own_cpu() -> None:
    samples, requests = recorded()
    demand = demand_of(samples, PERIOD)
    assert demand.throttled_wall_ns > 0
    load = load_of(demand, requests, closed=False)
    got = [j.cpu_ns / MS for j in load.jobs]
    # the group ran nothing but the requests: each one its own 4, 5 or 6 ms
    assert got == pytest.approx([own_ms(i) for i in range(len(requests))], rel=0.02), \
        [round(g, 2) for g in got[-10:]]


def test_at_a_limit_that_keeps_up_the_replay_is_the_servers_latency_there() -> None:
    samples, requests = recorded()
    _, truth = served(0.6)
    demand = demand_of(samples, PERIOD)
    (row,) = replay_limits(demand, [0.6], requests, closed=False)
    assert row.latencies_ns is not None
    predicted = [v / MS for v in row.latencies_ns]
    measured = [(e - s) / MS for s, e in truth]
    # the quota model's own server at 0.6 CPU against the replay of the 0.3 CPU record
    for q in (50, 90, 99):
        assert percentile(predicted, q) == pytest.approx(percentile(measured, q),
                                                         rel=0.25, abs=3.0), \
            (q, percentile(predicted, q), percentile(measured, q))
