"""The HPA's rule (``client.analysis.hpa``) on cases whose answers are computed by hand, as
kubernetes/kubernetes' ``replica_calculator_test.go`` and ``horizontal.go`` give them: the
ratio and its tolerance, unready and missing pods, the stabilization window, the scale-up
limit, ``min`` and ``max``, the behavior's policies; and its run over a recorded demand."""

from __future__ import annotations

import pytest

from client.analysis.hpa import (PENDING, UNREADY, Behavior, Controller, HpaError, HpaRule,
                                 Policy, PodMetric, ScalingRules, replica_count, run_hpa)


def pods(*usage: int | None, request: int = 1000, states: dict[int, str] | None = None
         ) -> list[PodMetric]:
    return [PodMetric(f"p{i}", request, u, (states or {}).get(i, "ready"))
            for i, u in enumerate(usage)]


# ---- the replica count (replica_calculator.go) -------------------------------------------------

def test_scale_up_is_the_ceiling_of_the_ratio_times_the_ready_pods() -> None:
    # 1500m of 3000m: 50 %; against 30 %: 1.667 x 3 pods -> 5
    assert replica_count(3, pods(300, 500, 700), 30) == (5, 50)


def test_scale_down() -> None:
    # 1400m of 5000m: 28 %; against 50 %: 0.56 x 5 = 2.8 -> 3
    assert replica_count(5, pods(100, 300, 500, 250, 250), 50) == (3, 28)


def test_within_the_tolerance_the_count_stays() -> None:
    # 3060m of 3000m: 102 % (whole percent) against 100 %: 1.02, within 0.1
    assert replica_count(3, [PodMetric("a", 900, 1010), PodMetric("b", 1000, 1030),
                             PodMetric("c", 1100, 1020)], 100) == (3, 102)
    # 33/30 in float64 is 1.1000000000000001: just over the tolerance, as Go computes it
    assert replica_count(3, pods(330, 330, 330), 30) == (4, 33)
    assert replica_count(3, pods(320, 320, 320), 30) == (3, 32)     # 1.067: kept
    assert replica_count(3, pods(340, 340, 340), 30) == (4, 34)     # 1.133 x 3 = 3.4 -> 4


def test_the_utilization_is_whole_percent() -> None:
    # 1999m of 4000m is 49.975 %, read as 49 %: 49/70 = 0.7 x 4 = 2.8 -> 3
    assert replica_count(4, pods(500, 500, 500, 499), 70) == (3, 49)


def test_an_unready_pod_counts_as_zero_on_a_scale_up() -> None:
    # the ready two: 1200m of 2000m, 60 %: 2.0 > 1, so the unready one is 0 %:
    # 1200 of 3000 = 40 %, 1.333 x 3 = 4 (replica_calculator_test's "UnreadyLessScale")
    assert replica_count(3, pods(300, 500, 700, states={0: UNREADY}), 30) == (4, 60)
    # a pending pod the same
    assert replica_count(3, pods(300, 500, 700, states={0: PENDING}), 30) == (4, 60)


def test_an_unready_pod_is_left_out_on_a_scale_down() -> None:
    # the ready two: 200m of 2000m, 10 % against 50 %: 0.2 x 2 ready = 0.4 -> 1
    assert replica_count(3, pods(900, 100, 100, states={0: UNREADY}), 50) == (1, 10)


def test_missing_pods_are_their_request_on_a_scale_down_and_zero_on_a_scale_up() -> None:
    # down: 900 of 3000 = 30 % against 50 %; the missing one at 1000m: 1900 of 4000 = 47 %
    # (0.95 kept within the tolerance): 4 stay
    assert replica_count(4, pods(100, 300, 500, None), 50) == (4, 30)
    # up: 2400 of 3000 = 80 %, 1.6; the missing one at 0: 2400 of 4000 = 60 %, 1.2 x 4 -> 5
    assert replica_count(4, pods(600, 800, 1000, None), 50) == (5, 80)


def test_a_direction_the_missing_pods_turn_round_keeps_the_count() -> None:
    # 1000 of 1000 = 100 % against 95 %: up; the missing one at 0: 50 %, down: kept
    assert replica_count(2, pods(1000, None), 95) == (2, 100)


def test_no_ready_metrics_is_an_error() -> None:
    with pytest.raises(HpaError, match="did not receive metrics for any ready pods"):
        replica_count(2, pods(100, 100, states={0: UNREADY, 1: UNREADY}), 50)
    with pytest.raises(HpaError, match="no pods"):
        replica_count(1, [], 50)


# ---- the controller (horizontal.go) ------------------------------------------------------------

def asking(n: int, current: int, target: int = 50) -> list[PodMetric]:
    """``current`` pods whose usage asks for ``n`` replicas at ``target``: each at n/current
    of the target."""
    each = target * 10 * n // current   # millicores of a 1000m request
    return pods(*([each] * current))


def test_the_highest_recommendation_of_the_last_300_s_is_kept() -> None:
    ctl = Controller(HpaRule(50, 1, 10))
    assert ctl.sync(0, 4, asking(4, 4))[0] == 4
    for t in range(15, 301, 15):          # asked for 2 since 15 s: 4 is in the window
        assert ctl.sync(t, 4, asking(2, 4))[0] == 4, t
    assert ctl.sync(315, 4, asking(2, 4))[0] == 2   # 0 s is out of it now


def test_a_scale_up_is_at_most_twice_or_four() -> None:
    ctl = Controller(HpaRule(50, 1, 20))
    steps = []
    current = 1
    for t in (0, 15, 30, 45):
        current = ctl.sync(t, current, asking(12, current))[0]
        steps.append(current)
    assert steps == [4, 8, 12, 12]


