"""A request a throttled record held beside others takes, in the replay, the wall its CPU
takes alone (the donors' pace), not its latency less its hold: that also holds its wait
behind the backlog the throttles built, which the replay builds again where a limit does.

The record is a fake clock's: one CPU, a quota of 30 ms a 100 ms period, the requests
sharing the CPU evenly (processor sharing). For 1.5 s a request every 50 ms with 4 ms of CPU
runs alone, never throttled; then for 1 s one every 20 ms with 8 ms (0.4 CPU: the quota
builds a backlog that clears after the last one). Known answer: without a limit each of
those requests takes its 8 ms, alone."""

from __future__ import annotations

from client.analysis.replay import Request, demand_of, load_of, replay_load
from client.data.attribution import held
from client.data.summary import percentile
from client.data.timeline import CgroupSample

MS = 1_000_000
PERIOD = 100 * MS
QUOTA = 30 * MS
ROW = 10 * MS
STEP = MS // 10


def record() -> tuple[list[CgroupSample], list[Request]]:
    """The record (see the module docstring): the group's rows and its requests."""
    arrivals = [(i * 50 * MS, 4 * MS) for i in range(30)]
    arrivals += [(1500 * MS + i * 20 * MS, 8 * MS) for i in range(50)]
    left: dict[int, int] = {}
    done: dict[int, int] = {}
    usage = used_in_period = throttled = nr = 0
    throttled_this = False
    samples = []
    t = 0
    while t <= 3500 * MS:
        if t % ROW == 0:
            samples.append(CgroupSample(t, usage, t // PERIOD, nr, throttled))
        if t % PERIOD == 0:
            used_in_period, throttled_this = 0, False
        for i, (at, cpu) in enumerate(arrivals):
            if at == t:
                left[i] = cpu
        if left:
            if used_in_period >= QUOTA:
                throttled += STEP
                if not throttled_this:
                    nr, throttled_this = nr + 1, True
            else:
                share = STEP / len(left)
                for i in list(left):
                    left[i] -= share
                    if left[i] <= 1e-6:
                        done[i] = t + STEP
                        del left[i]
                usage += STEP
                used_in_period += STEP
        t += STEP
    assert not left, "the backlog cleared in the record"
    spans = [(arrivals[i][0], done[i]) for i in range(len(arrivals))]
    holds = held(spans, [samples], [PERIOD])
    return samples, [Request(s, e - s, h) for (s, e), h in zip(spans, holds)]


def test_a_backlogs_wait_is_not_the_requests_own_wall() -> None:
    samples, requests = record()
    demand = demand_of(samples, PERIOD)
    assert demand.throttled_wall_ns > 0 and demand.cores == 1
    late = requests[30:]
    recorded = [r.latency_ns / MS for r in late]
    assert percentile(recorded, 99) > 100            # the backlog: far above their 8 ms
    assert percentile([(r.latency_ns - r.held_ns) / MS for r in late], 99) > 40
    load = load_of(demand, requests, closed=False)
    assert load.drawn is not None and load.drawn.drawn > 0
    _r, latencies, _s = replay_load(demand, load, None)
    alone = [latencies[i] / MS for i in range(30, 80)]
    # without a limit, one every 20 ms with about 8 ms of CPU (as drawn): each alone
    assert percentile(alone, 99) < 20
    _r, at_record, _s = replay_load(demand, load, 0.3)   # the record's limit builds it again
    assert percentile([at_record[i] / MS for i in range(30, 80)], 99) > 100
