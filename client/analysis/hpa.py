"""The Horizontal Pod Autoscaler's rule, as Kubernetes' controller runs it (pure, no clock of
its own), and its run over a recorded window's CPU demand.

From ``pkg/controller/podautoscaler`` (kubernetes/kubernetes):

- **the replica count** (:func:`replica_count`: ``replica_calculator.go``'s
  ``GetResourceReplicas``, ``groupPods``; ``metrics/utilization.go``): the utilization is the
  ready pods' CPU over their requests, in whole percent (``int32(usage * 100 / requests)``);
  the ratio to the target within the tolerance (0.1) keeps the count; else
  ``ceil(ratio × ready pods)``. A pending or unready pod is ignored, a pod without metrics is
  missing. With missing pods, or ignored ones on a scale-up, the ratio is computed again with
  the missing as 100 % of their request on a scale-down and 0 % on a scale-up and the ignored
  as 0 %; a change the second ratio makes too small, or turns round, keeps the count.
- **the controller** (:class:`Controller`: ``horizontal.go``'s ``reconcileAutoscaler``): a
  count above ``max`` or below ``min`` goes to it; else the recommendation is stabilized and
  normalized. Without ``behavior`` (``normalizeDesiredReplicas``): the highest
  recommendation of the last 300 s (``--horizontal-pod-autoscaler-downscale-stabilization``),
  then at most ``max(2 × current, 4)`` (``scaleUpLimitFactor``, ``scaleUpLimitMinimum``) and
  within ``[min, max]``. With ``behavior`` (``normalizeDesiredReplicasWithBehaviors``): the
  current count brought within the lowest recommendation of the scale-up window and the
  highest of the scale-down window, then each direction's policies (``Pods``/``Percent`` per
  ``periodSeconds`` of the scale events, ``selectPolicy`` ``Max``, ``Min`` or ``Disabled``).
- the sync period is 15 s (``--horizontal-pod-autoscaler-sync-period``).
- a cluster's HPA (``autoscaling/v2``'s JSON) is read as its rule by :func:`rule_of`: a CPU
  utilization target only, ``behavior`` with the API server's defaults where unset.

:func:`run_hpa` runs it over a window: each sync, every ready replica's CPU over the metric's
window (:data:`METRIC_WINDOW_S`, metrics-server's resolution) is its share of the recorded
demand, at most the limit, in millicores rounded up as ``Quantity.MilliValue`` rounds; a new
replica serves and is counted once it is ready (``ready_after_s``), and its CPU is ignored
until a metric window has passed since (``groupPods``, within the CPU initialization period).
A scale-down removes the replicas not yet ready first, then the newest, as the ReplicaSet
controller ranks them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CPU_INITIALIZATION_S", "DOWNSCALE_WINDOW_S", "METRIC_WINDOW_S", "SYNC_S",
           "TOLERANCE", "Behavior", "Controller", "HpaError", "HpaRule", "HpaRun", "PodMetric",
           "Policy", "Replica", "ScalingRules", "replica_count", "rule_of", "run_hpa"]

SYNC_S = 15.0                 # --horizontal-pod-autoscaler-sync-period
TOLERANCE = 0.1               # --horizontal-pod-autoscaler-tolerance
DOWNSCALE_WINDOW_S = 300.0    # --horizontal-pod-autoscaler-downscale-stabilization
CPU_INITIALIZATION_S = 300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
METRIC_WINDOW_S = 15.0        # metrics-server's --metric-resolution: the usage's window
SCALE_UP_FACTOR, SCALE_UP_MINIMUM = 2.0, 4.0

READY, UNREADY, PENDING = "ready", "unready", "pending"


class HpaError(ValueError):
    """An HPA rule that cannot run; the message says why, in one line."""


@dataclass(frozen=True)
class PodMetric:
    """One pod as a sync sees it: its CPU request and usage (millicores; None: no metrics)
    and its state (``ready``; ``unready``: its CPU not counted yet; ``pending``)."""

    name: str
    request_m: int
    usage_m: int | None
    state: str = READY


def _utilization(metrics: dict[str, int], requests: dict[str, int], target_pct: int
                 ) -> tuple[float, int]:
    """``GetResourceUtilizationRatio``: (the ratio to the target, the whole percent)."""
    used = sum(v for name, v in metrics.items() if name in requests)
    asked = sum(requests[name] for name in metrics if name in requests)
    if asked <= 0:
        raise HpaError("the pods have no CPU request: the HPA's utilization is of the request")
    percent = used * 100 // asked
    return percent / target_pct, percent


def replica_count(current: int, pods: Sequence[PodMetric], target_pct: int,
                  tolerance: float = TOLERANCE) -> tuple[int, int]:
    """The replicas the CPU utilization asks for, and the utilization (whole percent):
    ``GetResourceReplicas`` (see the module docstring)."""
    if not pods:
        raise HpaError("no pods returned by selector while calculating replica count")
    ignored = {p.name for p in pods if p.state == PENDING}
    missing = {p.name for p in pods if p.name not in ignored and p.usage_m is None}
    ignored |= {p.name for p in pods if p.name not in missing and p.state == UNREADY}
    metrics = {p.name: p.usage_m for p in pods
               if p.name not in ignored and p.name not in missing and p.usage_m is not None}
    requests = {p.name: p.request_m for p in pods}
    if not metrics:
        raise HpaError("did not receive metrics for any ready pods")
    ratio, percent = _utilization(metrics, requests, target_pct)
    rebalance = bool(ignored) and ratio > 1.0
    if not rebalance and not missing:
        if abs(1.0 - ratio) <= tolerance:
            return current, percent
        return math.ceil(ratio * len(metrics)), percent
    if missing:
        if ratio < 1.0:
            metrics.update({name: requests[name] for name in missing})
        elif ratio > 1.0:
            metrics.update({name: 0 for name in missing})
    if rebalance:
        metrics.update({name: 0 for name in ignored})
    again, _ = _utilization(metrics, requests, target_pct)
    if (abs(1.0 - again) <= tolerance or (ratio < 1.0 < again) or (again < 1.0 < ratio)):
        return current, percent
    count = math.ceil(again * len(metrics))
    if (again < 1.0 and count > current) or (again > 1.0 and count < current):
        return current, percent
    return count, percent


@dataclass(frozen=True)
class Policy:
    """``HPAScalingPolicy``: ``kind`` Pods or Percent, ``value`` per ``period_s``."""

    kind: str
    value: int
    period_s: float


@dataclass(frozen=True)
class ScalingRules:
    """``HPAScalingRules``: the stabilization window, ``select`` (Max, Min, Disabled), the
    policies."""

    window_s: float
    select: str = "Max"
    policies: tuple[Policy, ...] = ()


def _default_up() -> ScalingRules:   # GenerateHPAScaleUpRules
    return ScalingRules(0.0, "Max", (Policy("Pods", 4, 15.0), Policy("Percent", 100, 15.0)))


def _default_down() -> ScalingRules:   # GenerateHPAScaleDownRules
    return ScalingRules(DOWNSCALE_WINDOW_S, "Max", (Policy("Percent", 100, 15.0),))


@dataclass(frozen=True)
class Behavior:
    """``spec.behavior`` with the API server's defaults filled in."""

    up: ScalingRules = field(default_factory=_default_up)
    down: ScalingRules = field(default_factory=_default_down)


