"""Each limit's replay of one demand (``client.analysis.replay.Replayer``; ``cluster`` and
``advise --passive`` replay every limit of their searches on every pod's window) gives the
same figures as before (tests/replay_before.py, each limit stepped through the quota's
account): a limit whose quota no period can spend counted in closed form, any other with
the account's bookkeeping in local variables. On random timelines (idle, steady, bursty,
throttled, bunched, two CPUs), the node agent's recorded windows in tests/data, an idle
pause pod's 1 s rows, a pod throttled throughout, at limits around and at exactly the bound
the closed form takes, other periods, a burst; and the searches' answers, ranges and
replays with the old replay in their place."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from client.advise import cluster as cluster_advice
from client.advise.cluster import advise_pods, row_of
from client.analysis import replay as replay_module
from client.analysis.cluster import PodWindow, WorkloadLimits, pod_window
from client.analysis.goal import LatencyGoal
from client.analysis.replay import (Demand, Replayed, Replayer, ReplayError, _stepped,
                                    _most_charged, _periods_charged, _stepped_plain, bunched,
                                    demand_of)
from client.data.timeline import CgroupSample
from client.run.replay_input import read_recording
from tests.replay_before import replay_before
from tests.test_replay_steady_periods import PERIOD_NS, timeline

DATA = Path(__file__).parent / "data"
LIMITS = (0.002, 0.01, 0.05, 0.12, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0)


def demands(rows: list[CgroupSample], period_ns: int = PERIOD_NS) -> list[Demand]:
    demand = demand_of(rows, period_ns)
    out = [demand, dataclasses.replace(demand, cores=demand.cores + 1)]
    return out + [bunched(d) for d in out] if demand.coarse else out


def around_the_bound(demand: Demand, period_ns: int = PERIOD_NS) -> list[float]:
    """Limits at, just under and just over the quota above which the closed form is taken."""
    most = _most_charged(demand, period_ns, demand.origin_ns)
    if most is None:
        return []
    return [q / period_ns for q in (most - 1, most, most + 1, most * 1.01, most * 0.99)
            if q > 0]


def idle_pod(seconds: int = 120, step_ns: int = 1_000_000_000) -> list[CgroupSample]:
    """A pause pod's 1 s rows (or the node agent's 100 ms): a few µs of CPU a second, never
    throttled."""
    rng, usage, out = random.Random(3), 0, []
    for i in range(seconds * 1_000_000_000 // step_ns + 1):
        out.append(CgroupSample(i * step_ns + (rng.randrange(-9, 10) * step_ns // 1000 if i
                                               else 0), usage, i * step_ns // PERIOD_NS, 0, 0))
        usage += rng.randrange(2_000, 20_000) * step_ns // 1_000_000_000
    return out


def throttled_pod(seconds: int = 60, share: float = 0.8) -> list[CgroupSample]:
    """100 ms rows of a pod held by a 0.5 CPU limit in ``share`` of its periods."""
    rng, out = random.Random(7), []
    usage = periods = nr = held = 0
    for i in range(seconds * 10 + 1):
        out.append(CgroupSample(i * PERIOD_NS + (rng.randrange(-900_000, 900_000) if i else 0),
                                usage, periods, nr, held))
        usage += rng.randrange(40_000_000, 50_000_001)
        periods += 1
        if rng.random() < share:
            nr, held = nr + 1, held + rng.randrange(5_000_000, 60_000_000)
    return out


def recorded_windows() -> list[list[CgroupSample]]:
    out = []
    for path in sorted(DATA.rglob("*.cgroup.csv")):
        samples = read_recording(path).samples
        try:
            demand_of(samples, PERIOD_NS)
        except ReplayError:
            continue
        out.append(samples)
    return out


def same(demand: Demand, limits: list[float], burst_ns: int = 0,
         period_ns: int | None = None) -> list[Replayed]:
    at = Replayer(demand, burst_ns, period_ns)
    new = [at(cpus) for cpus in limits]
    old = [replay_before(demand, cpus, burst_ns, period_ns) for cpus in limits]
    assert new == old
    return new


@pytest.mark.parametrize("seed", range(80))
def test_random_timelines_replay_as_before(seed: int) -> None:
    got = []
    for demand in demands(timeline(seed)):
        got += same(demand, [*LIMITS, *around_the_bound(demand)])
    assert any(r.stretches for r in got) or all(r.stats.nr_throttled == 0 for r in got)


@pytest.mark.parametrize("seed", range(20))
def test_other_periods_and_a_burst_replay_as_before(seed: int) -> None:
    demand = demand_of(timeline(seed), PERIOD_NS)
    for period in (20_000_000, 50_000_000, 250_000_000):
        same(demand, [*LIMITS, *around_the_bound(demand, period)], 0, period)
    same(demand, list(LIMITS), 5_000_000)


def test_the_recorded_windows_replay_as_before() -> None:
    windows = recorded_windows()
    assert len(windows) >= 5
    for rows in windows:
        for demand in demands(rows):
            same(demand, [*LIMITS, *around_the_bound(demand)])


def test_an_idle_pause_pods_limits_are_counted_in_closed_form() -> None:
    demand = demand_of(idle_pod(), PERIOD_NS)
    for d in (demand, bunched(demand)):
        most = _most_charged(d, PERIOD_NS, d.origin_ns)
        assert most is not None and most < 0.001 * PERIOD_NS   # 1 m would do
        periods = _periods_charged(d, PERIOD_NS, d.origin_ns)
        got = same(d, [0.008, 0.01, 0.021, 0.053, 0.131, 0.256, 0.4, 0.5, 2.0])
        assert all(r.stretches == () and r.stats.nr_throttled == 0 for r in got)
        assert {r.stats.nr_periods for r in got} == {periods}
        # 120 s of 100 ms periods, each charged; bunched, the timer stops between rows
        assert periods >= 1000 if d is demand else 200 <= periods < 1000


def test_a_pod_throttled_throughout_replays_as_before() -> None:
    for share in (0.8, 1.0):
        for demand in demands(throttled_pod(share=share)):
            got = same(demand, [0.3, 0.45, 0.469, 0.5, 0.559, 0.591, 0.625, 0.7, 0.739,
                                0.781, 0.977, 1.0, *around_the_bound(demand)])
            assert got[0].stats.nr_throttled > 0


def test_a_limit_at_exactly_the_peak_is_stepped() -> None:
    """Steady rows wanting exactly the quota: at it the runtime runs out at each period's
    end, and the closed form is not taken (its bound lies above the quota)."""
    rows = [CgroupSample(i * PERIOD_NS, i * 25_000_000, i, 0, 0) for i in range(31)]
    demand = demand_of(rows, PERIOD_NS)
    most = _most_charged(demand, PERIOD_NS, demand.origin_ns)
    assert most is not None and most > 25_000_000
    same(demand, [0.24, 0.25, 0.2500001, 0.26, 0.3, (most + 1) / PERIOD_NS])


def test_a_row_of_no_time_or_more_than_the_cores_is_never_closed_form() -> None:
    rows = [CgroupSample(i * PERIOD_NS, i * 1_000_000, i, 0, 0) for i in range(21)]
    rows.insert(10, CgroupSample(10 * PERIOD_NS, 10 * 1_000_000 - 500_000, 10, 0, 0))
    demand = demand_of(rows, PERIOD_NS)
    assert _most_charged(demand, PERIOD_NS, demand.origin_ns) is None
    same(demand, list(LIMITS))
    busy = [CgroupSample(i * PERIOD_NS, i * 150_000_000, i, 0, 0) for i in range(21)]
    over = dataclasses.replace(demand_of(busy, PERIOD_NS), cores=1)   # 1.5 CPU wanted on 1
    assert _most_charged(over, PERIOD_NS, over.origin_ns) is None
    same(over, list(LIMITS))


@pytest.mark.parametrize("seed", range(30))
def test_the_bookkeeping_in_locals_steps_as_the_account(seed: int) -> None:
    for demand in demands(timeline(seed)):
        for cpus in LIMITS:
            assert _stepped_plain(demand, cpus, PERIOD_NS) == _stepped(demand, cpus, 0,
                                                                      PERIOD_NS)


def windows_of(rows: list[list[CgroupSample]]) -> list[PodWindow]:
    return [pod_window(f"p{i}", r, PERIOD_NS, [0.5], None) for i, r in enumerate(rows)]


def old_replayer(monkeypatch: pytest.MonkeyPatch) -> None:
    class Before:
        def __init__(self, demand: Demand, burst_ns: int = 0,
                     period_ns: int | None = None) -> None:
            self.demand, self.burst_ns, self.period_ns = demand, burst_ns, period_ns

        def __call__(self, cpus: float | None,
                     stop: tuple[float, float] | None = None) -> Replayed:
            return replay_before(self.demand, cpus, self.burst_ns, self.period_ns)   # whole

        def never_throttled(self, cpus: float) -> bool:
            return False   # every search run
    monkeypatch.setattr(cluster_advice, "Replayer", Before)
    monkeypatch.setattr(replay_module, "Replayer", Before)


@pytest.mark.parametrize("pods", [
    [idle_pod()], [idle_pod(60, PERIOD_NS)], [idle_pod(30), idle_pod(30, PERIOD_NS)],
    [throttled_pod()], [throttled_pod(30, 1.0)],
    [idle_pod(60), throttled_pod(60)], [timeline(4), timeline(9)]])
@pytest.mark.parametrize("delay_ms", [0.2, 2.0, 10.0, 50.0])
def test_the_search_answers_as_with_the_old_replay(
        pods: list[list[CgroupSample]], delay_ms: float,
        monkeypatch: pytest.MonkeyPatch) -> None:
    windows = windows_of(pods)
    target = LatencyGoal(delay_ms, None, None)
    limits = WorkloadLimits("ns/Deployment/w", 0.5, 0.25, len(pods))
    new_advice, new_row = advise_pods(windows, 0.5, target), row_of(limits, windows, target)
    with monkeypatch.context() as m:
        old_replayer(m)
        old_advice, old_row = advise_pods(windows, 0.5, target), row_of(limits, windows, target)
    assert new_advice == old_advice   # every limit tried, its replay, the range
    assert new_row == old_row


def test_rows_going_back_in_time_replay_as_before() -> None:
    """Rows whose time goes back (a clock stepped back between two reads): the account's
    time does not, and the replay's next boundary is worked out again."""
    rows = [CgroupSample(i * 250_000_000 + 7_000_000, i * 75_000_000, i * 2, 0, 0)
            for i in range(40)]
    rows[20:] = [CgroupSample(r.t_ns - 1_130_000_000, r.usage_ns, r.nr_periods, 0, 0)
                 for r in rows[20:]]
    demand = demand_of(rows, PERIOD_NS)
    assert any(e < s for s, e in zip(demand.starts_ns, demand.starts_ns[1:]))
    assert _most_charged(demand, PERIOD_NS, demand.origin_ns) is None
    got = same(demand, [0.1, 0.2, 0.29, 0.3, 0.31, 0.5, 1.0, 2.0])
    assert any(r.stretches for r in got)


