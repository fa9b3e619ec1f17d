"""``cluster --prometheus``: a row's figures from the node agent's counters as Prometheus kept
them, asked in bounded queries (client/run/prometheus_query.py). A real Prometheus (Debian's,
on loopback) holds series backfilled by ``promtool tsdb create-blocks-from openmetrics`` from
series the test writes: the figures are what those series say at the queries' steps, the
queries name at most the points they say, and a query refused for its size is split, or one
line. On the host, the same Prometheus scrapes the real agent watching a v1 group the test
throttles: the row's periods, periods throttled, throttled time and wait histogram are what
the group's cpu.stat counted between the scrapes; a group with no quota, found by the agent's
no_quota gauge, gets a row that claims no throttling. Bad input: one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import numpy as np
import pytest

from client.analysis.goal import LatencyGoal
from client.advise.cluster import row_of
from client.analysis.cluster import WorkloadLimits, pod_window
from client.analysis.cluster_prometheus import (FROM_AGENTS, LEFT_OUT, NOT_IN_PROMETHEUS,
                                                bucket_quantile, combined, covers,
                                                departed_pods, prometheus_row, resolution)
from client.advise.cluster_rows import prometheus_rows
from client.render.cluster import format_cluster, format_cluster_csv
from client.run import prometheus_query
from client.run.k8s_workloads import fold_pods
from client.run.replay_input import read_recording
from client.run.prometheus import (AGENT_METRICS, Prometheus, PrometheusError, open_prometheus)
from client.run.prometheus_query import (MAX_STEPS, PEAK_PER_POINT, RULE_COVER, SERIES_PER_POD,
                                         USAGE_RULE, USAGE_RULE_MS, PodTotals, Totals,
                                         pod_totals, pods_seen, step_for, window)
from cpuquota.limit import NO_QUOTA
from tests.prometheus_support import Labels, Scraped, backfilled_prometheus, scraped_agent
from client.commands import main as http_timing
from benchmarks.fake_kube import Cluster, fake_kube
from tests.support import exit_code_and_errors, free_port

CLUSTER_DATA = Path(__file__).parent / "data" / "cluster"   # the agent's timelines
BUSY = WorkloadLimits("static/deployment/busy", 0.2, 0.2)
TARGET = LatencyGoal(10.0, None, None)
BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0,
          float("inf"))   # the agent's wait histogram (agent/internal/metrics/waits.go)
LOOKBACK_S = 300          # Prometheus's default: a selector takes a sample this old at most

# ---- series the test writes, backfilled into a real Prometheus --------------------------------

SCRAPE_S = 15
HOURS = 8
NOW = time.time()
END = (int(NOW) // 3600 - 1) * 3600 + 7        # the last scrape, an hour or two ago
START = END - HOURS * 3600
AT = END + 37.25       # the windows end here: off the scrapes and off every step
WEB_A, WEB_GONE = "web-5d8f9c7b6-x2k4q", "web-5d8f9c7b6-lm2n4"
PODS = {("shop", WEB_A): (START, END, START + 6 * 3600),        # reset at 6 h
        ("shop", WEB_GONE): (START, END - 3 * 3600, None),      # left 3 h before the end
        ("shop", "db-0"): (START + 3600, END, None),            # began an hour in
        ("other", "web-5d8f9c7b6-aaaaa"): (START, END, None),
        ("other", "free-5d8f9c7b6-bbbbb"): (START, END, None)}       # no quota on its group
NO_QUOTA_POD = ("other", "free-5d8f9c7b6-bbbbb")
OLD_AGENT_POD = ("other", "web-5d8f9c7b6-aaaaa")   # no start_time gauge: an agent before it
Samples = list[tuple[float, float]]


def written() -> dict[tuple[str, str], dict[str, dict[str, Samples]]]:
    """Each pod's series: metric key -> le ("" for a counter) -> samples, every SCRAPE_S."""
    rng = random.Random(59)
    out: dict[tuple[str, str], dict[str, dict[str, Samples]]] = {}
    for pod, (first, last, reset) in PODS.items():
        values = {k: 0.0 for k in ("periods", "throttled_periods", "throttled_seconds",
                                   "usage_seconds", "coarse_periods")}
        waits = [0.0] * len(BOUNDS)
        series: dict[str, dict[str, Samples]] = {}
        t = first
        while t <= last:
            if reset is not None and reset <= t < reset + SCRAPE_S:
                values = dict.fromkeys(values, 0.0)
                waits = [0.0] * len(BOUNDS)
            throttled = rng.randrange(0, 30)
            values["periods"] += 150
            values["throttled_periods"] += throttled
            values["throttled_seconds"] += round(throttled * rng.uniform(0.001, 0.06), 6)
            values["usage_seconds"] += round(rng.uniform(0.0, 1.5) * SCRAPE_S, 6)
            values["coarse_periods"] += rng.random() < 0.1
            for _ in range(throttled):
                i = rng.randrange(len(BOUNDS))
                waits = [w + (j >= i) for j, w in enumerate(waits)]   # cumulative
            for key, value in values.items():
                series.setdefault(key, {}).setdefault("", []).append((t, value))
            if pod != OLD_AGENT_POD:   # the agent began watching 10 min before, or at the reset
                since = reset if reset is not None and t >= reset else first - 600
                series.setdefault("start_time", {}).setdefault("", []).append((t, since))
            for le, count in zip(BOUNDS, waits):
                name = "+Inf" if le == float("inf") else repr(le)
                series.setdefault("wait_bucket", {}).setdefault(name, []).append((t, count))
            t += SCRAPE_S
        if pod == NO_QUOTA_POD:   # as the agent exports it: its usage and that it has no quota
            usage = series["usage_seconds"]
            series = {"usage_seconds": usage, "no_quota": {"": [(t, 1.0) for t, _ in usage[""]]},
                      "start_time": series["start_time"]}
        out[pod] = series
    return out


