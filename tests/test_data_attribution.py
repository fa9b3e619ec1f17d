"""client.data.attribution on synthetic timelines: where the period boundaries are, and which
throttle each request overlapped."""

from __future__ import annotations


from hypothesis import given, settings
from hypothesis import strategies as st

from client.data.attribution import (ThrottleEvent, attribute, attribute_levels, held,
                                    period_phase, throttle_events, throttled_stretches)
from tests.timelines import MS, P, TWO_THROTTLES, S

def test_period_phase_from_the_intervals_where_nr_periods_grew() -> None:
    # (92, 104] and (198, 202]: boundaries are in both; mod 100 ms they agree on (98, 102)
    assert period_phase(TWO_THROTTLES, P) == 100 * MS % P == 0
    regular = [S(t, periods=(t + 63) // 100) for t in range(0, 1000, 10)]   # boundary at 37
    assert period_phase(regular, P) == 35 * MS                              # middle of (30, 40)
    narrow = [S(0), S(30), S(40, periods=1), S(133, periods=1), S(138, periods=2),
              S(236, periods=2), S(241, periods=3)]
    assert period_phase(narrow, P) == 37 * MS                               # (36, 38)
    assert period_phase([S(0), S(10)], P) is None                           # nothing grew
    assert period_phase(TWO_THROTTLES, 0) is None


def test_period_phase_across_the_wrap_and_without_agreement() -> None:
    wrapped = [S(0), S(95), S(103, periods=1), S(197, periods=1), S(201, periods=2)]
    assert period_phase(wrapped, P) == 99 * MS          # (97, 101) wraps over 0
    split = [S(0), S(10), S(20, periods=1), S(112, periods=1), S(118, periods=2),
             S(250, periods=2), S(260, periods=3)]
    assert period_phase(split, P) == 15 * MS   # 2 of 3 agree on (12, 18); (50, 60) is outvoted
    three_ways = [S(0), S(10), S(20, periods=1), S(110, periods=1), S(140, periods=1),
                  S(150, periods=2), S(260, periods=2), S(270, periods=3),
                  S(380, periods=3), S(390, periods=4)]
    assert period_phase(three_ways, P) is None          # four phases, one vote each


def test_throttles_end_on_the_boundary_and_lie_back_from_it() -> None:
    events = throttle_events(TWO_THROTTLES, P)
    assert events == [ThrottleEvent(20 * MS, 100 * MS, 80 * MS, 1),
                      ThrottleEvent(120 * MS, 200 * MS, 80 * MS, 1)]
    # without the period: the middle of the sample interval (98 ms, 200 ms); the first
    # throttle still starts at 20 ms, where the usage stood still (not 80 ms before 98)
    assert throttle_events(TWO_THROTTLES) == [ThrottleEvent(20 * MS, 98 * MS, 80 * MS, 1),
                                              ThrottleEvent(120 * MS, 200 * MS, 80 * MS, 1)]
    assert throttled_stretches(TWO_THROTTLES, P) == [(20 * MS, 100 * MS), (120 * MS, 200 * MS)]
    assert throttle_events([]) == [] and throttle_events([S(0)]) == []


def test_a_throttle_starts_where_the_usage_stood_still() -> None:
    """Two CPUs throttled 70 ms each: 140 ms counted at the boundary, laid back it would cover
    the whole period; the group ran until 30 ms (its usage says), so that is where it
    starts."""
    samples = [S(0), S(10, 10), S(20, 20), S(30, 30), S(40, 30), S(60, 30), S(99, 30),
               S(101, 32, 1, 1, 140), S(120, 50, 1, 1, 140)]
    assert throttle_events(samples, P) == [ThrottleEvent(30 * MS, 100 * MS, 140 * MS, 1)]
    # a request that ended before the group stopped was not delayed by it
    assert attribute([(0, 25 * MS), (25 * MS, 50 * MS)], samples, period_ns=P) == \
        [(0, 0), (round(140 * MS * 20 / 70), 1)]


def test_a_throttle_over_several_periods_and_on_two_cpus() -> None:
    # nr_throttled grows at 100 ms with no time yet (still throttled), time comes at 200 ms
    long = [S(0), S(95), S(105, 0, 1, 1), S(195, 0, 1, 1), S(205, 5, 2, 2, 180),
            S(295, 25, 2, 2, 180), S(305, 30, 3, 2, 180)]
    assert throttle_events(long, P) == [ThrottleEvent(20 * MS, 200 * MS, 180 * MS, 2)]
    # two CPUs throttled 80 ms each end at one boundary: 160 ms counted, but the stretch
    # cannot start before the previous throttle ended (at the timeline's start here)
    two_cpus = [S(0), S(95), S(105, 40, 1, 1, 160)]
    assert throttle_events(two_cpus, P) == [ThrottleEvent(0, 100 * MS, 160 * MS, 1)]
    # still throttled when the timeline ends: the periods count, the time is not known yet
    unfinished = [S(0), S(95), S(105, 0, 1, 1), S(150, 0, 1, 1)]
    assert throttle_events(unfinished, P) == [ThrottleEvent(95 * MS, 150 * MS, 0, 1)]


def test_attribute_each_request_gets_the_throttling_that_overlaps_it() -> None:
    requests = [(0, 101 * MS),          # the whole first throttle
                (10 * MS, 60 * MS),     # overlaps it: half of its 80 ms (share the blame)
                (101 * MS, 110 * MS),   # after its end: nothing
                (int(99.5 * MS), 120 * MS),  # 0.5 ms overlap: the estimate's noise
                (110 * MS, 250 * MS),   # the second
                (300 * MS, 310 * MS)]   # after the timeline
    assert attribute(requests, TWO_THROTTLES, period_ns=P) == [
        (80 * MS, 1), (40 * MS, 1), (0, 0), (0, 0), (80 * MS, 1), (0, 0)]
    assert attribute(requests[3:4], TWO_THROTTLES, period_ns=P, min_overlap_ns=0) == \
        [(MS // 2, 1)]
    assert attribute([], TWO_THROTTLES) == [] and attribute(requests[:1], []) == [(0, 0)]


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 30), st.integers(0, 3), st.integers(0, 90)),
                      min_size=2, max_size=40),
       cuts=st.lists(st.integers(0, 10**6), max_size=15))
