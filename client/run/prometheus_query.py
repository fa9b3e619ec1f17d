"""The bounded queries ``cluster --prometheus`` asks (``client.run.prometheus`` reaches the
server): never a raw sample of a series in an answer, nor a pod's held at once, each pod's
figures evaluated by Prometheus at a step fitting the window, as robusta-dev/krr asks its own.

- The pods: the series API (the index, no sample read) lists every pod the agents'
  ``periods`` counter, or its ``no_quota`` gauge, names in the window (a group with no quota
  has no counter of periods: the agent says it has none instead).
- Then, for pods in batches (one namespace each, at most :data:`SERIES_PER_QUERY` series and
  :data:`POINTS_PER_QUERY` points a query), two instant queries (one a side of the window,
  each then reading the index of its own blocks only) say which pods span the window
  without a reset: the time of each one's ``periods`` (or ``no_quota``) sample at the
  window's start, at its first step and at its end, and the agent's ``start_time`` gauge at
  the end (since when its counters count without a reset: :data:`SINCE_MARGIN_S` or more
  before the start's sample, no reset between), each an instant's lookup. A pod without
  that gauge (an agent from before it) is asked a second query: the resets of its counters over the raw samples the
  steps take (``resets()`` of the three whose resets say all the others', which Prometheus
  evaluates a series at a time, reading the week's chunks of each).
- Those pods (most, in a cluster whose pods live longer than the window) get three queries:
  their counters at the window's end, and at its start (one taken from the other is what the
  steps' increases sum to when nothing resets; two queries, as each then reads the index of
  its own block only), and the usage rate's p95 and p90 over the steps
  (``quantile_over_time`` of each step's increase, at a step of whole steps giving at most
  :data:`USAGE_MAX_STEPS`: a week's 10,080 steps of 60 s are 2,016 of 5 m for the quantiles,
  five times cheaper, where they were nine tenths of Prometheus's work). At a quantiles'
  step of 5 m or more, they are first asked of the shipped recording rule
  :data:`USAGE_RULE` (each group's usage rate over 5 m, every 5 m; k8s/recorder/rules.yaml),
  a range selector of its own samples: a week is 2,016 of them a pod, where the usage series
  holds one a scrape (10,080 at 60 s, 40,320 at the shipped 15 s), the samples whose chunks
  Prometheus must read and hold resident. A pod whose rule series holds fewer than
  :data:`RULE_COVER` of the window's evaluations (the rule loaded within the window, or not
  at all) is asked at the step as before; :class:`Totals` says how many pods had the rule's.
- The others (a pod that began or left within the window, or whose counters reset) get three
  instant queries of subqueries at the step: the counters' increase (each step's, summed: a
  reset counts what followed it), the usage rate's p95 and p90, and each pod's first and last
  sample's time of its ``periods`` counter and of its ``no_quota`` gauge (which says whether
  its group had no quota in the window).

Evaluating each step's increase of every counter costs Prometheus a vector match a step and
series (a week: 10,080 steps of each of a pod's 17 counters; benchmarks/prometheus_week.py);
the counters at two instants cost two lookups a series.
A gap in a pod's series longer than Prometheus's lookback (5 min) is counted as the counter
says on the cheap path, and not at all at the steps (no step sees both its ends).

A step's increase is the counter at the step less the counter a step before (each the last
sample at or before it), or after a reset the counter; summed over the steps, a pod's figure
is its counter at the window's end less at its start, whatever the step, plus at each reset
the counter at the step before it (what it gained from that step to the reset, less than a
step's, is not seen). A pod that appears within the window is counted from the first step
that sees it at both ends (what it did before, less than a step, is not seen). The usage rates are the step's: a step of 60 s
cannot see a 100 ms period (:class:`Totals` says the step).

The queries go :data:`QUERY_WORKERS` at a time. A query Prometheus refuses for its size (too
many samples, a timeout) is asked again for each half of its pods (that query alone: what
passed is not asked twice); one pod's refused is one line saying to narrow ``--since``.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from client.run.prometheus import AGENT_METRICS, Prometheus, PrometheusError, PrometheusRefused

__all__ = ["COUNTERS", "EDGES", "MIN_STEP_S", "PodTotals", "PEAK_PER_POINT", "POINTS_PER_QUERY",
           "QUERY_WORKERS", "SERIES_PER_POD", "SERIES_PER_QUERY", "STEPS", "Totals", "USAGE_MAX_STEPS", "pod_totals",
           "pods_seen", "step_for", "USAGE_RULE", "USAGE_RULE_MS", "window"]

MIN_STEP_S = 60           # 4 scrapes at the shipped 15 s (k8s/recorder/prometheus.yml)
MAX_STEPS = 10_080        # a week at 60 s steps
# the usage quantiles' steps at most: a week at 5 m steps (a subquery's quantile costs
# Prometheus its steps times its selectors; the counters' sums need every step, these do not)
USAGE_MAX_STEPS = 2_016
STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)   # seconds
SERIES_PER_QUERY = 500
POINTS_PER_QUERY = 2_000_000   # series x steps a query reads
PEAK_PER_POINT = 4        # what Prometheus holds at once a point: a step's four selectors
QUERY_WORKERS = 1         # queries at a time: one. Prometheus's heap holds a query's samples
# until its collector runs: a week's queries 4 at a time took its heap to 3.25x its idle, one
# at a time 1.95x, in about the same time over one kept connection (benchmarks/prometheus_week.py)
COUNTERS = ("periods", "throttled_periods", "throttled_seconds", "coarse_periods",
            "wait_bucket")
BUCKETS = 13              # the agent's wait histogram: 12 bounds and +Inf (agent/internal/metrics)
SERIES_PER_POD = len(COUNTERS) - 1 + BUCKETS   # the counters' query's answer, a pod
QUANTILES = {"p95": 0.95, "p90": 0.9}
EDGES = ("periods", "no_quota")   # the series whose first and last sample the edges query finds
LOOKBACK_MS = 300_000     # Prometheus's default: a selector takes a sample this old at most
# the series whose resets say a pod's counters reset: the kernel's (cpu.stat's and the usage,
# made with the group) and the agent's (the wait histogram and the coarse periods, counted
# since the agent began watching the group: its +Inf bucket counts every wait)
RESET_WITNESSES = (("periods", ""), ("usage_seconds", ""), ("wait_bucket", ',le="+Inf"'))
# the recording rule of each group's usage rate over 5 m (k8s/recorder/rules.yaml), its
# group's interval, and the share of a window's evaluations a pod's series must hold to be used
USAGE_RULE = "throttle_lab:cpu_usage_seconds:rate5m"
USAGE_RULE_MS = 300_000
RULE_COVER = 0.95
# the agent's start_time is its node's clock, a sample's time Prometheus's: a run that began
# less than this before the window's first sample is not taken to span it (a reset just after
# it could hide in the clocks' difference); such a pod is asked at the steps
SINCE_MARGIN_S = 60.0


def step_for(since_s: float, min_step_s: int = MIN_STEP_S) -> int:
    """The step (seconds) for a window of ``since_s``: the first of :data:`STEPS` (and
    ``min_step_s`` at least) giving at most :data:`MAX_STEPS` steps."""
    for step in (min_step_s, *STEPS):
        if step >= min_step_s and since_s / step <= MAX_STEPS:
            return step
    return STEPS[-1]


@dataclass
class PodTotals:
    """One pod's figures over the window, as Prometheus evaluated them."""

    counters: dict[str, float] = field(default_factory=dict)   # a key of COUNTERS -> increase
    buckets: dict[float, float] = field(default_factory=dict)  # wait histogram: le -> increase
    usage: dict[str, float] = field(default_factory=dict)      # "p95", "p90" -> CPUs
    first_s: float | None = None      # its first and last sample's time in the window
    last_s: float | None = None
    # the keys of AGENT_METRICS ("periods", "no_quota") whose series the window holds
    seen: set[str] = field(default_factory=set)
    usage_rule: bool = False          # its usage quantiles are the recording rule's samples

    @property
    def no_quota(self) -> bool:
        """The agent said its group has no quota, and it had no counter of periods, in the
        window: nothing could throttle it."""
        return "no_quota" in self.seen and "periods" not in self.seen

    def total(self, key: str) -> float:
        return self.counters.get(key, 0.0)