SERIES = written()


def om_series() -> dict[str, dict[Labels, Samples]]:
    out: dict[str, dict[Labels, Samples]] = {}
    for (ns, pod), series in SERIES.items():
        for key, by_le in series.items():
            for le, samples in by_le.items():
                labels: Labels = (("namespace", ns), ("pod", pod), ("container", ""),
                                  ("level", "pod"), *((("le", le),) if le else ()))
                out.setdefault(AGENT_METRICS[key], {})[labels] = samples
    return out


def at_or_before(samples: Samples, t: float) -> tuple[float, float] | None:
    """What a selector at ``t`` takes: the last sample at or before it, within the lookback."""
    before = [s for s in samples if s[0] <= t]
    return before[-1] if before and before[-1][0] > t - LOOKBACK_S else None


def stepwise(samples: Samples, totals: Totals) -> list[float]:
    """Each step's increase as the queries define it: the counter at the step less a step
    before (both there), or after a reset the counter."""
    out = []
    for k in range(1, totals.steps + 1):
        now = at_or_before(samples, totals.start + k * totals.step_s)
        before = at_or_before(samples, totals.start + (k - 1) * totals.step_s)
        if now is not None and before is not None:
            out.append(now[1] - before[1] if now[1] >= before[1] else now[1])
    return out


def usage_stepwise(samples: Samples, totals: Totals) -> list[float]:
    """As :func:`stepwise`, at the usage quantiles' steps: the window's last."""
    out = []
    for k in range(1, totals.usage_steps + 1):
        now = at_or_before(samples, totals.usage_start + k * totals.usage_step_s)
        before = at_or_before(samples, totals.usage_start + (k - 1) * totals.usage_step_s)
        if now is not None and before is not None:
            out.append(now[1] - before[1] if now[1] >= before[1] else now[1])
    return out


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled_prometheus(tmp_path_factory.mktemp("backfilled"), om_series()) as base:
        yield base


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same series in a Prometheus that loads at most 12,000 samples a query: one pod's
    counters over 2 h pass (4 x 17 x 121 points at most), two pods' do not."""
    with backfilled_prometheus(tmp_path_factory.mktemp("tiny"), om_series(),
                               ["--query.max-samples=12000"]) as base:
        yield base


class Asking(Prometheus):
    """A Prometheus at ``base`` that keeps each query string asked."""

    def __init__(self, base: str) -> None:
        real = open_prometheus(base)
        self.paths: list[tuple[str, dict[str, str]]] = []

        def get(path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
            self.paths.append((path, dict(params)))
            return real._get(path, params)
        super().__init__(base, get)


def test_a_steps_size_fits_the_window() -> None:
    assert step_for(600) == 60 and step_for(7 * 86400) == 60      # a week: 10,080 steps
    assert 7 * 86400 / step_for(7 * 86400) == MAX_STEPS
    assert step_for(30 * 86400) == 300 and step_for(7 * 86400, min_step_s=15) == 60
    assert step_for(3600, min_step_s=15) == 15
    # the steps make the window: as many as the step gives, each as long as makes it
    assert window(7 * 86400, 1000.5) == (60_000, 10_080, 1000.5)
    assert window(90, 1000.0) == (45_000, 2, 1000.0)
    assert window(20.5, 1000.0) == (20_500, 1, 1000.0)   # shorter than a step: one


@pytest.mark.parametrize("since_s, most, every", [(2 * 3600, 50, 3), (7 * 3600, 100, 5),
                                                  (7 * 3600, 50, 9)])
def test_the_usage_quantiles_are_at_a_coarser_step_of_whole_steps_when_many(
        backfilled: str, monkeypatch: pytest.MonkeyPatch, since_s: float, most: int,
        every: int) -> None:
    # a week's 10,080 steps are 2,016 of 5 m for the quantiles; here, fewer steps and a lower
    # bound make the same (and one that leaves steps at the window's start out of them)
    assert prometheus_query.USAGE_MAX_STEPS == 2_016
    monkeypatch.setattr(prometheus_query, "USAGE_MAX_STEPS", most)
    prometheus = Asking(backfilled)
    seen = pods_seen(prometheus, None, since_s, AT)
    totals = pod_totals(prometheus, seen, since_s, AT)
    assert (totals.step_s, totals.steps) == (60, since_s // 60)
    assert totals.usage_every == every and totals.usage_step_s == 60 * every
    assert totals.usage_steps == totals.steps // every <= most
    assert totals.usage_start == pytest.approx(AT - totals.usage_steps * 60 * every)
    for pod, got in totals.pods.items():
        series = SERIES[pod]
        rates = np.asarray(usage_stepwise(series["usage_seconds"][""], totals))
        rates /= totals.usage_step_s
        assert got.usage["p95"] == pytest.approx(np.percentile(rates, 95), rel=1e-9), pod
        assert got.usage["p90"] == pytest.approx(np.percentile(rates, 90), rel=1e-9), pod
        if pod != NO_QUOTA_POD:   # the counters stay at every step
            assert got.total("periods") == pytest.approx(
                sum(stepwise(series["periods"][""], totals)), rel=1e-9, abs=1e-9), pod
    queries = [params.get("query", "") for _, params in prometheus.paths]
    quantiles = [q for q in queries if "quantile_over_time" in q and USAGE_RULE not in q]
    assert quantiles and all(f":{60_000 * every}ms]" in q for q in quantiles)
    # at 5 m steps the recording rule is asked first; these series hold none of it
    assert any(USAGE_RULE in q for q in queries) == (every >= 5)
    assert totals.rule_pods == 0 and not any(p.usage_rule for p in totals.pods.values())
    # the row says the quantiles' step
    row = prometheus_row(WorkloadLimits("shop/deployment/web", 2.0, 2.0), "shop",
                         [p for ns, p in seen if ns == "shop"], totals)
    assert f"per {60 * every:g} s step" in dict(row.sources)["usage_p95_cpus"]
    assert f"usage quantiles at {60 * every:g} s" in resolution(60, totals.usage_step_s)


RULE_S = USAGE_RULE_MS // 1000
# the recording rule's samples (k8s/recorder/rules.yaml), every 5 m: over the whole window for
# two pods, over its last 2 h only for another (the rule loaded then), none for the rest
RULED = {("shop", WEB_A): START, ("other", "web-5d8f9c7b6-aaaaa"): START,
         ("shop", "db-0"): END - 2 * 3600}


def rule_series() -> dict[Labels, Samples]:
    rng = random.Random(5)
    return {(("namespace", ns), ("pod", pod), ("container", ""), ("level", "pod")):
            [(t, round(rng.uniform(0.0, 1.5), 6))
             for t in range(math.ceil(first / RULE_S) * RULE_S, END + 1, RULE_S)]
            for (ns, pod), first in RULED.items()}


@pytest.fixture(scope="module")
def ruled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[Labels, Samples]]]:
    rules = rule_series()
    with backfilled_prometheus(tmp_path_factory.mktemp("ruled"),
                               {**om_series(), USAGE_RULE: rules}) as base:
        yield base, rules


