"""The Services that select a workload's pods, and whether they tell how requests are spread
over its replicas (``advise --passive --k8s ... --replicas``): :func:`selecting` and
:func:`spreading` (pure, on the API's JSON) and :func:`list_services` (the API, ``get_json``,
no models). One Service of a cluster IP without session affinity spreads as kube-proxy does;
none, a headless one, one with ``sessionAffinity: ClientIP`` or several do not say."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from client.run.k8s_workloads import WorkloadError, WorkloadRef

__all__ = ["Spreading", "list_services", "selecting", "selects", "spreading"]

Obj = Mapping[str, Any]


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a Service's ``spec.selector`` selects pods of ``labels`` (an empty or missing
    selector selects none: its endpoints are managed by hand)."""
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


def selecting(labels: Mapping[str, str], services: Iterable[Obj]) -> list[Obj]:
    """The Services whose selector selects pods of ``labels``, in the order listed."""
    return [s for s in services
            if selects((s.get("spec") or {}).get("selector"), labels)]


def _name(service: Obj) -> str:
    meta = service.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


@dataclass(frozen=True)
class Spreading:
    """What the Services say of the spread: ``service`` (NS/NAME) where one spreads as
    kube-proxy does, else ``unknown``: why not, a clause."""

    service: str | None
    unknown: str | None


def spreading(ref: WorkloadRef, labels: Mapping[str, str], services: Iterable[Obj]
              ) -> Spreading:
    """Whether the Services of the workload's namespace tell how its requests are spread."""
    found = selecting(labels, services)
    if not found:
        return Spreading(None, f"no Service in namespace {ref.namespace} selects the pods of "
                               f"{ref} (where its requests come from is not known)")
    if len(found) > 1:
        return Spreading(None, f"{len(found)} Services select the pods of {ref} ("
                               f"{', '.join(_name(s) for s in found)}): which carries the "
                               "load, and how, is not known")
    (service,) = found
    spec = service.get("spec") or {}
    if spec.get("clusterIP") == "None":
        return Spreading(None, f"Service {_name(service)} is headless (clusterIP: None): "
                               "clients pick pods from DNS, not kube-proxy")
    if spec.get("sessionAffinity") == "ClientIP":
        return Spreading(None, f"Service {_name(service)} has sessionAffinity: ClientIP "
                               "(each client stays on one pod): the split depends on how "
                               "many clients there are")
    return Spreading(_name(service), None)


def list_services(namespace: str, api: Any = None) -> list[Obj]:
    """The Services (``v1`` JSON) of ``namespace``; ``WorkloadError`` (one line, naming the
    permission on 403) when they cannot be read."""
    from client.run.kube_api import REQUEST_TIMEOUT, api_problem, connect_as

    api = api or connect_as(WorkloadError)
    try:
        listed = api.get_json(f"/api/v1/namespaces/{namespace}/services", REQUEST_TIMEOUT)
    except ValueError:
        raise WorkloadError(f"the API server at {api.server} sent a list of services that "
                            "is not JSON") from None
    except Exception as exc:
        raise WorkloadError(api_problem(exc, "list", "services", namespace, "",
                                        api.server)) from None
    return list((listed if isinstance(listed, dict) else {}).get("items") or [])