@dataclass(frozen=True)
class HpaRule:
    """An HPA on CPU utilization: its target (whole percent of the request), ``min`` and
    ``max`` replicas, and the controller's settings."""

    target_pct: int
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = TOLERANCE
    sync_s: float = SYNC_S
    downscale_window_s: float = DOWNSCALE_WINDOW_S
    behavior: Behavior | None = None

    def problem(self) -> str | None:
        """Why the rule cannot run, in one line (None: it can)."""
        if self.target_pct < 1:
            return f"the HPA's target must be >= 1 % (got {self.target_pct})"
        if not 1 <= self.min_replicas <= self.max_replicas:
            return (f"the HPA needs 1 <= min <= max replicas (got min {self.min_replicas}, "
                    f"max {self.max_replicas})")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"target_cpu_utilization_pct": self.target_pct, "min": self.min_replicas,
                "max": self.max_replicas, "tolerance": self.tolerance, "sync_s": self.sync_s,
                "downscale_stabilization_s": self.downscale_window_s if self.behavior is None
                else self.behavior.down.window_s,
                "behavior": None if self.behavior is None else "as spec.behavior says"}


class Controller:
    """The controller's state for one HPA: its recommendations and scale events, on the
    clock the caller gives (seconds)."""

    def __init__(self, rule: HpaRule) -> None:
        self.rule = rule
        self.recommendations: list[tuple[float, int]] = []
        self.up_events: list[tuple[float, int]] = []
        self.down_events: list[tuple[float, int]] = []

    def sync(self, now: float, current: int, pods: Sequence[PodMetric]) -> tuple[int, int | None]:
        """The replicas after a sync at ``now`` with ``current`` replicas (and the
        utilization the metric gave; None: not asked)."""
        rule = self.rule
        if current > rule.max_replicas:
            desired, percent = rule.max_replicas, None
        elif current < rule.min_replicas:
            desired, percent = rule.min_replicas, None
        else:
            proposed, percent = replica_count(current, pods, rule.target_pct, rule.tolerance)
            desired = (self._normalize(now, current, proposed) if rule.behavior is None
                       else self._with_behavior(now, current, proposed, rule.behavior))
        if desired != current and rule.behavior is not None:
            events = self.up_events if desired > current else self.down_events
            events.append((now, abs(desired - current)))
        return desired, percent

    def _normalize(self, now: float, current: int, proposed: int) -> int:
        """``normalizeDesiredReplicas``: the highest recommendation within the window, then
        the scale-up limit and ``[min, max]``."""
        cutoff = now - self.rule.downscale_window_s
        kept = [(t, r) for t, r in self.recommendations if t >= cutoff]
        stabilized = max([proposed, *(r for _t, r in kept)])
        self.recommendations = [*kept, (now, proposed)]
        limit = int(max(SCALE_UP_FACTOR * current, SCALE_UP_MINIMUM))
        most = limit if self.rule.max_replicas > limit else self.rule.max_replicas
        return max(self.rule.min_replicas, min(most, stabilized))

    def _changed(self, events: list[tuple[float, int]], period_s: float, now: float) -> int:
        return sum(n for t, n in events if t > now - period_s)

    def _with_behavior(self, now: float, current: int, proposed: int,
                       behavior: Behavior) -> int:
        """``normalizeDesiredReplicasWithBehaviors``: stabilize, then the policies' rate."""
        up_cut, down_cut = now - behavior.up.window_s, now - behavior.down.window_s
        up = min([proposed, *(r for t, r in self.recommendations if t > up_cut)])
        down = max([proposed, *(r for t, r in self.recommendations if t > down_cut)])
        keep = max(behavior.up.window_s, behavior.down.window_s)
        self.recommendations = [(t, r) for t, r in self.recommendations if t > now - keep]
        self.recommendations.append((now, proposed))
        desired = min(max(current, up), down)
        rule = self.rule
        if desired > current:
            limit = max(current, self._limit(current, now, behavior.up, up=True))
            most = min(rule.max_replicas, limit)
            return min(desired, most)
        if desired < current:
            limit = min(current, self._limit(current, now, behavior.down, up=False))
            least = max(rule.min_replicas, limit)
            return max(desired, least)
        return desired

    def _limit(self, current: int, now: float, rules: ScalingRules, *, up: bool) -> int:
        """``calculateScaleUpLimitWithScalingRules`` / ``...ScaleDownLimitWithBehaviors``."""
        if rules.select == "Disabled":
            return current
        widest = (max if up else min) if rules.select != "Min" else (min if up else max)
        proposals = []
        for policy in rules.policies:
            start = (current - self._changed(self.up_events, policy.period_s, now)
                     + self._changed(self.down_events, policy.period_s, now))
            if policy.kind == "Pods":
                proposals.append(start + policy.value if up else start - policy.value)
            elif up:
                proposals.append(math.ceil(start * (1 + policy.value / 100)))
            else:
                proposals.append(int(start * (1 - policy.value / 100)))
        return widest(proposals) if proposals else current