def test_over_a_long_window_the_usage_quantiles_are_the_recording_rules_samples(
        ruled: tuple[str, dict[Labels, Samples]], monkeypatch: pytest.MonkeyPatch) -> None:
    # a week's quantiles at 5 m steps (here 7 h's, with at most 100 steps) are those of the
    # rule's own samples in the window where a pod's series holds 95 % of them, one query a
    # batch; a pod whose series holds fewer is asked at the step as before
    base, rules = ruled
    monkeypatch.setattr(prometheus_query, "USAGE_MAX_STEPS", 100)
    prometheus = Asking(base)
    since_s = 7 * 3600
    seen = pods_seen(prometheus, None, since_s, AT)
    totals = pod_totals(prometheus, seen, since_s, AT)
    assert totals.usage_step_s == RULE_S and totals.rule_window
    full = {pod for pod, first in RULED.items() if first <= totals.usage_start}
    assert full == {("shop", WEB_A), ("other", "web-5d8f9c7b6-aaaaa")}
    assert totals.rule_pods == len(full)
    for pod, got in totals.pods.items():
        assert got.usage_rule == (pod in full), pod
        if pod in full:
            (samples,) = [v for labels, v in rules.items() if labels[:2] == (
                ("namespace", pod[0]), ("pod", pod[1]))]
            values = [v for t, v in samples if totals.usage_start <= t <= AT]
            assert len(values) >= RULE_COVER * totals.usage_steps
            expected = np.asarray(values)
        else:   # at the step, from the usage counter
            expected = np.asarray(usage_stepwise(SERIES[pod]["usage_seconds"][""], totals))
            expected /= totals.usage_step_s
        assert got.usage["p95"] == pytest.approx(np.percentile(expected, 95), rel=1e-9), pod
        assert got.usage["p90"] == pytest.approx(np.percentile(expected, 90), rel=1e-9), pod
    queries = [params.get("query", "") for _, params in prometheus.paths]
    ruled_asked = [q for q in queries if USAGE_RULE in q]
    assert len(ruled_asked) == len({ns for ns, _ in seen})   # a batch each: one a namespace
    # the others' usage, at the step, names no pod the rule gave
    at_step = [q for q in queries if "quantile_over_time" in q and USAGE_RULE not in q]
    assert at_step and not any(pod in q for q in at_step for _, pod in full)
    # what the answer and each row say
    said = resolution(totals.step_s, totals.usage_step_s, totals.rule_pods,
                      sum(bool(p.usage) for p in totals.pods.values()))
    assert f"{USAGE_RULE}'s 300 s rates for 2 of the {len(seen)} pods" in said, said
    row = prometheus_row(WorkloadLimits("other/deployment/web", 2.0, 2.0), "other",
                         ["web-5d8f9c7b6-aaaaa"], totals)
    assert f"per 300 s step (the recording rule {USAGE_RULE}'s 300 s rates)" in dict(
        row.sources)["usage_p95_cpus"]