@pytest.mark.parametrize("pods", [[throttled_pod()], [throttled_pod(30, 1.0), idle_pod(30)],
                                  [timeline(4), timeline(9), throttled_pod(20)]])
@pytest.mark.parametrize("delay_ms", [2.0, 10.0, 50.0])
def test_a_verdict_only_replay_misses_and_meets_as_the_whole(
        pods: list[list[CgroupSample]], delay_ms: float) -> None:
    """The bounds' searches keep only their answer: a limit's replays end once its p99 must
    miss; each limit then misses or meets as the whole replay does, and a met one is whole."""
    from client.advise.cluster import _pooled
    from client.analysis.passive import judge

    windows = windows_of(pods)
    target = LatencyGoal(delay_ms, None, None)
    whole, verdict = _pooled(windows), _pooled(windows, target)
    cut = 0
    for millicores in (50, 100, 200, 300, 400, 450, 500, 550, 600, 700, 800, 1000, 2000):
        full, short = whole(millicores), verdict(millicores)
        assert judge(millicores, short, target).met == judge(millicores, full, target).met
        if judge(millicores, full, target).met:
            assert short == full
        cut += len(short.replayed.stretches) < len(full.replayed.stretches)
    assert cut > 0 or delay_ms == 50.0


def test_where_no_limit_meets_the_reason_is_the_whole_replays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A search whose ceiling is under what the pod needs: no limit meets, and the reason
    names the highest limit's p99, from its whole replay (the search runs again whole)."""
    windows = windows_of([throttled_pod()])
    target = LatencyGoal(10.0, None, None)
    monkeypatch.setattr(cluster_advice, "search_span", lambda limit, pods: (300, 10, 300))
    short, whole = (advise_pods(windows, 0.5, target, whole=False),
                    advise_pods(windows, 0.5, target))
    assert short.at is None and short.reason is not None and "p99" in short.reason
    assert short == whole


@pytest.mark.parametrize("seed", range(10))
def test_the_demand_from_the_callers_throttles_is_the_same(seed: int) -> None:
    """``pod_window`` works out the timeline's throttles once, for the demand and for the
    record's own stretches: the same demand as demand_of finding them itself."""
    from client.data.attribution import throttle_events

    for rows in (timeline(seed), throttled_pod(20, 0.5 + seed / 20)):
        events = throttle_events(rows, PERIOD_NS)
        assert demand_of(rows, PERIOD_NS, events=events) == demand_of(rows, PERIOD_NS)