@dataclass(frozen=True)
class Replica:
    """One replica of the run: when it was made and was ready, and removed (seconds from the
    window's start; None: not removed)."""

    made_s: float
    ready_s: float
    removed_s: float | None = None

    def serves(self, t: float) -> bool:
        return self.ready_s <= t and (self.removed_s is None or t < self.removed_s)


@dataclass(frozen=True)
class HpaRun:
    """What the HPA did over the window: its syncs (time, replicas after, ready then, the
    utilization it read), and every replica."""

    rule: HpaRule
    syncs: tuple[tuple[float, int, int, int | None], ...]
    replicas: tuple[Replica, ...]
    window_s: float

    def ready_at(self, t: float) -> int:
        return sum(1 for r in self.replicas if r.serves(t))

    def per_minute(self) -> list[dict[str, Any]]:
        """Each minute of the window: the replicas at its end (made, not removed), the most
        in it, those ready at its end."""
        out = []
        for m in range(max(1, math.ceil(self.window_s / 60))):
            start, end = 60.0 * m, min(self.window_s, 60.0 * (m + 1))
            at_end = [n for t, n, _r, _u in self.syncs if t < end]
            within = [n for t, n, _r, _u in self.syncs if start <= t < end]
            out.append({"minute": m, "replicas": at_end[-1] if at_end else None,
                        "most": max(within) if within else None,
                        "ready_at_end": sum(1 for r in self.replicas
                                            if r.serves(end - 1e-9))})
        return out


def _share_m(rates: Sequence[tuple[float, float, float]], lo: float, hi: float,
             ready: Callable[[float], int], limit_cpus: float) -> int:
    """A ready replica's CPU over ``[lo, hi]``, millicores rounded up: in each row its share
    of the demand (CPUs), averaged over the time, at most the limit (the quota caps the
    average, not a row: a throttled group runs at full speed until its quota is spent)."""
    used = span = 0.0
    for start, end, cpus in rates:
        a, b = max(lo, start), min(hi, end)
        if b <= a:
            continue
        used += cpus / max(1, ready((a + b) / 2)) * (b - a)
        span += b - a
    return math.ceil(1000 * min(limit_cpus, used / span) - 1e-9) if span > 0 else 0


