"""Several pods' timelines, each read at instants of its own (their nodes' agents), summed into
one (client.run.timeline_sum): at each instant each pod's last row at or before it, so the sum's
change over any window equals the pods' own changes added up, nothing counted twice."""

from __future__ import annotations

import itertools
import random
from bisect import bisect_right

from client.data.timeline import CgroupSample
from client.run.timeline_sum import sum_timelines, whole_past

MS = 1_000_000


def pod_rows(start_ms: int, step_ms: int, count: int, seed: int,
             quota_us: int | None = 10_000) -> list[CgroupSample]:
    """A pod's cumulative counters every ``step_ms`` from ``start_ms``, moving by random steps
    (some rows unchanged: an idle pod), with one more quota level and its quota."""
    rng = random.Random(seed)
    usage = periods = throttled = throttled_ns = 0
    rows = []
    for k in range(count):
        busy = rng.random() < 0.6
        usage += rng.randrange(0, 50 * MS) if busy else 0
        periods += rng.randrange(1, 6) if busy else 0
        throttled += rng.randrange(0, 4) if busy else 0
        throttled_ns += rng.randrange(0, 30 * MS) if busy else 0
        rows.append(CgroupSample((start_ms + k * step_ms) * MS, usage, periods, throttled,
                                 throttled_ns, levels=((periods, 0, 0),),
                                 quotas=((quota_us, 100_000), (None, 100_000))))
    return rows


def at(rows: list[CgroupSample], t_ns: int) -> CgroupSample:
    """The pod's last row at or before ``t_ns``."""
    return rows[bisect_right([r.t_ns for r in rows], t_ns) - 1]


def counters(s: CgroupSample) -> tuple[int, int, int, int]:
    return s.usage_ns, s.nr_periods, s.nr_throttled, s.throttled_ns


PODS = [pod_rows(0, 500, 30, 1), pod_rows(130, 500, 30, 2), pod_rows(410, 250, 61, 3)]


def test_the_sums_change_over_any_window_is_the_pods_changes_added_up() -> None:
    summed = sum_timelines(PODS)
    for a, b in itertools.combinations(summed, 2):
        expected = [sum(counters(at(pod, b.t_ns))[i] - counters(at(pod, a.t_ns))[i]
                        for pod in PODS) for i in range(4)]
        got = [y - x for x, y in zip(counters(a), counters(b))]
        assert got == expected, (a.t_ns, b.t_ns)


def test_the_sum_begins_once_every_pod_has_a_row_and_has_each_instant_once() -> None:
    summed = sum_timelines(PODS)
    begin = max(pod[0].t_ns for pod in PODS)
    instants = sorted({r.t_ns for pod in PODS for r in pod if r.t_ns >= begin})
    assert [s.t_ns for s in summed] == instants
    assert summed[0].t_ns == 410 * MS


def test_the_sums_last_row_counts_every_pods_last_row_once() -> None:
    last = sum_timelines(PODS)[-1]
    first = sum_timelines(PODS)[0]
    assert counters(last) == tuple(sum(counters(pod[-1])[i] for pod in PODS) for i in range(4))
    assert counters(first) == tuple(sum(counters(at(pod, first.t_ns))[i] for pod in PODS)
                                    for i in range(4))


def test_past_a_runs_end_the_sum_is_read_once_every_pod_has_a_row_past_it() -> None:
    """Each pod cut at its first row past the run's end (as the agents' timelines are): the
    sum's first row at or after the end counts every pod up to that row, not a pod's row
    from before the end."""
    a, b = pod_rows(0, 100, 12, 8), pod_rows(30, 100, 12, 9)   # rows at 0, 100, ... / 30, 130, ...
    end = 1_050 * MS                                           # a's row past it: 1100; b's: 1130
    cut = [rows[:next(k for k, r in enumerate(rows) if r.t_ns >= end) + 1] for rows in (a, b)]
    summed = whole_past(sum_timelines(cut), end)
    after = min((s for s in summed if s.t_ns >= end), key=lambda s: s.t_ns)
    assert after.t_ns == 1_130 * MS
    assert counters(after) == tuple(x + y for x, y in zip(counters(cut[0][-1]),
                                                          counters(cut[1][-1])))
    assert [s.t_ns for s in summed if s.t_ns <= end] == [
        s.t_ns for s in sum_timelines(cut) if s.t_ns <= end]   # before the end: as summed
    assert whole_past([], end) == []


def test_two_pods_read_at_the_same_instants_add_row_by_row() -> None:
    a, b = pod_rows(0, 500, 10, 4), pod_rows(0, 500, 10, 5)
    summed = sum_timelines([a, b])
    assert len(summed) == 10
    assert [counters(s) for s in summed] == [
        tuple(x + y for x, y in zip(counters(p), counters(q))) for p, q in zip(a, b)]


def test_levels_and_quotas_are_summed_and_pressure_left_out() -> None:
    summed = sum_timelines(PODS)
    s = summed[-1]
    assert s.levels == ((sum(pod[-1].levels[0][0] for pod in PODS), 0, 0),)
    assert s.quotas == ((30_000, 100_000), (None, 100_000))   # three pods at 10 ms a period
    assert s.pressure_some_ns is None and s.pressure_full_ns is None


def test_a_pod_without_a_quota_makes_the_summed_quota_none() -> None:
    (s, *_) = sum_timelines([pod_rows(0, 500, 3, 6), pod_rows(0, 500, 3, 7, quota_us=None)])
    assert s.quotas[0] == (None, 100_000)


def test_a_pod_with_no_row_leaves_no_sum() -> None:
    assert sum_timelines([PODS[0], []]) == []
    assert sum_timelines([]) == []
