"""The HorizontalPodAutoscaler (``autoscaling/v2``) that scales a workload, read as the rule
``client.analysis.hpa`` replays: :func:`rule_of` (pure, on the API's JSON) and
:func:`read_hpa` (the API). Only a CPU utilization target is replayed; any other metric is
one line."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from client.analysis.hpa import DOWNSCALE_WINDOW_S, Behavior, HpaRule, Policy, ScalingRules
from client.run.k8s_workloads import WorkloadError, WorkloadRef

__all__ = ["hpa_for", "read_hpa", "rule_of"]

Obj = dict[str, Any]


def _rules(obj: Obj | None, default: ScalingRules) -> ScalingRules:
    """``HPAScalingRules`` with the API server's defaults where unset."""
    if obj is None:
        return default
    policies = tuple(Policy(str(p.get("type")), int(p.get("value") or 0),
                            float(p.get("periodSeconds") or 0))
                     for p in obj.get("policies") or [])
    window = obj.get("stabilizationWindowSeconds")
    return ScalingRules(default.window_s if window is None else float(window),
                        str(obj.get("selectPolicy") or "Max"), policies or default.policies)


def rule_of(hpa: Obj) -> HpaRule:
    """The rule of an ``autoscaling/v2`` HPA: its CPU utilization target, min and max, and
    its behavior; ``WorkloadError`` (one line) for a target on another metric."""
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
            raise WorkloadError(f"HPA {name} scales on {' '.join(what)}: only a CPU "
                                "utilization target (Resource cpu Utilization) is replayed")
    behavior = spec.get("behavior")
    return HpaRule(min(cpu), int(spec.get("minReplicas") or 1), int(spec.get("maxReplicas") or 1),
                   behavior=None if behavior is None else Behavior(
                       _rules(behavior.get("scaleUp"), Behavior().up),
                       _rules(behavior.get("scaleDown"),
                              ScalingRules(DOWNSCALE_WINDOW_S, "Max",
                                           Behavior().down.policies))))


def hpa_for(ref: WorkloadRef, hpas: Iterable[Obj]) -> Obj | None:
    """The HPA whose ``scaleTargetRef`` is the workload (None: none)."""
    for hpa in hpas:
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        namespace = (hpa.get("metadata") or {}).get("namespace")
        if (namespace == ref.namespace and target.get("kind") == ref.kind
                and target.get("name") == ref.name):
            return hpa
    return None


def read_hpa(ref: WorkloadRef) -> tuple[str, HpaRule] | None:
    """The workload's HPA from the API (its name and rule; None: none scales it)."""
    from client.run.k8s_workloads import _connect
    from client.run.kube_api import api_problem

    api = _connect()
    try:
        from kubernetes import client

        listed = client.AutoscalingV2Api(api.core.api_client).\
            list_namespaced_horizontal_pod_autoscaler(ref.namespace, _request_timeout=10)
    except Exception as exc:
        raise WorkloadError(api_problem(exc, "list", "horizontalpodautoscalers",
                                        ref.namespace, "", api.server)) from None
    found = hpa_for(ref, api.to_json(listed).get("items") or [])
    if found is None:
        return None
    meta = found.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}", rule_of(found)