def run_hpa(rule: HpaRule, rates: Sequence[tuple[float, float, float]], window_s: float,
            limit_cpus: float, request_cpus: float, *, start_replicas: int | None = None,
            ready_after_s: float = 30.0, metric_window_s: float = METRIC_WINDOW_S) -> HpaRun:
    """The HPA over a window whose demand is ``rates`` (rows ``(start s, end s, CPUs)`` from
    the window's start): the replicas it runs (see the module docstring). It starts with
    ``start_replicas`` ready (None: ``min``) and syncs at 0, 15, 30... s."""
    if (problem := rule.problem()) is not None:
        raise HpaError(problem)
    if request_cpus <= 0:
        raise HpaError("the HPA's utilization is of the pod's CPU request: give one > 0")
    replicas = [Replica(-math.inf, -math.inf)
                for _ in range(start_replicas or rule.min_replicas)]
    controller = Controller(rule)
    syncs: list[tuple[float, int, int, int | None]] = []
    request_m = math.ceil(request_cpus * 1000 - 1e-9)

    def ready(t: float) -> int:
        return sum(1 for r in replicas if r.serves(t))

    t = 0.0
    while t < window_s:
        live = [i for i, r in enumerate(replicas) if r.removed_s is None]
        # the usage of the metric window before the sync (the first syncs read the window's
        # first one: the record has nothing before it)
        lo, hi = ((t - metric_window_s, t) if t >= metric_window_s
                  else (0.0, min(window_s, metric_window_s)))
        usage = _share_m(rates, lo, hi, ready, limit_cpus)
        pods = []
        for i in live:
            r = replicas[i]
            if r.ready_s > t:
                pods.append(PodMetric(f"pod-{i}", request_m, 0, UNREADY))   # serves nothing
            elif t < r.ready_s + metric_window_s and t < r.made_s + CPU_INITIALIZATION_S:
                pods.append(PodMetric(f"pod-{i}", request_m, usage, UNREADY))   # no window yet
            else:
                pods.append(PodMetric(f"pod-{i}", request_m, usage, READY))
        desired, percent = controller.sync(t, len(live), pods)
        if desired > len(live):
            replicas += [Replica(t, t + ready_after_s) for _ in range(desired - len(live))]
        elif desired < len(live):
            order = sorted(live, key=lambda i: (-replicas[i].ready_s, -i))
            for i in order[:len(live) - desired]:
                r = replicas[i]
                replicas[i] = Replica(r.made_s, r.ready_s, t)
        syncs.append((t, desired, ready(t), percent))
        t += rule.sync_s
    return HpaRun(rule, tuple(syncs), tuple(replicas), window_s)


def _rules(obj: dict[str, Any] | None, default: ScalingRules) -> ScalingRules:
    """``HPAScalingRules`` with the API server's defaults where unset."""
    if obj is None:
        return default
    policies = tuple(Policy(str(p.get("type")), int(p.get("value") or 0),
                            float(p.get("periodSeconds") or 0))
                     for p in obj.get("policies") or [])
    window = obj.get("stabilizationWindowSeconds")
    return ScalingRules(default.window_s if window is None else float(window),
                        str(obj.get("selectPolicy") or "Max"), policies or default.policies)


def rule_of(hpa: dict[str, Any]) -> HpaRule:
    """The rule of an ``autoscaling/v2`` HPA: its CPU utilization target, min and max, and
    its behavior; ``HpaError`` (one line) for a target on another metric."""
    meta, spec = hpa.get("metadata") or {}, hpa.get("spec") or {}
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    metrics = spec.get("metrics") or [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    cpu = []
    for metric in metrics:
        resource = metric.get("resource") or {}
        target = resource.get("target") or {}
        if (metric.get("type") == "Resource" and resource.get("name") == "cpu"
                and target.get("type") == "Utilization"):
            cpu.append(int(target.get("averageUtilization") or 0))
        else:
            what = (f"{metric.get('type')} {resource.get('name') or ''} "
                    f"{target.get('type') or ''}").split()
            raise HpaError(f"HPA {name} scales on {' '.join(what)}: only a CPU "
                                "utilization target (Resource cpu Utilization) is replayed")
    behavior = spec.get("behavior")
    return HpaRule(min(cpu), int(spec.get("minReplicas") or 1), int(spec.get("maxReplicas") or 1),
                   behavior=None if behavior is None else Behavior(
                       _rules(behavior.get("scaleUp"), Behavior().up),
                       _rules(behavior.get("scaleDown"),
                              ScalingRules(DOWNSCALE_WINDOW_S, "Max",
                                           Behavior().down.policies))))