def test_min_and_max_bound_it() -> None:
    ctl = Controller(HpaRule(50, 2, 3))
    assert ctl.sync(0, 2, asking(10, 2))[0] == 3
    assert Controller(HpaRule(50, 2, 3)).sync(0, 3, asking(1, 3))[0] == 2
    assert Controller(HpaRule(50, 2, 3)).sync(0, 5, asking(1, 5)) == (3, None)   # above max
    assert Controller(HpaRule(50, 2, 3)).sync(0, 1, asking(9, 1)) == (2, None)   # below min


def test_the_behaviors_policies_limit_the_rate() -> None:
    one_a_minute = Behavior(ScalingRules(0, "Max", (Policy("Pods", 1, 60),)),
                            ScalingRules(0, "Max", (Policy("Percent", 50, 60),)))
    ctl = Controller(HpaRule(50, 1, 10, behavior=one_a_minute))
    current, seen = 2, []
    for t in (0, 15, 30, 45, 60, 75):
        current = ctl.sync(t, current, asking(6, current))[0]
        seen.append(current)
    assert seen == [3, 3, 3, 3, 4, 4]   # one pod per 60 s
    down = Controller(HpaRule(50, 1, 10, behavior=one_a_minute))
    assert down.sync(0, 8, asking(1, 8))[0] == 4      # at most 50 % of 8 per 60 s
    assert down.sync(15, 4, asking(1, 4))[0] == 4     # 4 gone within 60 s: no more
    disabled = Behavior(ScalingRules(0, "Disabled"), ScalingRules(0, "Max",
                                                                  (Policy("Percent", 100, 15),)))
    assert Controller(HpaRule(50, 1, 10, behavior=disabled)).sync(0, 2, asking(6, 2))[0] == 2


def test_the_default_behavior_keeps_300_s_down_and_doubles_or_adds_four_up() -> None:
    ctl = Controller(HpaRule(50, 1, 20, behavior=Behavior()))
    assert ctl.sync(0, 1, asking(12, 1))[0] == 5          # max(1 + 4, 2 x 1)
    assert ctl.sync(15, 5, asking(12, 5))[0] == 10        # max(5 + 4, 2 x 5), 15 s later
    # asked for 2 while 12 is in the 300 s window: the count is held where it is
    assert ctl.sync(30, 10, asking(2, 10))[0] == 10
    assert ctl.sync(330, 10, asking(2, 10))[0] == 2      # 0 s and 15 s have left it


# ---- the run over a demand ---------------------------------------------------------------------

def rows(*parts: tuple[float, float, float]) -> list[tuple[float, float, float]]:
    """Rows of 1 s: (start, end, CPUs) for each second of each part (from, to, CPUs)."""
    return [(float(s), float(s + 1), cpus) for lo, hi, cpus in parts
            for s in range(int(lo), int(hi))]


def test_a_steady_load_settles_on_demand_over_target() -> None:
    """0.3 CPU, request 0.1, target 50 %: 0.3 / 0.05 = 6 replicas. By hand: at 0 s one pod
    at 300 % asks for 6, the scale-up limit gives 4; at 15 s the three new ones are not ready
    (0 % on a scale-up): 300 of 400 = 75 %, 1.5 x 4 -> 6; from 30 s the new ones have no
    metric window yet, or share the load: 6 stay."""
    run = run_hpa(HpaRule(50, 1, 10), rows((0, 180, 0.3)), 180.0, 1.0, 0.1,
                  ready_after_s=30.0)
    assert [n for _t, n, _r, _u in run.syncs] == [4, 6] + [6] * 10
    assert [u for *_x, u in run.syncs][:4] == [300, 300, 300, 75]
    assert [m["replicas"] for m in run.per_minute()] == [6, 6, 6]
    assert run.per_minute()[0]["ready_at_end"] == 6
    assert run.ready_at(29.0) == 1 and run.ready_at(30.0) == 4 and run.ready_at(45.0) == 6


def test_a_drop_scales_down_once_the_window_has_passed() -> None:
    """0.3 CPU then 0.1 from 120 s: at 135 s each of 6 reads 17m (16.67 rounded up): 102 of
    600 = 17 %, 0.34 x 6 = 2.04 -> 3; the 6 asked for until 120 s hold it to 420 s; at 435 s
    it is 3."""
    run = run_hpa(HpaRule(50, 1, 10), rows((0, 120, 0.3), (120, 600, 0.1)), 600.0, 1.0, 0.1)
    by_time = {t: n for t, n, _r, _u in run.syncs}
    assert by_time[420.0] == 6 and by_time[435.0] == 3 and by_time[585.0] == 3
    assert run.replicas[-1].removed_s == 435.0   # the newest went first


def test_a_limit_at_the_request_hides_the_load_from_the_hpa() -> None:
    """Usage is at most the limit: at 0.1 CPU (the request) a pod reads 100 %, never above
    a 100 % target's tolerance, whatever it wanted."""
    run = run_hpa(HpaRule(100, 1, 10), rows((0, 120, 0.5)), 120.0, 0.1, 0.1)
    assert {n for _t, n, _r, _u in run.syncs} == {1}


def test_bad_rules_are_one_line() -> None:
    with pytest.raises(HpaError, match="1 <= min <= max"):
        run_hpa(HpaRule(50, 3, 2), rows((0, 60, 0.1)), 60.0, 1.0, 0.1)
    with pytest.raises(HpaError, match="target must be >= 1"):
        run_hpa(HpaRule(0, 1, 2), rows((0, 60, 0.1)), 60.0, 1.0, 0.1)
    with pytest.raises(HpaError, match="CPU request"):
        run_hpa(HpaRule(50, 1, 2), rows((0, 60, 0.1)), 60.0, 1.0, 0.0)
