"""``advise``'s pure decisions: the target, the model's guess, the search over limits, the usage
rules and the answer (exact: no runs, no clocks)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pytest

from client.analysis.advise import (MAIN_ROLES, Advice, UsageResult, alternative_guesses,
                                    bracket, conclude, docker_flags, floor_millicores,
                                    kubernetes_cpu, needs_repeat, next_millicores, shape,
                                    to_confirm, to_recheck, unmet_reason, unthrottled_miss,
                                    verdicts)
from client.analysis.advise_model import (USAGE_RULES, Profile, cpu_each, cpu_per_request,
                                          model_curve, model_guess, model_point, peak_to_mean,
                                          per_second_usage, profile_plan, usage_limits)
from client.analysis.goal import (LatencyGoal, Measured, judge_requests, judge_run,
                                          pooled_runs)
from client.data.metadata import LoadMode
from client.render.advise import format_run
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


def row(millicores: int, p99: float, target: LatencyGoal, *, role: str = "search",
        name: str = "", p90: float | None = None, throttled: float = 0.1) -> Measured:
    p90 = p99 / 2 if p90 is None else p90
    return Measured(name or f"r{millicores}", role, shape(100)(millicores), 100, 0, 4.0, p90,
                    p99, throttled, target.misses(p90, p99, throttled),
                    target.narrow(p90, p99, throttled))


# -- the target ---------------------------------------------------------------------------

def test_a_target_says_what_was_missed_in_words() -> None:
    target = LatencyGoal(30, 15, 0.05)
    assert target.misses(10, 20, 0.0) == ()
    assert target.misses(16, 31, 0.06, errors=2) == (
        "2 failed request(s)", "p99 31.0 > 30 ms", "p90 16.0 > 15 ms", "delayed by throttling 6 % > 5 %")
    assert target.misses(10, math.nan, None) == ("p99 nan > 30 ms",)  # no answer misses
    assert target.describe() == "p99 <= 30 ms, p90 <= 15 ms, delayed by throttling <= 5 %"


@pytest.mark.parametrize(("target", "message"), [
    (LatencyGoal(0), "--p99 must be a number of ms > 0 (got 0)"),
    (LatencyGoal(math.inf), "--p99 must be a number of ms > 0 (got inf)"),
    (LatencyGoal(30, -1), "--p90 must be a number of ms > 0 (got -1)"),
    (LatencyGoal(30, 40), "--p90 40 ms is above --p99 30 ms"),
    (LatencyGoal(30, None, 1.5), "--max-throttled must be a percentage in [0, 100] (got 150)"),
])
def test_nonsense_targets_are_refused_in_one_line(target: LatencyGoal, message: str) -> None:
    problem = target.problem()
    assert problem is not None and problem.startswith(message) and "\n" not in problem


def test_a_verdict_is_narrow_when_it_could_flip_either_way() -> None:
    target = LatencyGoal(30)
    assert target.narrow(0, 34.0, None)           # missed by 13 %
    assert not target.narrow(0, 35.0, None)       # by 17 %: a clear miss
    assert target.narrow(0, 27.0, None)           # met with less than 15 % to spare
    assert not target.narrow(0, 25.0, None)       # met with room
    assert not target.narrow(0, 31.0, None, errors=1)  # failed requests are never noise
    throttled = LatencyGoal(30, None, 0.10)
    assert throttled.narrow(0, 10.0, 0.14) and not throttled.narrow(0, 10.0, 0.16)


def test_two_runs_of_a_limit_are_judged_by_their_mean() -> None:
    target = LatencyGoal(30)
    first, second = row(500, 33.0, target), row(500, 25.0, target, name="r500-2")
    both = pooled_runs([first, second], target)
    assert (first.met, second.met, both.met) == (False, True, True)
    assert both.p99_ms == 29.0 and both.runs == 2 and both.requests == 200
    assert both.name == "r500 + r500-2"
    assert pooled_runs([first], target) is first


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
    target = LatencyGoal(30)
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
    guess = model_guess(profile(), LatencyGoal(p99), shape(100), 10, 2000)
    assert guess is not None and guess.limit == Limit(millicores / 1000)
    assert guess.met and guess.p99_ms <= p99
    below = model_point(profile(), Limit((millicores - 1) / 1000), LatencyGoal(p99))
    assert not below.met                           # the smallest, to the millicore


def test_the_models_guess_is_none_when_even_the_ceiling_misses() -> None:
    assert model_guess(profile(cpu_ms=40.0, baseline_ms=40.0), LatencyGoal(30), shape(100),
                       10, 2000) is None
    floor = model_guess(profile(), LatencyGoal(5000), shape(100), 10, 2000)
    assert floor is not None and floor.limit.millicores == 10   # anything meets it


def test_an_open_loop_is_modelled_with_its_arrivals() -> None:
    rate = profile(mode=LoadMode.OPEN_LOOP, rate_rps=50.0, requests=200)
    guess = model_guess(rate, LatencyGoal(20), shape(100), 10, 2000)
    assert guess is not None and guess.limit.millicores == 250  # 50/s x 5 ms, exactly
    spread = profile(mode=LoadMode.OPEN_LOOP, rate_rps=50.0, requests=200,
                     cpu_each=(4.0, 6.0, 4.5, 5.5))
    wider = model_guess(spread, LatencyGoal(20), shape(100), 10, 2000)
    assert wider is not None and wider.limit.millicores > 250  # a spread queues up


def test_the_models_curve_spans_the_range() -> None:
    curve = model_curve(profile(), LatencyGoal(30), shape(100), 100, 1000, points=10)
    assert [p.limit.millicores for p in curve][0::9] == [100, 1000]
    assert curve[0].p99_ms > curve[-1].p99_ms and not curve[0].met and curve[-1].met


def test_alternatives_are_scaled_by_the_models_error_and_must_save_ten_percent() -> None:
    prof, target = profile(), LatencyGoal(30)
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
    target = LatencyGoal(30)
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
    target = LatencyGoal(30)
    slow = profile(cpu_ms=40.0)
    top = row(2000, 45.0, target)
    words = unmet_reason(slow, target, top, "the machine's 2 CPUs")
    assert words.startswith("the target cannot be met by a CPU limit alone: even at the "
                            "machine's 2 CPUs the run missed it (p99 45.0 > 30 ms)")
    assert "the work itself takes 40.0 ms of CPU per request" in words


def test_the_answer_is_confirmed_by_a_second_run() -> None:
    target = LatencyGoal(30)
    runs = [row(700, 20.0, target), row(630, 40.0, target)]
    assert to_confirm(runs, target) == 700
    runs.append(row(700, 45.0, target, name="r700-2", role="confirm"))   # mean 32.5: missed
    assert to_confirm(runs, target) is None and bracket(verdicts(runs, target)) == (700, None)
    assert to_confirm([row(630, 40.0, target)], target) is None      # nothing met yet


def test_a_miss_above_a_met_limit_is_run_once_more_before_it_is_believed() -> None:
    target = LatencyGoal(30)
    runs = [row(600, 25.0, target), row(700, 45.0, target), row(800, 50.0, target)]
    assert to_recheck(runs, target) == 700
    runs.append(row(700, 12.0, target, name="r700-2"))     # mean 28.5: met after all
    assert to_recheck(runs, target) == 800
    runs.append(row(800, 44.0, target, name="r800-2"))     # missed twice: believed
    assert to_recheck(runs, target) is None
    assert bracket(verdicts(runs, target)) == (800, None)
    assert to_recheck([row(600, 45.0, target), row(700, 20.0, target)], target) is None


# -- a limit judged by what its quota did -----------------------------------------------------

Requests = tuple[list[float], list[bool]]   # latencies (ms) and whether throttling delayed each


def service(millicores: int, *, noise_from: int | None = None, sleeps: bool = False
            ) -> Requests:
    """100 requests of ~5 ms; below 600 m the quota delays one more by 80 ms per 25 m less
    (two of them miss a p99 of 30 ms: the answer is 551 m). ``noise_from``: at that limit and
    above, the machine's other load makes 3 requests 70 ms slow, none throttled. ``sleeps``:
    every 20th request sleeps 50 ms (a wait that is not the CPU's)."""
    latencies = [5.0 + i / 100 for i in range(100)]
    delayed = [False] * 100
    for i in range(max(0, (600 - millicores) // 25)):
        latencies[3 + 7 * i], delayed[3 + 7 * i] = 80.0, True
    if noise_from is not None and millicores >= noise_from:
        for i in (10, 50, 90):
            latencies[i] = 70.0
    if sleeps:
        for i in range(0, 100, 20):
            latencies[i] = 55.0 + i / 100
    return latencies, delayed


def run_at(millicores: int, requests: Requests, target: LatencyGoal, *,
           per_request: bool = True, role: str = "search") -> Measured:
    """The row advise makes of such a run (``measured``): figures, then the one judge."""
    latencies, delayed = requests
    p50, p90, p99 = (float(v) for v in np.percentile(latencies, [50, 90, 99]))
    bare = Measured(f"r{millicores}", role, shape(100)(millicores), len(latencies), 0, p50,
                    p90, p99, sum(delayed) / len(delayed), None)
    return judge_run(bare, requests if per_request else None, target)


def advise_search(requests_at: Callable[[int], Requests], start: int, *,
                  per_request: bool = True) -> tuple[Measured | None, Measured | None]:
    """advise's search over ``requests_at``'s runs: the answer and the next lower step."""
    target, runs = LatencyGoal(30), []
    while (m := next_millicores(verdicts(runs, target), start=start, floor=10,
                                ceiling=2000)) is not None:
        runs.append(run_at(m, requests_at(m), target, per_request=per_request))
        assert len(runs) < 30
    return conclude(runs, target)


def test_requests_slow_without_throttling_are_counted_apart() -> None:
    target = LatencyGoal(30)
    judged = judge_requests(*service(1000, sleeps=True), target)
    assert judged.slow_unthrottled == 5 and judged.throttled_over == 0
    assert judged.p99_ms < 30                   # each as the median unthrottled request
    assert judged.unthrottled_p99_ms is not None and judged.unthrottled_p99_ms > 55
    quiet = judge_requests(*service(1000), target)
    assert (quiet.slow_unthrottled, quiet.p99_ms) == (0, float(np.percentile(service(1000)[0],
                                                                              99)))
    throttled = judge_requests(*service(500, sleeps=True), target)
    assert throttled.throttled_over == 4 and throttled.slow_unthrottled == 5
    assert throttled.p99_ms == 80.0             # the quota's delays still count


def test_a_miss_no_throttled_request_made_is_not_the_limits() -> None:
    target = LatencyGoal(30)
    noisy = run_at(800, service(800, noise_from=800), target)
    assert noisy.p99_ms > 30 and noisy.met and noisy.slow_unthrottled == 3
    assert noisy.throttled_over == 0 and not noisy.narrow
    assert format_run(4, noisy).endswith(
        "3 of 100 requests slow without throttling (counted apart: p99 6.0 ms): meets the "
        "target as far as the limit goes (no request over it was delayed by throttling)")
    by_figures = run_at(800, service(800, noise_from=800), target, per_request=False)
    assert by_figures.missed == ("p99 70.0 > 30 ms",)     # what it said before
    assert target.judge(70.0, 70.0, 0.0, errors=1, throttled_over=0)[0] == (
        "1 failed request(s)",)                            # failed requests still miss
    assert target.judge(70.0, 70.0, 0.2, throttled_over=0) == ((), False)
    limited = LatencyGoal(30, None, 0.05)
    assert limited.judge(5.0, 5.0, 0.2, throttled_over=0)[0] == ("delayed by throttling 20 % > 5 %",)


def test_the_search_does_not_climb_on_the_machines_load() -> None:
    quiet_at, quiet_below = advise_search(service, 700)
    assert quiet_at is not None and quiet_at.millicores is not None
    assert 551 <= quiet_at.millicores <= 551 * 1.1       # bracketed within 10 %
    assert quiet_below is not None and (quiet_below.millicores or 0) <= 550
    # three slow requests no throttling delayed, at every limit from the guess up
    at, below = advise_search(lambda m: service(m, noise_from=700), 700)
    assert at is not None and below is not None
    assert (at.millicores, below.millicores) == (quiet_at.millicores, quiet_below.millicores)
    # judged by the figures alone, every limit above 700 m missed: the search climbed
    climbed, _ = advise_search(lambda m: service(m, noise_from=700), 700, per_request=False)
    assert climbed is None or (climbed.millicores or 0) < 700


def test_a_service_with_sleeps_gets_the_answer_it_has_without_them() -> None:
    target = LatencyGoal(30)
    free = run_at(1000, service(1000, sleeps=True), target, role="profile")
    said = unthrottled_miss(free, target)
    assert said == ("p99 55.6 > 30 ms even unthrottled: 5 of 100 requests are slow without "
                    "any throttling (a wait that is not the CPU's: a sleep, I/O, the "
                    "machine's other load); every run counts such requests apart, and the "
                    "answer is the smallest limit at which throttling pushes no further "
                    "request past the target")
    assert unthrottled_miss(run_at(1000, service(1000), target), target) is None
    assert unthrottled_miss(run_at(1000, ([50.0] * 100, [False] * 100), target),
                            target) is None              # typically slow: below the service
    without, _ = advise_search(service, 700)
    with_sleeps, below = advise_search(lambda m: service(m, sleeps=True), 700)
    assert with_sleeps is not None and without is not None
    assert with_sleeps.millicores == without.millicores
    assert with_sleeps.slow_unthrottled >= 5 and below is not None and not below.met


def test_pooled_runs_sum_what_was_counted_apart() -> None:
    target = LatencyGoal(30)
    first = run_at(800, service(800, noise_from=800), target)
    second = run_at(800, service(500), target)           # 4 throttled requests over it
    both = pooled_runs([first, second], target)
    assert both.slow_unthrottled == 3 and both.throttled_over == 4 and not both.met
    assert both.judged_p99 == pytest.approx((first.judged_p99 + second.judged_p99) / 2)
    data = json.loads(json.dumps(both.to_dict(), allow_nan=False))
    assert (data["slow_unthrottled"], data["throttled_over_target"]) == (3, 4)
    assert data["judged_p99_ms"] == pytest.approx(both.judged_p99)
    assert data["p99_ms"] == pytest.approx((first.p99_ms + second.p99_ms) / 2)   # as measured