@pytest.mark.parametrize("since_s", [2 * 3600, 7 * 3600])
def test_each_pods_figures_are_what_its_backfilled_series_say(backfilled: str,
                                                              since_s: float) -> None:
    prometheus = open_prometheus(backfilled)
    seen = pods_seen(prometheus, None, since_s, AT)
    gone_in_window = since_s > 3 * 3600
    assert seen == set(PODS) if gone_in_window else seen == set(PODS) - {("shop", WEB_GONE)}
    totals = pod_totals(prometheus, seen, since_s, AT)
    assert (totals.step_s, totals.end, totals.steps) == (60, AT, since_s // 60)
    assert set(totals.pods) == seen
    for pod, got in totals.pods.items():
        series = SERIES[pod]
        free = pod == NO_QUOTA_POD
        assert got.seen == {"no_quota" if free else "periods"} and got.no_quota == free, pod
        if free:   # no counter of periods: nothing to count
            assert got.counters == {} and got.buckets == {}
        else:
            for key in ("periods", "throttled_periods", "throttled_seconds", "coarse_periods"):
                assert got.total(key) == pytest.approx(sum(stepwise(series[key][""], totals)),
                                                       rel=1e-9, abs=1e-9), (pod, key)
            for le, name in zip(BOUNDS, series["wait_bucket"]):
                assert got.buckets[le] == sum(stepwise(series["wait_bucket"][name], totals))
        rates = np.asarray(stepwise(series["usage_seconds"][""], totals)) / totals.step_s
        assert got.usage["p95"] == pytest.approx(np.percentile(rates, 95), rel=1e-9)
        assert got.usage["p90"] == pytest.approx(np.percentile(rates, 90), rel=1e-9)
        stamps = [s[0] for k in range(1, totals.steps + 1)
                  if (s := at_or_before(series["no_quota" if free else "periods"][""],
                                        totals.start + k * totals.step_s)) is not None]
        assert (got.first_s, got.last_s) == (min(stamps), max(stamps))
    # the no-quota pod's row claims no throttling and is listed apart; with a pod that has a
    # quota, the workload's row counts that pod's
    free_row = prometheus_row(WorkloadLimits("other/deployment/free", 2.0, 2.0), "other",
                              [NO_QUOTA_POD[1]], totals)
    assert (free_row.periods, free_row.periods_throttled, free_row.throttled_ms,
            free_row.wait_p99_ms) == (None, None, None, None)
    assert free_row.no_quota is not None and free_row.no_quota.startswith(NO_QUOTA)
    assert free_row.window_s > 0 and free_row.usage_p95_cpus is not None
    both = prometheus_row(WorkloadLimits("other/deployment/web", 2.0, 2.0), "other",
                          ["web-5d8f9c7b6-aaaaa", NO_QUOTA_POD[1]], totals)
    assert both.no_quota is None and both.pods == 2
    assert both.periods == round(totals.pods[("other", "web-5d8f9c7b6-aaaaa")].total("periods"))
    if since_s < 2 * 3600 + 60:
        return
    # the reset 2 h before the end counts what followed it: the window's figure is the
    # counter at its end plus at the last step before the reset, less at its start (what it
    # gained between that step and the reset, less than a step's, is not seen)
    a = SERIES[("shop", WEB_A)]["periods"][""]
    reset = START + 6 * 3600
    step_before = totals.start + (reset - totals.start) // totals.step_s * totals.step_s
    values = [at_or_before(a, t) for t in (AT, step_before, totals.start, reset - 1)]
    assert None not in values
    end_value, before_reset, start_value, last_before = (v[1] for v in values if v)
    assert totals.pods[("shop", WEB_A)].total("periods") == (
        end_value + before_reset - start_value)
    assert 0 < last_before - before_reset <= 150 * totals.step_s / SCRAPE_S


def test_the_queries_name_at_most_the_points_they_say_and_hold_no_pods_raw_samples(
        backfilled: str) -> None:
    prometheus = Asking(backfilled)
    since_s = 7 * 3600
    totals = pod_totals(prometheus, pods_seen(prometheus, None, since_s, AT), since_s, AT)
    paths = [path for path, _ in prometheus.paths]
    # a batch a namespace: which pods span the window without a reset (two queries of
    # instants, one a side of the window; other's pod of an old agent, without the
    # start_time gauge, its resets in a third), then theirs, 3 (shop's db-0; other's two) and
    # the others', 3 at the steps (shop's pod with a reset and the one that left)
    assert paths == ["/api/v1/series"] + ["/api/v1/query"] * (2 + 3 + 3 + 2 + 1 + 3)
    ranged = [q for q, _ in totals.asked if "ms]" in q and ":60000ms]" not in q]
    assert len(ranged) == 1 and "resets(" in ranged[0] and OLD_AGENT_POD[1] in ranged[0] \
        and NO_QUOTA_POD[1] not in ranged[0], ranged   # the old agent's pod alone
    one_series = math.ceil((since_s + LOOKBACK_S) / SCRAPE_S) + 1   # raw samples, at most
    for query, points in totals.asked:
        # steps, not samples: a range of raw samples only for resets(), a series at a time
        for span, step in re.findall(r"\[(\d+)ms(:\d+ms)?\]", query):
            assert step == ":60000ms" or (int(span) == 1000 * (since_s + LOOKBACK_S)
                                          and "resets(" in query), query
        stats = httpx.get(backfilled + "/api/v1/query", timeout=30, params={
            "query": query, "time": f"{AT + totals.shift_ms / 1000:.3f}",
            "stats": "all"}).json()["data"]["stats"]["samples"]
        assert stats["totalQueryableSamples"] <= points, (query, stats, points)
        assert stats["peakSamples"] <= PEAK_PER_POINT * points, (query, stats, points)
        if "resets(" in query:
            assert stats["peakSamples"] <= 2 * one_series, (query, stats)
    # the raw samples a pod's series hold in the window, which the old query asked for
    raw = sum(1 for series in SERIES[("shop", WEB_A)].values() for samples in series.values()
              for t, _ in samples if AT - since_s < t <= AT)
    at_steps = sum(points for query, points in totals.asked if ":60000ms]" in query)
    assert at_steps / len(totals.pods) < raw / 3, (at_steps, raw)   # 60 s steps, not 15 s


def test_a_pod_spans_the_window_when_its_counters_run_began_before_its_first_sample() -> None:
    # the ends query's answer: each pod's periods sample times at the window's start, first
    # step and end, and the agent's start_time gauge at the end; the resets query's, apart
    def edges(pod: str) -> list[tuple[dict[str, str], float]]:
        return [({"pod": pod, "metric": "periods", "edge": edge}, t)
                for edge, t in (("start", 1000.0), ("first", 1060.0), ("last", 8000.0))]

    def said(pod: str, edge: str, value: float) -> list[tuple[dict[str, str], float]]:
        return [({"pod": pod, "edge": edge}, value)]
    margin = prometheus_query.SINCE_MARGIN_S   # the node's clock against Prometheus's
    answer = (edges("before") + said("before", "since", 1000.0 - margin)   # began before it
              + edges("restarted") + said("restarted", "since", 1000.5)   # after it: a new run
              + edges("close") + said("close", "since", 1000.0 - margin / 2)   # too close to say
              + edges("old") + edges("old-reset")                          # no gauge
              + [a for a in edges("left") if a[0]["edge"] != "last"] + said("left", "since", 0))
    whole, found, unsure = prometheus_query._whole(answer)
    assert whole == {"before"} and unsure == {"old", "old-reset"}
    assert (found["before"].first_s, found["before"].last_s) == (1060.0, 8000.0)
    whole, _, unsure = prometheus_query._whole(
        answer + said("old", "resets", 0.0) + said("old-reset", "resets", 1.0))
    assert whole == {"before", "old"} and unsure == set()


def test_batches_hold_at_most_the_series_a_query_may_name(
        backfilled: str, monkeypatch: pytest.MonkeyPatch) -> None:
    prometheus = open_prometheus(backfilled)
    pods = pods_seen(prometheus, "shop", 7 * 3600, AT)
    whole = pod_totals(prometheus, pods, 7 * 3600, AT)
    monkeypatch.setattr(prometheus_query, "SERIES_PER_QUERY", SERIES_PER_POD)   # a pod each
    one_by_one = pod_totals(prometheus, pods, 7 * 3600, AT)
    # together: which pods span the window (2), db-0's 3 queries and the 3 of the two others;
    # a pod each: those of each
    assert len(whole.asked) == 2 + 3 + 3 and len(one_by_one.asked) == 3 * 2 + 3 + 2 * 3
    assert one_by_one.pods == whole.pods


def test_a_query_refused_for_its_size_is_asked_again_in_halves(
        backfilled: str, tiny: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # every pod asked at the steps (as one with a reset is): the queries that can be refused
    monkeypatch.setattr(prometheus_query, "_whole", lambda answer: (set(), {}, set()))
    pods = pods_seen(open_prometheus(backfilled), "shop", 2 * 3600, AT)
    assert len(pods) == 2
    expected = pod_totals(open_prometheus(backfilled), pods, 2 * 3600, AT)
    split = pod_totals(open_prometheus(tiny), pods, 2 * 3600, AT)
    assert split.pods == expected.pods   # nothing counted twice
    # the counters' query (17 series a pod) asked again for each pod; the others, small
    # enough, once for both
    kinds = sorted(q.split(" (")[0] for q, _ in split.asked)
    assert kinds == sorted(q.split(" (")[0] for q, _ in expected.asked) + [
        "sum by"], kinds


def test_a_pods_query_refused_for_its_size_is_one_line_saying_to_narrow_since(
        tiny: str) -> None:
    prometheus = open_prometheus(tiny)
    with pytest.raises(PrometheusError) as refused:
        pod_totals(prometheus, [("shop", WEB_A)], 7 * 3600, AT)
    message = str(refused.value)
    assert message.startswith(f"Prometheus at {tiny} refused the query for one pod "
                              f"(shop/{WEB_A}, 420 steps of 60 s): ")
    assert "too many samples" in message and message.endswith("; narrow --since")
    assert "\n" not in message


def test_a_timeout_is_split_too_and_other_refusals_are_not() -> None:
    asked: list[str] = []

    def get(path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        asked.append(params["query"])
        if 'pod=~"a|b"' in params["query"]:   # both pods
            return 503, json.dumps({"status": "error", "errorType": "timeout",
                                    "error": "query timed out in query execution"}).encode()
        return 200, json.dumps({"status": "success",
                                "data": {"resultType": "vector", "result": []}}).encode()
    totals = pod_totals(Prometheus("fake", get), [("shop", "a"), ("shop", "b")], 3600, AT)
    # each refused, then each pod's: which span the window (two queries, a side of it each),
    # then the three at the steps
    assert len(totals.asked) == 2 * 2 + 6 and len(asked) == 2 * 3 + 9

    def bad(path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        return 400, json.dumps({"status": "error", "errorType": "bad_data",
                                "error": "parse error"}).encode()
    with pytest.raises(PrometheusError, match="refused the query .*: parse error$"):
        pod_totals(Prometheus("fake", bad), [("shop", "a"), ("shop", "b")], 3600, AT)


def pod(name: str, owner: tuple[str, str], namespace: str = "shop") -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": namespace,
                         "labels": {"throttle-lab/record": "true"},
                         "ownerReferences": [{"kind": owner[0], "name": owner[1]}]},
            "spec": {"nodeName": "node-1"}, "status": {"phase": "Running"}}


def test_the_commands_rows_count_the_pods_that_left_and_say_the_step(
        backfilled: str, tmp_path: Path) -> None:
    template = {"template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}}]}},
        "replicas": 1}
    workloads = fold_pods(
        [{"metadata": {"name": "web", "namespace": "shop"}, "spec": template, "status": {}},
         {"metadata": {"name": "db", "namespace": "shop"}, "spec": template, "status": {}}],
        ["Deployment", "StatefulSet"],
        [{"metadata": {"name": "web-5d8f9c7b6", "namespace": "shop",
                       "ownerReferences": [{"kind": "Deployment", "name": "web"}]}}],
        [pod(WEB_A, ("ReplicaSet", "web-5d8f9c7b6")), pod("db-0", ("StatefulSet", "db")),
         pod("db-1", ("StatefulSet", "db"))])
    since_s = 7 * 3600
    rows, unrecorded, totals = prometheus_rows(open_prometheus(backfilled), workloads, "shop",
                                                since_s, AT, tmp_path, TARGET)
    assert unrecorded == [] and totals.step_s == 60 and totals.steps == 420
    web = next(r for r in rows if r.workload == "shop/deployment/web")
    db = next(r for r in rows if r.workload == "shop/statefulset/db")
    assert web.pods == 2 and db.pods == 1    # web's pod that left, counted by its name
    assert f"1 pod(s) that left in the window counted too, by their names in Prometheus: " \
           f"{WEB_GONE}" in web.notes
    expected = sum(sum(stepwise(SERIES[("shop", p)]["throttled_periods"][""], totals))
                   for p in (WEB_A, WEB_GONE))
    assert web.periods_throttled == expected
    assert db.missing == (f"shop/db-1: {NOT_IN_PROMETHEUS} (no series of the node agent's "
                          "counters in the window)",)
    assert "per 60 s step" in web.to_dict()["sources"]["usage_p95_cpus"]
    assert set(totals.pods) == {("shop", WEB_A), ("shop", WEB_GONE), ("shop", "db-0")}


def test_cluster_says_the_step_its_answer_had(backfilled: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The whole command, its workloads from a fake API server on loopback
    (benchmarks/fake_kube.py), its figures from the backfilled Prometheus."""
    template = {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}}]}}}
    lists = {
        "/apis/apps/v1/namespaces/shop/deployments": [
            {"metadata": {"name": "web", "namespace": "shop"}, "spec": template, "status": {}}],
        "/apis/apps/v1/namespaces/shop/statefulsets": [], "/apis/apps/v1/namespaces/shop/daemonsets": [],
        "/apis/apps/v1/namespaces/shop/replicasets": [
            {"metadata": {"name": "web-5d8f9c7b6", "namespace": "shop",
                          "ownerReferences": [{"kind": "Deployment", "name": "web"}]}}],
        "/api/v1/namespaces/shop/pods": [pod(WEB_A, ("ReplicaSet", "web-5d8f9c7b6"))]}
    with fake_kube(Cluster(lists), tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        monkeypatch.chdir(tmp_path)
        argv = ["cluster", "-n", "shop", "--prometheus", backfilled, "--since", "7h",
                "--until", f"{AT:.3f}"]
        assert http_timing([*argv, "--json"]) == 0
        answer = json.loads(capsys.readouterr().out)
        assert http_timing(argv) == 0
        text = capsys.readouterr().out
    said = answer["resolution"]
    assert (said["step_s"], said["steps"], said["end"]) == (60, 420, AT)
    # which span the window (two), then the three at the steps (a reset, one that left)
    assert said["queries"] == 5 and "cannot see a period of 100 ms" in said["says"]
    (row,) = answer["workloads"]
    assert row["pods"] == 2   # and the one that left
    assert ("Prometheus at 60 s steps: usage is each step's average, which cannot see a "
            "period of 100 ms (420 of them, 5 queries)") in text


def one_workload(namespace: str, labelled: bool) -> dict[str, list[object]]:
    """The API's lists of ``namespace``: Deployment web, its ReplicaSet, its one pod."""
    template = {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}}}]}}}
    one = pod(WEB_A, ("ReplicaSet", "web-5d8f9c7b6"), namespace)
    if not labelled:
        one["metadata"] = {"name": WEB_A, "namespace": namespace, "labels": {},
                           "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5d8f9c7b6"}]}
    base = f"/apis/apps/v1/namespaces/{namespace}"
    return {f"{base}/deployments": [{"metadata": {"name": "web", "namespace": namespace},
                                     "spec": template, "status": {}}],
            f"{base}/statefulsets": [], f"{base}/daemonsets": [],
            f"{base}/replicasets": [{"metadata": {
                "name": "web-5d8f9c7b6", "namespace": namespace,
                "ownerReferences": [{"kind": "Deployment", "name": "web"}]}}],
            f"/api/v1/namespaces/{namespace}/pods": [one]}


