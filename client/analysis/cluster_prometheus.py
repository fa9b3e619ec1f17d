"""``cluster --prometheus``: a workload's row from the node agent's counters as Prometheus kept
them (pure, no I/O; the figures come from ``client.run.prometheus_query``, which Prometheus
evaluates at a step fitting the window).

Prometheus keeps the agent's counters for as long as it retains them, so a row can cover
days; but only at its scrapes, and asked at the step. What that gives exactly:

- periods, periods throttled, throttled time: each pod's counter at the window's end less at
  its start (each the last scrape at or before it; a counter reset adds what followed it);
- usage p95 (krr's simple strategy) and VPA's rule, on each pod's usage rate per step (krr's
  rule with its step), the highest pod's (as krr takes it);
- a throttled period's wait p99, from the increase of the agent's wait histogram's buckets
  (interpolated within a bucket as ``histogram_quantile`` does).
- none of these throttling figures for a workload whose pods' groups have no quota (the
  agent's ``no_quota`` gauge, and no counter of periods): the row says why, listed apart.

What needs each period (the added delay for a random arrival, the replay at another limit:
the recommended limit and its predicted delay) is left out and the row says why: a step of a
minute cannot see a 100 ms period. Or, when the agents' per-period windows cover what
Prometheus saw of each pod, taken from them (:func:`combined`), each figure naming its source.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping, Sequence

from client.analysis.cluster import KRR, VPA, ClusterRow, PodWindow, WorkloadLimits, no_quota
from client.run.prometheus_query import USAGE_RULE, USAGE_RULE_MS, PodTotals, Totals

__all__ = ["FROM_AGENTS", "LEFT_OUT", "NOT_IN_PROMETHEUS", "bucket_quantile", "combined",
           "covers", "departed_pods", "prometheus_row", "resolution", "sources"]

LEFT_OUT = ("added delay p99 now, the recommended limit and its predicted delay: left out, "
            "they need per-period data, which Prometheus does not keep (the agents' "
            "windows do: a --since within them, without --prometheus)")
NOT_IN_PROMETHEUS = "not in Prometheus"


def _rule_words(rule_pods: int, pods: int) -> str:
    return (f"{USAGE_RULE}'s {USAGE_RULE_MS // 1000} s rates"
            + ("" if rule_pods >= pods else f" for {rule_pods} of the {pods} pods"))


def resolution(step_s: float, usage_step_s: float | None = None, rule_pods: int = 0,
               pods: int = 0) -> str:
    """What a step of ``step_s`` (the usage quantiles': ``usage_step_s``; of ``pods``,
    ``rule_pods`` had the recording rule's) lets the figures see, one clause."""
    usage_s = step_s if usage_step_s is None else usage_step_s
    if rule_pods and rule_pods >= pods:
        usage_s = USAGE_RULE_MS / 1000
    return (f"Prometheus at {step_s:g} s steps"
            + ("" if usage_s == step_s else f", its usage quantiles at {usage_s:g} s")
            + (f" (the recording rule {_rule_words(rule_pods, pods)})" if rule_pods else "")
            + ": usage is each " + ("" if usage_s == step_s else f"{usage_s:g} s ")
            + "step's average, which cannot see a period of 100 ms")


def sources(step_s: float, rule_pods: int = 0, pods: int = 0) -> tuple[tuple[str, str], ...]:
    """Each figure's source at a usage quantiles' step of ``step_s`` (of ``pods``,
    ``rule_pods`` had the recording rule's rates)."""
    per = (f"per {USAGE_RULE_MS // 1000} s step (the recording rule "
           f"{_rule_words(rule_pods, pods)}"
           + ("" if rule_pods >= pods else f", the others' per {step_s:g} s step") + ")"
           if rule_pods else f"per {step_s:g} s step")
    return (
        ("periods", "the node agent's cpu.stat counters in Prometheus: each pod's counter at "
         "the window's end less at its start"),
        ("usage_p95_cpus", f"{KRR.words}, on each pod's usage rate {per} in "
         "Prometheus, the highest pod's"),
        ("vpa_cpus", f"{VPA.words}, on the same rates"),
        ("throttled_period_wait_p99_ms", "the agent's wait histogram in Prometheus: its "
         "buckets' increase over the window"),
        ("added_delay", LEFT_OUT), ("recommended_cpus", LEFT_OUT),
    )


def bucket_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """The ``q`` quantile of a histogram's cumulative buckets (upper bound -> count), as
    Prometheus's ``histogram_quantile``: linear within the bucket holding it; the highest
    finite bound when it falls in +Inf; None with no observation."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if le == float("inf"):
                return lower
            if count == below:
                return le
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    return lower


_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"   # the alphabet of generated names (rand.SafeEncodeString)
_NAMES = {"Deployment": rf"-{_SAFE}{{1,10}}-{_SAFE}{{5}}",   # NAME-<template hash>-<5>
          "DaemonSet": rf"-{_SAFE}{{5}}", "StatefulSet": r"-\d+"}


def departed_pods(workloads: Sequence[tuple[str, str, str]], current: Sequence[tuple[str, str]],
                  found: Collection[tuple[str, str]]) -> list[list[str]]:
    """For each workload (namespace, kind, name), the pods Prometheus saw that the API lists
    no more (``current``: every pod listed now), by the names their controller gives them;
    a name two workloads could have given is neither's."""
    now = set(current)
    claims: dict[tuple[str, str], list[int]] = {}
    for i, (ns, kind, name) in enumerate(workloads):
        pattern = re.compile(re.escape(name) + _NAMES[kind])
        for key in found:
            if key[0] == ns and key not in now and pattern.fullmatch(key[1]):
                claims.setdefault(key, []).append(i)
    out: list[list[str]] = [[] for _ in workloads]
    for (ns, pod), owners in sorted(claims.items()):
        if len(owners) == 1:
            out[owners[0]].append(pod)
    return out


def _summed(pods: Sequence[PodTotals], key: str) -> float:
    return sum(p.total(key) for p in pods)


def prometheus_row(workload: WorkloadLimits, namespace: str, pod_names: Sequence[str],
                   totals: Totals, departed: Sequence[str] = ()) -> ClusterRow:
    """The workload's row from its pods' figures (``totals``), the pods listed now and those
    that left in the window (``departed``); a pod listed now without any is a line of
    ``missing``, a workload without any says "not in Prometheus"."""
    found = totals.pods
    pods = [found[(namespace, p)] for p in (*pod_names, *departed) if (namespace, p) in found]
    missing = tuple(f"{namespace}/{p}: {NOT_IN_PROMETHEUS} (no series of the node agent's "
                    "counters in the window)" for p in pod_names if (namespace, p) not in found)
    said = sources(totals.usage_step_s, sum(p.usage_rule for p in pods),
                   sum(bool(p.usage) for p in pods))
    if not pods:
        return ClusterRow(workload.workload, workload.limit_cpus, workload.request_cpus, 0,
                          0.0, None, None, None, None, None, None, None, None, None,
                          (f"{NOT_IN_PROMETHEUS}: no series of the node agent's counters for "
                           "its pods in the window (is the agent scraped? "
                           "k8s/recorder/prometheus.yml)",), missing, sources=said)
    spans = [p.last_s - p.first_s for p in pods
             if p.first_s is not None and p.last_s is not None]
    p95 = [p.usage["p95"] for p in pods if "p95" in p.usage]
    p90 = [p.usage["p90"] for p in pods if "p90" in p.usage]
    buckets: dict[float, float] = {}
    for p in pods:
        for le, count in p.buckets.items():
            buckets[le] = buckets.get(le, 0.0) + count
    # a quota on some pod's group (the agent exports no_quota, and no counters, for a group
    # with none on it or above: exclusive CPUs under the static CPU manager, no limits.cpu)
    limited = workload.limit_cpus is not None and any(not p.no_quota for p in pods)
    throttled = round(_summed(pods, "throttled_periods"))
    wait = bucket_quantile(0.99, buckets) if limited and throttled else None
    notes = [LEFT_OUT]
    if departed:
        names = ", ".join(departed[:3]) + (", ..." if len(departed) > 3 else "")
        notes.append(f"{len(departed)} pod(s) that left in the window counted too, by their "
                     f"names in Prometheus: {names}")
    if not limited:
        notes.insert(0, no_quota(workload.limit_cpus))
    if wait is not None:
        observed = round(buckets.get(float("inf"), 0.0))
        coarse = round(_summed(pods, "coarse_periods"))
        notes.append(f"a throttled period waited p99 {1000 * wait:.1f} ms (the agent's wait "
                     f"histogram: {observed} periods"
                     + (f", {coarse} of them read at the idle rate: their wait is their "
                        "interval's average)" if coarse else ")"))
    return ClusterRow(
        workload.workload, workload.limit_cpus, workload.request_cpus, len(pods), sum(spans),
        max(p95) * KRR.margin if p95 else None, max(p90) * VPA.margin if p90 else None,
        round(_summed(pods, "periods")) if limited else None,
        throttled if limited else None,
        1000 * _summed(pods, "throttled_seconds") if limited else None,
        None, None, None, None, tuple(notes), missing,
        wait_p99_ms=None if wait is None else 1000 * wait, sources=said,
        no_quota=None if limited else no_quota(workload.limit_cpus))


FROM_AGENTS = ("the agents' per-period windows (through pods/proxy), which cover what "
               "Prometheus saw of each pod: the record's throttles, and the replay at the limit")


def covers(windows: Sequence[PodWindow], namespace: str, pod_names: Sequence[str],
           totals: Totals, slack_s: float = 5.0) -> str | None:
    """None when each of the pods Prometheus saw has an agent window from its first sample
    there (within ``slack_s``, or a step: what the first sample's time is known to), else
    why not (one line)."""
    by_name = {w.pod: w for w in windows}
    slack_s = max(slack_s, totals.step_s)
    for pod in pod_names:
        ns, seen = namespace, totals.pods.get((namespace, pod))
        if seen is None or seen.first_s is None:
            continue
        first = seen.first_s
        window = by_name.get(pod)
        if window is None or window.start_epoch_ns is None:
            return f"the agents have no window of {ns}/{pod}"
        if window.start_epoch_ns / 1e9 > first + slack_s:
            late = window.start_epoch_ns / 1e9 - first
            return (f"the agents' window of {ns}/{pod} starts {late:.0f} s after Prometheus's "
                    "first sample of it")
    return None


def combined(prometheus: ClusterRow, agents: ClusterRow) -> ClusterRow:
    """``prometheus``'s row with what needs each period from ``agents`` (the same workload's
    row from the agents' windows): the added delay now, the recommended limit and its
    predicted delay; the sources say which came from where."""
    notes = tuple(n for n in prometheus.notes if n != LEFT_OUT) + tuple(
        n for n in agents.notes if n.startswith(("estimated: ", "replicas moved",
                                                 "no recommendation")))
    sources = tuple((k, v) for k, v in prometheus.sources
                    if k not in ("added_delay", "recommended_cpus"))
    return dataclasses.replace(
        prometheus, delay_p99_now_ms=agents.delay_p99_now_ms,
        recommended_cpus=agents.recommended_cpus,
        predicted_delay_p99_ms=agents.predicted_delay_p99_ms,
        predicted_periods_throttled=agents.predicted_periods_throttled, notes=notes,
        sources=(*sources, ("added_delay", FROM_AGENTS), ("recommended_cpus", FROM_AGENTS)))