@dataclass
class Totals:
    """What the queries gave: each pod's figures by (namespace, pod), the window they cover
    (unix seconds) and the step; ``asked``: each query asked
    and the points (series x steps) it names at most."""

    step_ms: int
    steps: int
    end: float
    pods: dict[tuple[str, str], PodTotals]
    asked: list[tuple[str, int]] = field(default_factory=list)
    level: str = "pod"
    @property
    def rule_pods(self) -> int:
        """The pods whose usage quantiles are the recording rule's."""
        return sum(p.usage_rule for p in self.pods.values())

    @property
    def rule_window(self) -> bool:
        """The usage quantiles' step is the recording rule's 5 m or more: it is asked first."""
        return self.usage_step_ms >= USAGE_RULE_MS

    @property
    def step_s(self) -> float:
        return self.step_ms / 1000

    @property
    def usage_every(self) -> int:
        """The steps a usage quantile's step spans: as few as give at most
        :data:`USAGE_MAX_STEPS` of them."""
        return max(1, math.ceil(self.steps / USAGE_MAX_STEPS))

    @property
    def usage_step_ms(self) -> int:
        return self.step_ms * self.usage_every

    @property
    def usage_step_s(self) -> float:
        return self.usage_step_ms / 1000

    @property
    def usage_steps(self) -> int:
        """The usage quantiles' steps: the window's last, each :attr:`usage_every` steps
        long (what is left at the window's start, less than one, is not in them)."""
        return max(1, self.steps // self.usage_every)

    @property
    def usage_start(self) -> float:
        return self.end - self.usage_steps * self.usage_step_ms / 1000

    @property
    def usage_shift_ms(self) -> int:
        """As :attr:`shift_ms`, to the next multiple of the usage quantiles' step."""
        return -round(self.end * 1000) % self.usage_step_ms

    @property
    def start(self) -> float:
        return self.end - self.steps * self.step_ms / 1000

    @property
    def shift_ms(self) -> int:
        """From the window's end to the next multiple of the step, where the queries are
        evaluated."""
        return -round(self.end * 1000) % self.step_ms


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _selector(names: Iterable[str], namespace: str, pods: Sequence[str], level: str) -> str:
    which = "|".join(p.replace(".", "\\.") for p in pods)   # DNS names: . is the only special
    return ('{__name__=~"' + "|".join(names) + '",level="' + level + '",namespace="'
            + _quote(namespace) + '",pod=~"' + _quote(which) + '"}')


def _offset(ms: int) -> str:
    return f" offset {ms}ms" if ms else ""


def _increase(selector: str, step_ms: int, shift_ms: int) -> str:
    """Each step's increase of the counters ``selector`` names (their name kept in the label
    ``metric``): the counter less a step before, or after a reset the counter."""
    def named(offset: str) -> str:
        return f'label_replace({selector}{offset}, "metric", "$1", "__name__", "(.+)")'
    now, before = named(_offset(shift_ms)), named(_offset(shift_ms + step_ms))
    # + 0: a reset's step, like the others, without the metric's name (a subquery's series
    # with and without it would be one series twice once a function drops it)
    return f"(({now} - {before}) >= 0 or ({now} and {before}) + 0)"


def _range(step_ms: int, steps: int) -> str:
    # the steps after the window's start to its end: half a step short of the window, so
    # that no step lies on its start whether the range's start is open (v3) or closed (v2)
    return f"[{steps * step_ms - step_ms // 2}ms:{step_ms}ms]"


def _usage_query(namespace: str, pods: Sequence[str], level: str, step_ms: int, steps: int,
                 shift_ms: int, whole: bool) -> tuple[str, str, int]:
    """(what, PromQL, points) of the usage rate's quantiles over ``steps`` of ``step_ms``
    ending at the window's end, evaluated ``shift_ms`` after it: each step's increase, after
    a reset the counter (``whole``: pods with no reset, the counter less a step before)."""
    sel = _selector([AGENT_METRICS["usage_seconds"]], namespace, pods, level)
    usage = (f"({sel}{_offset(shift_ms)} - {sel}{_offset(shift_ms + step_ms)})" if whole
             else _increase(sel, step_ms, shift_ms))
    quantiles = " or ".join(
        f'label_replace(max by (namespace, pod) (quantile_over_time({q:g}, '
        f'{usage}{_range(step_ms, steps)})) / {step_ms / 1000:g}, "q", "{key}", "", "")'
        for key, q in QUANTILES.items())
    return ("usage_whole" if whole else "usage", quantiles,
            len(pods) * len(QUANTILES) * (steps + 1))


def _rule_query(namespace: str, pods: Sequence[str], level: str, span_ms: int
                ) -> tuple[str, str, int]:
    """(what, PromQL, points) of the usage rate's quantiles over the recording rule's samples
    in the ``span_ms`` before the window's end, and how many it holds ("n")."""
    sel = f"{_selector([USAGE_RULE], namespace, pods, level)}[{span_ms}ms]"
    terms = [f'label_replace(max by (namespace, pod) (quantile_over_time({q:g}, {sel})), '
             f'"q", "{key}", "", "")' for key, q in QUANTILES.items()]
    terms.append(f'label_replace(min by (namespace, pod) (count_over_time({sel})), '
                 '"q", "n", "", "")')
    return ("usage_rule", " or ".join(terms),
            len(pods) * len(terms) * (span_ms // USAGE_RULE_MS + 1))


def _queries(namespace: str, pods: Sequence[str], step_ms: int, steps: int, level: str,
             shift_ms: int) -> list[tuple[str, str, int]]:
    """(what, PromQL, points) of a batch's counters' and edges' queries, to evaluate ``shift_ms`` after the
    window's end (Prometheus aligns a subquery's steps to multiples of the step: each
    selector looks back by as much)."""
    sub = _range(step_ms, steps)
    counters = _increase(_selector([AGENT_METRICS[k] for k in COUNTERS], namespace, pods, level),
                         step_ms, shift_ms)
    # timestamp() of a selector itself (of anything else it is the evaluation's time): one
    # term a metric, each named in the label "metric"
    edges = " or ".join(
        f'label_replace(label_replace({f} by (namespace, pod) ({f}_over_time(timestamp('
        f'{_selector([AGENT_METRICS[key]], namespace, pods, level)}{_offset(shift_ms)}){sub})),'
        f' "edge", "{f}", "", ""), "metric", "{key}", "", "")'
        for key in EDGES for f in ("min", "max"))
    n, steps = len(pods), steps + 1     # and one a series beyond, Prometheus's own
    return [("counters", "sum by (namespace, pod, metric, le) "
             f"(sum_over_time({counters}{sub}))", n * SERIES_PER_POD * steps),
            ("edges", edges, n * 2 * len(EDGES) * steps)]


def _whole_queries(namespace: str, pods: Sequence[str], step_ms: int, steps: int, level: str,
                   shift_ms: int) -> list[tuple[str, str, int]]:
    """(what, PromQL, points) of the queries for pods whose series span the window without a
    reset (:func:`_ends_queries` says which): their counters at the window's end and, apart,
    at its start (:func:`_whole_counters` takes one from the other: the steps' increases
    summed, without a step's work), with no reset to handle (their usage:
    :func:`_usage_query`). Apart, not in one query: Prometheus reads the index of every block
    between a query's earliest and latest selector, a week's 84 blocks for two instants
    (benchmarks/prometheus_week.py); alone, each instant reads its own block's."""
    sel = _selector([AGENT_METRICS[k] for k in COUNTERS], namespace, pods, level)

    def named(offset_ms: int) -> str:
        return f'label_replace({sel}{_offset(offset_ms)}, "metric", "$1", "__name__", "(.+)")'
    n = len(pods)
    return [("counters_end", named(shift_ms), n * SERIES_PER_POD),
            ("counters_start", named(shift_ms + steps * step_ms), n * SERIES_PER_POD)]


def _whole_counters(ends: Answer, starts: Answer) -> Answer:
    """Each series' counter at the window's end less at its start, for the series both
    instants hold (as PromQL's ``a - b`` matches them: on every label but the name)."""
    def key(labels: dict[str, str]) -> frozenset[tuple[str, str]]:
        return frozenset((k, v) for k, v in labels.items() if k != "__name__")
    before = {key(labels): value for labels, value in starts}
    return [(labels, value - before[k]) for labels, value in ends
            if (k := key(labels)) in before]


def _ends_queries(namespace: str, pods: Sequence[str], step_ms: int, steps: int, level: str,
                  shift_ms: int) -> list[tuple[str, str, int]]:
    """(what, PromQL, points) of the two queries saying, for each pod, whether its series span
    the window without a reset: the time of the sample of each of :data:`EDGES` at the
    window's start and at its first step, and at its end with the agent's ``start_time`` gauge
    there (each a selector's, as a step takes it): instants only. Two queries, one a side of
    the window: a query reads the index of every block between its earliest and latest
    selector (:func:`_whole_queries`)."""
    def edge(key: str, name: str, at: int) -> str:
        return (f'label_replace(label_replace(timestamp('
                f'{_selector([AGENT_METRICS[key]], namespace, pods, level)}{_offset(at)}), '
                f'"edge", "{name}", "", ""), "metric", "{key}", "", "")')
    since = _selector([AGENT_METRICS["start_time"]], namespace, pods, level)
    starts = [edge(key, name, at) for key in EDGES
              for name, at in (("start", shift_ms + steps * step_ms),
                               ("first", shift_ms + (steps - 1) * step_ms))]
    ends = [edge(key, "last", shift_ms) for key in EDGES]
    ends.append(f'label_replace(max by (namespace, pod) ({since}{_offset(shift_ms)}), '
                '"edge", "since", "", "")')
    return [("ends_start", " or ".join(starts), len(pods) * len(starts)),
            ("ends_end", " or ".join(ends), len(pods) * len(ends))]


def _resets_query(namespace: str, pods: Sequence[str], step_ms: int, steps: int, level: str,
                  shift_ms: int) -> tuple[str, str, int]:
    """(what, PromQL, points) of the resets of each pod's counters (:data:`RESET_WITNESSES`)
    over the raw samples the steps take, for pods the ``start_time`` gauge does not answer
    for (evaluated a series at a time; ``points`` counts them at the shipped 15 s scrape)."""
    span = steps * step_ms + LOOKBACK_MS
    resets = " or ".join(
        f'label_replace(resets({_selector([AGENT_METRICS[key]], namespace, pods, level)[:-1]}'
        f'{extra}}}[{span}ms]{_offset(shift_ms)}), "metric", "{key}", "", "")'
        for key, extra in RESET_WITNESSES)
    return ("resets", f'label_replace(max by (namespace, pod) ({resets}), "edge", "resets", '
            '"", "")', len(pods) * len(RESET_WITNESSES) * math.ceil(span / 15_000))


def _whole(answer: Answer) -> tuple[set[str], dict[str, PodTotals], set[str]]:
    """From the ends query's answer (and the resets query's, if asked): the pods spanning
    the window without a reset, each such pod's edges (first and last sample's time, the
    metrics seen), and the pods whose series span it but whose resets are not known yet
    (no ``start_time`` gauge: the resets query says)."""
    ends: dict[str, dict[str, dict[str, float]]] = {}
    for labels, value in answer:
        ends.setdefault(labels.get("pod", ""), {}).setdefault(
            labels.get("metric", ""), {})[labels.get("edge", "")] = value
    whole, edges, unsure = set(), {}, set()
    for pod, by in ends.items():
        seen = {key: e for key, e in by.items() if key in EDGES}
        if not seen or not all({"start", "first", "last"} <= e.keys() for e in seen.values()):
            continue
        said = by.get("", {})
        if "since" in said:   # the counters' run began before the start's sample: no reset
            spans = said["since"] + SINCE_MARGIN_S <= min(e["start"] for e in seen.values())
        elif "resets" in said:
            spans = said["resets"] <= 0
        else:
            unsure.add(pod)
            continue
        if spans:
            whole.add(pod)
            edges[pod] = PodTotals(first_s=min(e["first"] for e in seen.values()),
                                   last_s=max(e["last"] for e in seen.values()),
                                   seen=set(seen))
    return whole, edges, unsure


def _fold(totals: Totals, what: str, answer: list[tuple[dict[str, str], float]]) -> None:
    keys = {name: key for key, name in AGENT_METRICS.items()}
    for labels, value in answer:
        pod = totals.pods.setdefault((labels.get("namespace", ""), labels.get("pod", "")),
                                     PodTotals())
        if what == "counters":
            key = keys.get(labels.get("metric", ""))
            if key == "wait_bucket":
                le = float(labels.get("le", "+Inf"))
                pod.buckets[le] = pod.buckets.get(le, 0.0) + value
            elif key is not None:
                pod.counters[key] = pod.counters.get(key, 0.0) + value
        elif what in ("usage", "usage_whole"):
            pod.usage[labels.get("q", "")] = value
        else:
            pod.seen.add(labels.get("metric", ""))
            if labels.get("edge") == "min":
                pod.first_s = value if pod.first_s is None else min(pod.first_s, value)
            else:
                pod.last_s = value if pod.last_s is None else max(pod.last_s, value)


def _batches(pods: Sequence[str], steps: int) -> Iterator[list[str]]:
    by_points = max(1, POINTS_PER_QUERY // (SERIES_PER_POD * steps))
    size = max(1, min(SERIES_PER_QUERY // SERIES_PER_POD, by_points))
    for i in range(0, len(pods), size):
        yield list(pods[i:i + size])


Answer = list[tuple[dict[str, str], float]]


def _ask(prometheus: Prometheus, totals: Totals, namespace: str, pods: list[str],
         what: str) -> list[tuple[str, str, int, Answer]]:
    """The batch's query ``what`` (what, query, points, answer); refused for its size, asked
    again for each half of the pods."""
    args = (namespace, pods, totals.step_ms, totals.steps, totals.level, totals.shift_ms)
    usage = what in ("usage", "usage_whole")
    candidates = ([_usage_query(namespace, pods, totals.level, totals.usage_step_ms,
                                totals.usage_steps, totals.usage_shift_ms,
                                what == "usage_whole")] if usage else
                  [_rule_query(namespace, pods, totals.level,
                               totals.usage_steps * totals.usage_step_ms)]
                  if what == "usage_rule" else
                  [*_queries(*args), *_whole_queries(*args), *_ends_queries(*args),
                   _resets_query(*args)])
    (query, points), = [(q, n) for w, q, n in candidates if w == what]
    shift_ms = (totals.usage_shift_ms if usage else 0 if what == "usage_rule"
                else totals.shift_ms)
    try:
        return [(what, query, points, prometheus.query(query, totals.end + shift_ms / 1000))]
    except PrometheusRefused as exc:
        if not exc.too_large:
            raise
        if len(pods) == 1:
            raise PrometheusError(
                f"Prometheus at {prometheus.where} refused the query for one pod "
                f"({namespace}/{pods[0]}, {totals.steps} steps of {totals.step_s:g} s): "
                f"{exc.error}; narrow --since") from None
    half = len(pods) // 2
    return (_ask(prometheus, totals, namespace, pods[:half], what)
            + _ask(prometheus, totals, namespace, pods[half:], what))


def _match(level: str, namespace: str | None) -> str:
    names = "|".join(AGENT_METRICS[key] for key in EDGES)
    return (f'{{__name__=~"{names}",level="{level}"'
            + ("" if namespace is None else f',namespace="{_quote(namespace)}"') + "}")


def window(since_s: float, at: float, min_step_s: int = MIN_STEP_S) -> tuple[int, int, float]:
    """(step in ms, steps, end) of the window of ``since_s`` to ``at``: ``end`` is ``at`` to
    the millisecond; as many steps as :func:`step_for`'s make ``since_s``, each as long as
    makes them ``since_s`` (to the millisecond: a window shorter than a step is one)."""
    steps = max(1, math.ceil(since_s / step_for(since_s, min_step_s)))
    return max(1, round(since_s * 1000 / steps)), steps, round(at, 3)


def pods_seen(prometheus: Prometheus, namespace: str | None, since_s: float, at: float,
              min_step_s: int = MIN_STEP_S, level: str = "pod") -> set[tuple[str, str]]:
    """(namespace, pod) of every pod the agents' ``periods`` counter or ``no_quota`` gauge
    names in the window (the series API: the index, no sample read)."""
    step_ms, steps, end = window(since_s, at, min_step_s)
    return {(s.get("namespace", ""), s.get("pod", "")) for s in prometheus.series(
        _match(level, namespace), end - steps * step_ms / 1000, end)}


def _fold_rule(totals: Totals, answer: Answer) -> None:
    """The rule's quantiles of each pod whose series holds :data:`RULE_COVER` of the window's
    evaluations at least."""
    need = RULE_COVER * totals.usage_steps * totals.usage_step_ms / USAGE_RULE_MS
    found: dict[tuple[str, str], dict[str, float]] = {}
    for labels, value in answer:
        found.setdefault((labels.get("namespace", ""), labels.get("pod", "")),
                         {})[labels.get("q", "")] = value
    for key, got in found.items():
        if got.get("n", 0.0) >= need and all(q in got for q in QUANTILES):
            pod = totals.pods.setdefault(key, PodTotals())
            pod.usage, pod.usage_rule = {q: got[q] for q in QUANTILES}, True


def _asked(pool: ThreadPoolExecutor, prometheus: Prometheus, totals: Totals,
           jobs: list[tuple[str, list[str], str]]) -> None:
    """Each job's query (namespace, pods, what) asked and its answer folded into ``totals``."""
    ends: Answer = []   # a batch's counters at the window's end, until its start's are in
    for (_, _, what), answers in zip(jobs, pool.map(
            lambda job: _ask(prometheus, totals, *job), jobs)):
        got = [a for *_, answer in answers for a in answer]
        totals.asked += [(query, points) for _, query, points, _ in answers]
        if what == "counters_end":
            ends = got
        elif what == "counters_start":   # the job after its batch's end
            _fold(totals, "counters", _whole_counters(ends, got))
            ends = []
        elif what == "usage_rule":
            _fold_rule(totals, got)
        else:
            _fold(totals, what, got)


def pod_totals(prometheus: Prometheus, pods: Iterable[tuple[str, str]], since_s: float,
               at: float, min_step_s: int = MIN_STEP_S, level: str = "pod") -> Totals:
    """The figures of each of ``pods`` (namespace, pod) the agents' counters give in the
    ``since_s`` to ``at``, at the step :func:`step_for` (the window: :func:`window`)."""
    step_ms, steps, end = window(since_s, at, min_step_s)
    totals = Totals(step_ms, steps, end, {}, level=level)
    by_ns: dict[str, list[str]] = {}
    for ns, pod in sorted(set(pods)):
        by_ns.setdefault(ns, []).append(pod)
    batches = [(ns, batch) for ns, names in by_ns.items() for batch in _batches(names, steps)]
    workers = max(1, min(QUERY_WORKERS, len(batches)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        # which pods span the window without a reset: theirs are the cheap queries
        jobs: list[tuple[str, list[str], str]] = []
        usage: list[tuple[str, list[str], str]] = []
        for (ns, batch), answers in zip(batches, pool.map(
                lambda b: [*_ask(prometheus, totals, b[0], b[1], "ends_start"),
                           *_ask(prometheus, totals, b[0], b[1], "ends_end")], batches)):
            answer = [a for *_, got in answers for a in got]
            totals.asked += [(query, points) for _, query, points, _ in answers]
            whole, edges, unsure = _whole(answer)
            if unsure:   # no start_time gauge: their resets over the window's samples
                asked = _ask(prometheus, totals, ns, sorted(unsure), "resets")
                totals.asked += [(query, points) for _, query, points, _ in asked]
                whole, edges, _ = _whole(answer + [a for *_, got in asked for a in got])
            for pod, found in edges.items():
                totals.pods[(ns, pod)] = found
            rest = [p for p in batch if p not in whole]
            jobs += [(ns, sorted(whole), what) for what in ("counters_end", "counters_start")
                     if whole]
            jobs += [(ns, rest, what) for what in ("counters", "edges") if rest]
            usage += [(ns, pods, what) for pods, what in ((sorted(whole), "usage_whole"),
                                                         (rest, "usage")) if pods]
        if totals.rule_window:   # the recording rule's first, the rest at the step after
            _asked(pool, prometheus, totals, jobs + [(ns, b, "usage_rule") for ns, b in batches])
            usage = [(ns, left, what) for ns, pods, what in usage
                     if (left := [p for p in pods if not totals.pods.get(
                         (ns, p), PodTotals()).usage_rule])]
            jobs = []
        _asked(pool, prometheus, totals, jobs + usage)
    return totals