@pytest.mark.parametrize("namespace, labelled, expected", [
    ("shop", False, "no workload in namespace shop has a pod the node agent records: label "
     "its pods throttle-lab/record=true"),
    # recorded, but Prometheus holds nothing of that namespace's pods
    ("quiet", True, "holds no series of the node agent's counters for the recorded pods of "
     "namespace quiet in the 3600 s to "),
])
def test_a_namespace_with_no_recorded_workload_is_one_line(
        backfilled: str, namespace: str, labelled: bool, expected: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with fake_kube(Cluster(one_workload(namespace, labelled)), tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        code, err = exit_code_and_errors(
            ["cluster", "-n", namespace, "--prometheus", backfilled, "--since", "1h",
             "--until", f"{AT:.3f}"], tmp_path, monkeypatch, capsys)
    assert code == 2 and expected in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


# ---- the folding, on figures as the queries give them -----------------------------------------

def busy_totals(step_s: int = 60) -> Totals:
    busy = PodTotals({"periods": 1200.0, "throttled_periods": 8.0, "throttled_seconds": 0.4,
                      "coarse_periods": 0.0},
                     {0.05: 2.0, 0.1: 8.0, float("inf"): 8.0}, {"p95": 0.19, "p90": 0.15},
                     1000.0, 1120.0)
    return Totals(1000 * step_s, 5, 1180.0, {("", "busy"): busy})


def test_a_row_is_its_pods_figures_summed_and_the_highest_pods_usage() -> None:
    two = busy_totals()
    other = dataclasses.replace(two.pods[("", "busy")], usage={"p95": 0.3, "p90": 0.1})
    two.pods[("", "busy-2")] = other
    row = prometheus_row(BUSY, "", ["busy", "busy-2"], two)
    assert (row.periods, row.periods_throttled) == (2400, 16)
    assert row.throttled_ms == pytest.approx(800.0) and row.window_s == 240.0
    assert row.usage_p95_cpus == 0.3 and row.vpa_cpus == pytest.approx(0.15 * 1.15)
    assert row.wait_p99_ms == pytest.approx(1000 * bucket_quantile(0.99, {
        0.05: 4.0, 0.1: 16.0, float("inf"): 16.0}))


def test_a_histograms_quantile_is_interpolated_in_its_bucket_as_prometheus_does() -> None:
    buckets = {0.01: 0.0, 0.1: 100.0, float("inf"): 100.0}
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.055)
    assert bucket_quantile(0.99, {0.1: 0.0, float("inf"): 10.0}) == 0.1   # highest bound
    assert bucket_quantile(0.99, {0.1: 0.0, float("inf"): 0.0}) is None   # nothing observed


def test_what_needs_each_period_is_left_out_with_the_reason() -> None:
    found = busy_totals()
    row = prometheus_row(BUSY, "", ["busy", "gone"], found)
    assert row.delay_p99_now_ms is None and row.recommended_cpus is None
    assert row.predicted_delay_p99_ms is None and LEFT_OUT in row.notes
    assert row.missing == (f"/gone: {NOT_IN_PROMETHEUS} (no series of the node agent's "
                           "counters in the window)",)
    sources = row.to_dict()["sources"]
    assert "Prometheus" in sources["periods"] and "Prometheus" in sources["usage_p95_cpus"]
    assert sources["recommended_cpus"] == LEFT_OUT
    text = format_cluster([row], "cluster")
    assert "they need per-period data" in text
    assert "no limit" not in text   # a limited workload: its delay is not known, not absent
    nothing = prometheus_row(WorkloadLimits("static/deployment/none", 0.5, None), "",
                             ["none-1"], found)
    assert nothing.notes[0].startswith(NOT_IN_PROMETHEUS) and nothing.periods is None
    assert len(format_cluster_csv([row, nothing]).splitlines()) == 3   # the others still print


def test_the_agents_windows_give_what_needs_each_period_when_they_cover_it() -> None:
    found = busy_totals()
    first = found.pods[("", "busy")].first_s
    assert first is not None
    recording = read_recording(CLUSTER_DATA / "shop_web-a.cgroup.csv")
    window = dataclasses.replace(
        pod_window("busy", recording.samples, recording.period_ns, recording.limits, 0),
        start_epoch_ns=int(first * 1e9))
    assert covers([window], "", ["busy", "gone"], found) is None
    within = dataclasses.replace(window, start_epoch_ns=int((first + 50) * 1e9))
    assert covers([within], "", ["busy"], found) is None   # within a step: as well as known
    late = dataclasses.replace(window, start_epoch_ns=int((first + 90) * 1e9))
    assert covers([late], "", ["busy"], found) == (
        "the agents' window of /busy starts 90 s after Prometheus's first sample of it")
    assert covers([], "", ["busy"], found) == "the agents have no window of /busy"
    agents = row_of(BUSY, [window], LatencyGoal(10.0))
    row = combined(prometheus_row(BUSY, "", ["busy"], found), agents)
    assert row.periods_throttled == 8   # Prometheus's
    assert (row.recommended_cpus, row.delay_p99_now_ms) == (agents.recommended_cpus,
                                                            agents.delay_p99_now_ms)
    sources = row.to_dict()["sources"]
    assert sources["recommended_cpus"] == sources["added_delay"] == FROM_AGENTS
    assert "Prometheus" in sources["periods"] and LEFT_OUT not in row.notes


def test_pods_that_left_are_counted_by_the_names_their_controller_gave_them() -> None:
    found = {("shop", name) for name in (
        "web-5d8f9c7b6-x2k4q",          # a Deployment's pod that left
        "web-api-7b9d5c4f8-q2w4r",      # web-api's, not web's
        "agent-x7z2k",                  # a DaemonSet's
        "db-0", "db-1",                 # a StatefulSet's: db-0 is listed now
        "web-6c9d8f7b5-lm2n4")}         # listed now
    found.add(("other", "web-5d8f9c7b6-aaaaa"))   # another namespace
    workloads = [("shop", "Deployment", "web"), ("shop", "Deployment", "web-api"),
                 ("shop", "DaemonSet", "agent"), ("shop", "StatefulSet", "db")]
    web, web_api, agent, db = departed_pods(workloads, [("shop", "db-0"),
                                                        ("shop", "web-6c9d8f7b5-lm2n4")], found)
    assert web == ["web-5d8f9c7b6-x2k4q"] and web_api == ["web-api-7b9d5c4f8-q2w4r"]
    assert agent == ["agent-x7z2k"] and db == ["db-1"]


# ---- a real Prometheus scraping the real agent -------------------------------------------------

@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    with scraped_agent(tmp_path_factory.mktemp("scraped")) as got:
        yield got


@pytest.mark.root
def test_the_rows_counters_are_what_cpu_stat_counted_between_the_scrapes(
        scraped: Scraped) -> None:
    now = time.time()
    prometheus = open_prometheus(scraped.base)
    since_s = now - scraped.held   # Prometheus holds ``before`` at the window's start
    seen = pods_seen(prometheus, "", since_s, now, level="group")
    assert seen == {("", "busy"), ("", "idle"), ("", "free")}   # free: by its no_quota gauge
    found = pod_totals(prometheus, seen, since_s, now, level="group")
    assert found.steps == 1 and found.start == pytest.approx(scraped.held, abs=1e-3)
    row = prometheus_row(BUSY, "", ["busy"], found)
    before, after = scraped.before, scraped.after
    assert row.periods == after["nr_periods"] - before["nr_periods"]
    assert row.periods_throttled == after["nr_throttled"] - before["nr_throttled"]
    assert row.throttled_ms == pytest.approx(
        (after["throttled_time"] - before["throttled_time"]) / 1e6, abs=1e-6)
    # the agent watched the group from before its first throttle: one wait per period
    assert f"histogram: {row.periods_throttled} periods" in " ".join(row.notes)
    assert row.usage_p95_cpus is not None and row.vpa_cpus is not None
    assert 0 < row.usage_p95_cpus <= 0.2 * 1.1    # a step's usage, within the quota
    idle = prometheus_row(WorkloadLimits("static/deployment/idle", 0.2, None), "", ["idle"],
                          found)
    assert (idle.periods, idle.periods_throttled, idle.wait_p99_ms) == (0, 0, None)
    # a group with no quota (exclusive CPUs: limits.cpu 2, no quota): the agent exports that,
    # no counter of throttling, and the row claims none and is listed apart
    assert found.pods[("", "free")].seen == {"no_quota"} and found.pods[("", "free")].no_quota
    assert found.pods[("", "busy")].seen == {"periods"} and not found.pods[("", "busy")].no_quota
    free = prometheus_row(WorkloadLimits("static/deployment/free", 2.0, 2.0), "", ["free"],
                          found)
    assert (free.periods, free.periods_throttled, free.throttled_ms) == (None, None, None)
    assert free.wait_p99_ms is None and free.pods == 1
    assert free.no_quota is not None and free.no_quota.startswith(NO_QUOTA)
    assert "exclusive CPUs" in free.no_quota and free.notes[0] == free.no_quota
    assert free.usage_p95_cpus is not None   # its usage is still read
    assert row.no_quota is None and idle.no_quota is None


@pytest.mark.root
def test_a_query_prometheus_refuses_is_its_own_error_text(scraped: Scraped) -> None:
    with pytest.raises(PrometheusError) as refused:
        open_prometheus(scraped.base).query("throttle_lab_cpu{", time.time())
    message = str(refused.value)
    assert message.startswith(f"Prometheus at {scraped.base} refused the query "
                              "throttle_lab_cpu{: ")
    assert "parse error" in message and "\n" not in message


@pytest.mark.root
def test_every_metric_cluster_reads_is_one_the_agent_exports(scraped: Scraped) -> None:
    text = httpx.get(scraped.agent + "/metrics", timeout=10).text
    for name in AGENT_METRICS.values():
        assert f"\n{name}{{" in text, name


# ---- bad input ---------------------------------------------------------------------------------

def test_an_unreachable_prometheus_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"   # nothing listens
    code, err = exit_code_and_errors(["cluster", "-A", "--prometheus", url], tmp_path,
                                     monkeypatch, capsys)
    assert code == 2 and err.startswith(f"http-timing: Prometheus at {url} unreachable: "), err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "raw-data").exists()


@pytest.mark.parametrize("argv, expected", [
    (["--prometheus", "prom:9090"], "--prometheus prom:9090: expected a URL"),
    (["--prometheus", "k8s:monitoring"], "expected a URL (http://HOST:9090) or k8s:"),
    (["--prometheus", "http://127.0.0.1:9", "--picture", "pictures"],
     "--picture draws each period, which Prometheus does not keep"),
    (["--prometheus", "k8s:monitoring/prometheus:9090"], "no kubeconfig"),
])
def test_bad_prometheus_input_is_one_line_and_exit_2(
        argv: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, err = exit_code_and_errors(["cluster", *argv], tmp_path, monkeypatch, capsys)
    assert code == 2 and expected in err, err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "pictures").exists()