def test_requests_that_tile_the_run_share_out_exactly_what_the_group_counted(
        steps: list[tuple[int, int, int]], cuts: list[int]) -> None:
    timeline, t, periods, throttled = [S(0)], 0, 0, 0
    for dt, grew, ms in steps:
        t, periods, throttled = t + dt, periods + grew, throttled + (ms if grew else 0)
        timeline.append(S(t, 0, periods, periods, throttled))
    end = timeline[-1].t_ns
    edges = sorted({0, end, *(c * end // 10**6 for c in cuts)})
    requests = list(zip(edges, edges[1:]))
    marks = attribute(requests, timeline, period_ns=P, min_overlap_ns=0)
    total = timeline[-1].throttled_ns
    assert abs(sum(m[0] for m in marks) - total) <= len(requests)   # rounding, 1 ns each


def test_a_counted_period_without_time_ends_when_the_group_runs_again() -> None:
    # nr_throttled grew at 100 ms but no throttled time was ever added; the group ran on
    timeline = [S(0), S(95, 10), S(105, 12, 1, 1), S(115, 20, 1, 1), S(300, 60, 3, 1)]
    events = throttle_events(timeline, P)
    assert events == [ThrottleEvent(95 * MS, 105 * MS, 0, 1)]
    late = [(200 * MS, 250 * MS)]  # a request long after: not blamed
    assert attribute(late, timeline, period_ns=P) == [(0, 0)]


def test_attribute_levels_marks_each_request_by_the_level_that_throttled_it() -> None:
    # level 0 (the tightest quota) throttles 20-100 and 120-200; level 1 (a pod above, with a
    # 50 ms period) throttles once, 230-250, where level 0 does not
    level1 = [S(t, u) for t, u in ((0, 0), (10, 10), (20, 20), (50, 20), (92, 20), (104, 24),
                                   (150, 40), (198, 40), (202, 42))]
    level1 += [S(226, 50, 1, 0, 0), S(252, 60, 2, 1, 20), S(260, 62, 2, 1, 20)]
    level0 = TWO_THROTTLES[:-1] + [S(226, 50, 2, 2, 160), S(252, 60, 2, 2, 160),
                                   S(260, 62, 2, 2, 160)]
    requests = [(10, 60), (130, 190), (228, 255)]
    spans = [(a * MS, b * MS) for a, b in requests]
    marks = attribute_levels(spans, [level0, level1], [P, 50 * MS])
    assert [m[2] for m in marks] == [0, 0, 1]
    assert marks[2][1] == 1 and 0 < marks[2][0] <= 20 * MS and marks[0][0] > 0
    assert attribute_levels(spans, [level0], [P]) == [(*m, 0) for m in attribute(spans, level0,
                                                                                 period_ns=P)]


def test_held_is_the_wall_overlap_with_the_throttled_stretches() -> None:
    requests = [(0, 101 * MS),          # the whole first stretch, 20-100
                (10 * MS, 60 * MS),     # 20-60 of it
                (101 * MS, 110 * MS),   # between the stretches: not held
                (int(99.5 * MS), 120 * MS),  # 0.5 ms overlap: the estimate's noise
                (50 * MS, 250 * MS),    # 50-100 and 120-200
                (300 * MS, 310 * MS)]   # after the timeline
    assert held(requests, [TWO_THROTTLES], [P]) == [
        80 * MS, 40 * MS, 0, 0, 130 * MS, 0]
    assert held([], [TWO_THROTTLES], [P]) == [] and held(requests[:1], [[]], [P]) == [0]


def test_held_on_two_cpus_is_wall_time_where_the_throttled_time_is_summed() -> None:
    """Two CPUs throttled 70 ms each, 30-100 ms: cpu.stat counts 140 ms, the request of 60 ms
    inside it was held 60 ms, not more."""
    samples = [S(0), S(10, 20), S(20, 40), S(30, 60), S(40, 60), S(60, 60), S(99, 60),
               S(101, 64, 1, 1, 140), S(120, 100, 1, 1, 140)]
    request = [(35 * MS, 95 * MS)]
    assert attribute(request, samples, period_ns=P)[0][0] == 120 * MS   # CPU-summed share
    assert held(request, [samples], [P]) == [60 * MS]                    # wall


def test_a_throttle_is_no_longer_than_its_periods() -> None:
    # 4 CPUs throttled 90 ms each, counted at one boundary (360 ms): one period of wall time
    samples = [S(0), S(95), S(105, 0, 1, 1, 360)]
    assert throttle_events(samples, P) == [ThrottleEvent(0, 100 * MS, 360 * MS, 1)]
    late = [S(t) for t in range(0, 300, 10)] + [S(305, 0, 3, 1, 360)]
    assert throttle_events(late, P)[0].end_ns - throttle_events(late, P)[0].start_ns == P


def test_held_with_two_levels_counts_their_overlap_once() -> None:
    level1 = [S(0), S(95), S(105, 0, 1, 1, 50)]           # 50-100 on the pod's quota
    spans = [(0, 110 * MS)]
    assert held(spans, [TWO_THROTTLES, level1], [P, P]) == [80 * MS]   # 20-100 covers 50-100


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 30), st.integers(0, 3), st.integers(0, 400)),
                      min_size=2, max_size=40),
       spans=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), max_size=15))
def test_no_request_is_held_longer_than_its_latency(
        steps: list[tuple[int, int, int]], spans: list[tuple[int, int]]) -> None:
    timeline, t, periods, throttled = [S(0)], 0, 0, 0
    for dt, grew, ms in steps:   # up to 400 ms counted a period: several CPUs throttled
        t, periods, throttled = t + dt, periods + grew, throttled + ms
        timeline.append(S(t, 0, periods, periods, throttled))
    end = timeline[-1].t_ns
    requests = [(min(a, b) * end // 10**6, max(a, b) * end // 10**6) for a, b in spans]
    for (start, stop), wall in zip(requests, held(requests, [timeline], [P])):
        assert 0 <= wall <= stop - start
