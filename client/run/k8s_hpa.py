"""The HorizontalPodAutoscaler (``autoscaling/v2``) that scales a workload: :func:`hpa_for`
(pure, on the API's JSON) and :func:`read_hpa` (the API). Its rule is read from that JSON by
``client.analysis.hpa.rule_of``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from client.run.k8s_workloads import WorkloadError, WorkloadRef

__all__ = ["hpa_for", "list_hpas", "read_hpa"]

Obj = dict[str, Any]


def hpa_for(ref: WorkloadRef, hpas: Iterable[Obj]) -> Obj | None:
    """The HPA whose ``scaleTargetRef`` is the workload (None: none)."""
    for hpa in hpas:
        target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        namespace = (hpa.get("metadata") or {}).get("namespace")
        if (namespace == ref.namespace and target.get("kind") == ref.kind
                and target.get("name") == ref.name):
            return hpa
    return None


def list_hpas(namespace: str | None, api: Any = None) -> list[Obj]:
    """The HPAs (``autoscaling/v2``'s JSON) of ``namespace`` (None: every namespace), read as
    ``cluster`` reads the workloads (``get_json``, no models); ``WorkloadError`` (one line)
    when they cannot be."""
    from client.run.kube_api import REQUEST_TIMEOUT, api_problem, connect_as

    api = api or connect_as(WorkloadError)
    where = "" if namespace is None else f"/namespaces/{namespace}"
    try:
        listed = api.get_json(f"/apis/autoscaling/v2{where}/horizontalpodautoscalers",
                              REQUEST_TIMEOUT)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:   # the API serves no autoscaling/v2: none
            return []
        raise WorkloadError(api_problem(exc, "list", "horizontalpodautoscalers",
                                        namespace or "(all)", "", api.server)) from None
    return list((listed if isinstance(listed, dict) else {}).get("items") or [])


def read_hpa(ref: WorkloadRef) -> tuple[str, Obj] | None:
    """The workload's HPA from the API (its name and JSON; None: none scales it)."""
    from client.run.kube_api import api_problem, connect_as

    api = connect_as(WorkloadError)
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
    return f"{meta.get('namespace')}/{meta.get('name')}", found
