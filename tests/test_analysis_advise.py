"""``advise``'s pure decisions: the target, the model's guess, the search over limits, the usage
rules and the answer (exact: no runs, no clocks)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pytest

from client.analysis.advise import (MAIN_ROLES, Advice, UsageResult, alternative_guesses,
                                    bracket, conclude, docker_flags, floor_millicores,
                                    kubernetes_cpu, needs_repeat, next_millicores, shape,
                                    to_confirm, to_recheck, unmet_reason, verdicts)
from client.analysis.advise_model import (USAGE_RULES, Profile, cpu_each, cpu_per_request,
                                          model_curve, model_guess, model_point, peak_to_mean,
                                          per_second_usage, profile_plan, usage_limits)
from client.analysis.advise_target import LatencyTarget, Measured, pooled
from client.data.metadata import LoadMode
from client.run.plan import LoadPlan
from client.run.usage import UsageSample
from cpuquota.limit import Limit

FREE = Measured("free", "profile", None, 100, 0, 5.0, 5.0, 5.0, 0.0, None)


def profile(**changes: object) -> Profile:
    values: dict[str, object] = dict(
        run=FREE, mode=LoadMode.SEQUENTIAL, concurrency=1, rate_rps=None, requests=100,
        cpu_ms=5.0, cpu_source="test", burn_cpu_ms=5.0, baseline_ms=5.0, cores=1)
    values.update(changes)
    return Profile(**values)  # type: ignore[arg-type]


def row(millicores: int, p99: float, target: LatencyTarget, *, role: str = "search",
        name: str = "", p90: float | None = None, throttled: float = 0.1) -> Measured:
    p90 = p99 / 2 if p90 is None else p90
    return Measured(name or f"r{millicores}", role, shape(100)(millicores), 100, 0, 4.0, p90,
                    p99, throttled, target.misses(p90, p99, throttled),
                    target.narrow(p90, p99, throttled))


# -- the target ---------------------------------------------------------------------------

def test_a_target_says_what_was_missed_in_words() -> None:
    target = LatencyTarget(30, 15, 0.05)
    assert target.misses(10, 20, 0.0) == ()
    assert target.misses(16, 31, 0.06, errors=2) == (
        "2 failed request(s)", "p99 31.0 > 30 ms", "p90 16.0 > 15 ms", "throttled 6 % > 5 %")
    assert target.misses(10, math.nan, None) == ("p99 nan > 30 ms",)  # no answer misses
    assert target.describe() == "p99 <= 30 ms, p90 <= 15 ms, throttled <= 5 %"


@pytest.mark.parametrize(("target", "message"), [
    (LatencyTarget(0), "--p99 must be a number of ms > 0 (got 0)"),
    (LatencyTarget(math.inf), "--p99 must be a number of ms > 0 (got inf)"),
    (LatencyTarget(30, -1), "--p90 must be a number of ms > 0 (got -1)"),
    (LatencyTarget(30, 40), "--p90 40 ms is above --p99 30 ms"),
    (LatencyTarget(30, None, 1.5), "--max-throttled must be a percentage in [0, 100] (got 150)"),
])
def test_nonsense_targets_are_refused_in_one_line(target: LatencyTarget, message: str) -> None:
    problem = target.problem()
    assert problem is not None and problem.startswith(message) and "\n" not in problem


def test_a_verdict_is_narrow_when_it_could_flip_either_way() -> None:
    target = LatencyTarget(30)
    assert target.narrow(0, 34.0, None)           # missed by 13 %
    assert not target.narrow(0, 35.0, None)       # by 17 %: a clear miss
    assert target.narrow(0, 27.0, None)           # met with less than 15 % to spare
    assert not target.narrow(0, 25.0, None)       # met with room
    assert not target.narrow(0, 31.0, None, errors=1)  # failed requests are never noise
    throttled = LatencyTarget(30, None, 0.10)
    assert throttled.narrow(0, 10.0, 0.14) and not throttled.narrow(0, 10.0, 0.16)


def test_two_runs_of_a_limit_are_judged_by_their_mean() -> None:
    target = LatencyTarget(30)
    first, second = row(500, 33.0, target), row(500, 25.0, target, name="r500-2")
    both = pooled([first, second], target)
    assert (first.met, second.met, both.met) == (False, True, True)
    assert both.p99_ms == 29.0 and both.runs == 2 and both.requests == 200
    assert both.name == "r500 + r500-2"
    assert pooled([first], target) is first


# -- the search -----------------------------------------------------------------------------

def search(truth: Callable[[int], bool], start: int, floor: int = 10,
           ceiling: int = 2000) -> tuple[dict[int, bool], list[int]]:
    seen: dict[int, bool] = {}
    order = []
    while (m := next_millicores(seen, start=start, floor=floor, ceiling=ceiling)) is not None:
        assert m not in seen and floor <= m <= ceiling
        order.append(m)
        seen[m] = truth(m)
        assert len(order) < 30
    return seen, order


@pytest.mark.parametrize("start", [10, 100, 480, 537, 600, 2000])
def test_the_search_brackets_the_answer_within_ten_percent(start: int) -> None:
    seen, order = search(lambda m: m >= 537, start)
    low, high = bracket(seen)
    assert order[0] == start
    assert high is not None and low is not None
    assert low < 537 <= high and high <= low * 1.10
    assert len(order) <= 12


def test_a_close_guess_needs_few_runs() -> None:
    _, order = search(lambda m: m >= 537, 540)
    assert order == [540, 432, 483, 511]          # down by 1.25, then geometric middles


def test_the_ceiling_missing_or_the_floor_meeting_ends_the_search() -> None:
    seen, order = search(lambda m: False, 500)
    assert order[-1] == 2000 and bracket(seen) == (2000, None)
    seen, order = search(lambda m: True, 500)
    assert order[-1] == 10 and bracket(seen) == (None, 10)


def test_a_limit_that_met_below_a_miss_does_not_count() -> None:
    # noise: 0.4 met, 0.45 missed, 0.5 met: the answer must hold for every limit above it
    assert bracket({400: True, 450: False, 500: True}) == (450, 500)
    assert next_millicores({400: True, 450: False, 600: True}, start=400, floor=10,
                           ceiling=2000) == 520


def test_verdicts_conclude_and_repeat_pool_the_runs_of_each_limit() -> None:
    target = LatencyTarget(30)
    runs = [row(700, 20.0, target), row(560, 45.0, target), row(630, 33.0, target),
            row(630, 26.0, target, name="r630-2"), row(600, 34.5, target)]
    assert verdicts(runs, target) == {700: True, 560: False, 630: True, 600: False}
    at, below = conclude(runs, target)
    assert at is not None and at.millicores == 630 and at.p99_ms == 29.5 and at.runs == 2
    assert below is not None and below.millicores == 600
    assert needs_repeat([runs[4]]) and not needs_repeat([runs[1]])
    assert not needs_repeat(runs[2:4])            # twice is enough
    assert conclude([], target) == (None, None)


def test_floor_and_spellings() -> None:
    assert floor_millicores(100) == 10 and floor_millicores(10) == 100
    assert floor_millicores(1000) == 10 and floor_millicores(3) == 334
    assert docker_flags(Limit(0.6)) == "--cpus 0.6"
    assert docker_flags(Limit(0.29, 10)) == "--cpu-period 10000 --cpu-quota 2900"
    assert kubernetes_cpu(Limit(0.6)) == "600m" and kubernetes_cpu(Limit(1.25)) == "1250m"
    full = shape(100, full_burst=True)(300)
    assert (full.cpus, full.burst_ms) == (0.3, 30.0)
    assert shape(100, 50.0)(200).burst_ms == 20.0  # a burst is at most one quota


# -- the model's guess ------------------------------------------------------------------------

@pytest.mark.parametrize(("p99", "millicores"), [(50, 550), (30, 750), (20, 850), (10, 950)])
def test_the_models_guess_for_back_to_back_requests(p99: float, millicores: int) -> None:
    # 5 ms of CPU back to back: the quota Q runs out Q ms into each 100 ms period, so a
    # request waits 100 - Q ms: p99 <= T needs 5 + 100 - Q <= T, Q >= 105 - T
    guess = model_guess(profile(), LatencyTarget(p99), shape(100), 10, 2000)
    assert guess is not None and guess.limit == Limit(millicores / 1000)
    assert guess.met and guess.p99_ms <= p99
    below = model_point(profile(), Limit((millicores - 1) / 1000), LatencyTarget(p99))
    assert not below.met                           # the smallest, to the millicore


def test_the_models_guess_is_none_when_even_the_ceiling_misses() -> None:
    assert model_guess(profile(cpu_ms=40.0, baseline_ms=40.0), LatencyTarget(30), shape(100),
                       10, 2000) is None
    floor = model_guess(profile(), LatencyTarget(5000), shape(100), 10, 2000)
    assert floor is not None and floor.limit.millicores == 10   # anything meets it


def test_an_open_loop_is_modelled_with_its_arrivals() -> None:
    rate = profile(mode=LoadMode.OPEN_LOOP, rate_rps=50.0, requests=200)
    guess = model_guess(rate, LatencyTarget(20), shape(100), 10, 2000)
    assert guess is not None and guess.limit.millicores == 250  # 50/s x 5 ms, exactly
    spread = profile(mode=LoadMode.OPEN_LOOP, rate_rps=50.0, requests=200,
                     cpu_each=(4.0, 6.0, 4.5, 5.5))
    wider = model_guess(spread, LatencyTarget(20), shape(100), 10, 2000)
    assert wider is not None and wider.limit.millicores > 250  # a spread queues up


def test_the_models_curve_spans_the_range() -> None:
    curve = model_curve(profile(), LatencyTarget(30), shape(100), 100, 1000, points=10)
    assert [p.limit.millicores for p in curve][0::9] == [100, 1000]
    assert curve[0].p99_ms > curve[-1].p99_ms and not curve[0].met and curve[-1].met


def test_alternatives_are_scaled_by_the_models_error_and_must_save_ten_percent() -> None:
    prof, target = profile(), LatencyTarget(30)
    guess = model_guess(prof, target, shape(100), 10, 2000)
    assert guess is not None
    found = alternative_guesses(prof, target, Limit(0.75), guess, lambda limit: True)
    kinds = {kind: (point, first) for kind, _, point, first in found}
    assert set(kinds) == {"period"}               # a burst saves nothing on an even load
    point, first = kinds["period"]
    assert point.limit.period_ms < 100 and point.met and first == point.limit.millicores
    scaled = alternative_guesses(prof, target, Limit(0.9), guess, lambda limit: True)
    assert scaled[0][3] == round(point.limit.millicores * 0.9 / 0.75)
    assert alternative_guesses(prof, target, Limit(0.75), guess, lambda limit: False) == []


# -- the profile and the usage rules ------------------------------------------------------

def test_per_second_usage_and_cpu_per_request_from_samples() -> None:
    samples = [UsageSample(10.0, 1.0), UsageSample(11.0, 1.5), UsageSample(12.0, 2.3),
               UsageSample(12.4, 2.5)]            # the last interval is too short
    assert per_second_usage(samples) == pytest.approx([0.5, 0.8])
    assert cpu_per_request(samples, 300) == pytest.approx(5.0)
    assert cpu_per_request(samples[:1], 300) is None


def test_the_usage_rules() -> None:
    usage = [0.5] * 8 + [0.6, 0.9]
    rules = usage_limits(usage, 10, 2000)
    assert [(r.key, m) for r, _, m in rules] == [("p90+15%", 725), ("p95", 765)]
    assert rules[0][1] == pytest.approx(0.63 * 1.15) and rules[1][1] == pytest.approx(0.765)
    assert usage_limits(usage, 10, 700)[0][2] == 700   # at most the ceiling
    assert usage_limits([], 10, 2000) == []
    assert [r.key for r in USAGE_RULES] == ["p90+15%", "p95"]


def test_burstiness_cpu_spread_and_the_profile_plan() -> None:
    even = [i * 20_000_000 for i in range(50)]     # one request every 20 ms
    assert peak_to_mean(even, 100) == 1.0
    bursty = [i * 1_000_000 for i in range(10)] + [500_000_000 + i for i in range(2)]
    assert peak_to_mean(bursty, 100) == 5.0
    assert cpu_each([3_000_000, 5_000_000], 6.0) == (5.0, 7.0)  # + the same 2 ms each
    assert cpu_each([3_000_000, None], 6.0) == ()
    seq = profile_plan(LoadPlan.from_options(requests=100), 10)
    assert (seq.mode, seq.concurrency, seq.duration_s) == (LoadMode.CLOSED_LOOP, 1, 10)
    rate = profile_plan(LoadPlan.from_options(rate=20, duration=3), 10)
    assert (rate.rate_rps, rate.requests) == (20, 200)
    long = LoadPlan.from_options(concurrency=2, duration=30)
    assert profile_plan(long, 10) is long


# -- the answer ---------------------------------------------------------------------------------

def test_the_answer_as_json() -> None:
    target = LatencyTarget(30)
    runs = [row(700, 20.0, target, role="guess"), row(630, 33.0, target)]
    at, below = conclude(runs, target)
    guess = model_point(profile(), Limit(0.75), target)
    usage = UsageResult(USAGE_RULES[0], 0.6951, Limit(0.696), runs[0])
    advice = Advice(target, "kernel", "sequential: 100 requests", profile(), guess,
                    (FREE, *runs), at, below, 10, 2000, usage_based=(usage,))
    data = json.loads(json.dumps(advice.to_dict(), allow_nan=False))
    assert data["recommended"] == {"cpus": 0.7, "millicores": 700, "period_ms": 100.0,
                                   "burst_ms": 0.0, "docker": "--cpus 0.7",
                                   "kubernetes_limits_cpu": "700m"}
    assert data["target"] == {"p99_ms": 30, "p90_ms": None, "max_throttled": None}
    assert [r["cpus"] for r in data["runs"]] == [None, 0.7, 0.63]
    assert [r["met"] for r in data["runs"]] == [None, True, False]
    assert data["model_guess"]["cpus"] == 0.75
    assert data["model_guess"]["vs_measured"] == pytest.approx(0.05 / 0.7)
    assert data["usage_based"][0]["rule"] == "p90+15%" and data["usage_based"][0]["met"]
    assert data["next_lower"]["cpus"] == 0.63 and advice.guess_error == pytest.approx(0.0714,
                                                                                       abs=1e-4)
    assert set(MAIN_ROLES) == {"guess", "search", "usage", "confirm"}


def test_why_a_target_cannot_be_met() -> None:
    target = LatencyTarget(30)
    slow = profile(cpu_ms=40.0)
    top = row(2000, 45.0, target)
    words = unmet_reason(slow, target, top, "the machine's 2 CPUs")
    assert words.startswith("the target cannot be met by a CPU limit alone: even at the "
                            "machine's 2 CPUs the run missed it (p99 45.0 > 30 ms)")
    assert "the work itself takes 40.0 ms of CPU per request" in words


def test_the_answer_is_confirmed_by_a_second_run() -> None:
    target = LatencyTarget(30)
    runs = [row(700, 20.0, target), row(630, 40.0, target)]
    assert to_confirm(runs, target) == 700
    runs.append(row(700, 45.0, target, name="r700-2", role="confirm"))   # mean 32.5: missed
    assert to_confirm(runs, target) is None and bracket(verdicts(runs, target)) == (700, None)
    assert to_confirm([row(630, 40.0, target)], target) is None      # nothing met yet


def test_a_miss_above_a_met_limit_is_run_once_more_before_it_is_believed() -> None:
    target = LatencyTarget(30)
    runs = [row(600, 25.0, target), row(700, 45.0, target), row(800, 50.0, target)]
    assert to_recheck(runs, target) == 700
    runs.append(row(700, 12.0, target, name="r700-2"))     # mean 28.5: met after all
    assert to_recheck(runs, target) == 800
    runs.append(row(800, 44.0, target, name="r800-2"))     # missed twice: believed
    assert to_recheck(runs, target) is None
    assert bracket(verdicts(runs, target)) == (800, None)
    assert to_recheck([row(600, 45.0, target), row(700, 20.0, target)], target) is None
