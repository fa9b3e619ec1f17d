"""A cluster's workloads as ``cluster`` and ``advise --k8s ... --passive`` read them, with the
official ``kubernetes`` client and the user's kubeconfig (``client.run.kube_api``): each
Deployment, StatefulSet and DaemonSet, its CPU limit and request (the pod template's, summed
over containers), and its pods by the owner chain (pod -> ReplicaSet -> Deployment; pod ->
StatefulSet or DaemonSet). Each pod's recorded window comes from its node's agent through the
API server's ``pods/proxy`` (``client.run.agent_timeline``): each node's agent found once and
asked once for all its pods' windows (``/windows``, streamed; an older agent a pod at a time),
every node at once.

The user needs ``list`` on pods, replicasets, deployments, statefulsets and daemonsets in the
namespaces read, and what ``import --timeline k8s:`` needs (k8s/recorder/user-rbac.yaml);
``advise --passive --replicas`` lists services too (``client.run.k8s_services``).
"""

from __future__ import annotations

import dataclasses
import queue
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from client.run.agent_timeline import (AgentTimelineError, OlderAgent, PodRef, agent_kube,
                                       agent_on_node)
from client.run.kube_api import METADATA_ONLY, KubeApi, api_problem, connect_as, REQUEST_TIMEOUT

__all__ = ["FETCH_WORKERS", "KINDS", "RECORD_LABEL", "Fetched", "PodInfo", "Workload",
           "WorkloadError", "WorkloadRef", "fetch_all_windows", "fetch_windows",
           "fold_pods", "limit_level", "list_workloads", "parse_workload_ref", "read_workload",
           "stream_all_windows", "workload_of"]

KINDS = {"deployment": "Deployment", "deploy": "Deployment", "deployments": "Deployment",
         "statefulset": "StatefulSet", "sts": "StatefulSet", "statefulsets": "StatefulSet",
         "daemonset": "DaemonSet", "ds": "DaemonSet", "daemonsets": "DaemonSet"}
RECORD_LABEL = ("throttle-lab/record", "true")   # the agent records pods with this label
FETCH_WORKERS = 8   # windows fetched at a time through the API server

Obj = Mapping[str, Any]   # an API object as its JSON (camelCase keys)


class WorkloadError(Exception):
    """The workload or its pods cannot be read; one line saying why and what to do."""


@dataclass(frozen=True)
class WorkloadRef:
    namespace: str
    kind: str          # Deployment, StatefulSet, DaemonSet
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind.lower()}/{self.name}"


@dataclass(frozen=True)
class PodInfo:
    name: str
    node: str
    recorded: bool     # labelled for the agent (throttle-lab/record=true)
    running: bool


@dataclass(frozen=True)
class Workload:
    """A workload, what its pod template asks, and its pods now."""

    ref: WorkloadRef
    limit_cpus: float | None     # the level that binds: the pod-level limit, or the containers'
    request_cpus: float | None   # sum (None: neither level has one)
    replicas: int | None         # spec.replicas (a DaemonSet: the pods it should run)
    pods: tuple[PodInfo, ...]
    limit_level: str | None = None   # "pod" (spec.resources) or "containers": which binds
    labels: tuple[tuple[str, str], ...] = ()   # the pod template's labels (Services select)


def parse_workload_ref(text: str) -> WorkloadRef:
    """``NS/KIND/NAME`` (deployment, statefulset, daemonset and their short names)."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts) or parts[1].lower() not in KINDS:
        raise WorkloadError(f"--k8s {text}: expected NAMESPACE/KIND/NAME, KIND one of "
                            "deployment, statefulset, daemonset")
    return WorkloadRef(parts[0], KINDS[parts[1].lower()], parts[2])


def _cpu(quantity: Any) -> float | None:
    from client.run.limiters.kubernetes import cpu_cores
    return cpu_cores(quantity)


def _template_cpus(workload: Obj, key: str) -> float | None:
    """The pod template's ``resources.<key>.cpu``: the pod-level one (``spec.resources``,
    KEP-2837: the kubelet puts it on the pod's group) where it is set and binds, else summed
    over its containers; None when neither level has one (a container without: then the pod's
    group has no quota of that size)."""
    pod_level = _pod_level_cpus(workload, key)
    containers = _containers_cpus(workload, key)
    if pod_level is None:
        return containers
    return pod_level if containers is None else min(pod_level, containers)


def _pod_level_cpus(workload: Obj, key: str) -> float | None:
    spec = (((workload.get("spec") or {}).get("template") or {}).get("spec") or {})
    return _cpu(((spec.get("resources") or {}).get(key) or {}).get("cpu"))


def _containers_cpus(workload: Obj, key: str) -> float | None:
    spec = (((workload.get("spec") or {}).get("template") or {}).get("spec") or {})
    total = 0.0
    for container in spec.get("containers") or []:
        value = _cpu(((container.get("resources") or {}).get(key) or {}).get("cpu"))
        if value is None:
            return None
        total += value
    return total


def limit_level(workload: Obj) -> str | None:
    """Which level of the pod template's CPU limit binds: ``"pod"`` (``spec.resources``, on
    the pod's group) or ``"containers"`` (their sum); None: no limit."""
    pod_level, containers = (_pod_level_cpus(workload, "limits"),
                             _containers_cpus(workload, "limits"))
    if pod_level is not None and (containers is None or pod_level <= containers):
        return "pod"
    return None if containers is None else "containers"


def workload_of(pod: Obj, replicaset_owner: Mapping[str, str]) -> tuple[str, str] | None:
    """(kind, name) of the workload that owns ``pod``: its ReplicaSet's Deployment (from
    ``replicaset_owner``: ReplicaSet name -> Deployment name), its StatefulSet or DaemonSet;
    None for a pod of none of them."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "ReplicaSet" and name in replicaset_owner:
            return "Deployment", replicaset_owner[name]
        if kind in ("StatefulSet", "DaemonSet"):
            return str(kind), name
    return None


def _pod_info(pod: Obj) -> PodInfo:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    return PodInfo(str(meta.get("name")), str(spec.get("nodeName") or ""),
                   labels.get(RECORD_LABEL[0]) == RECORD_LABEL[1],
                   status.get("phase") == "Running" and not meta.get("deletionTimestamp"))


def fold_pods(workloads: Iterable[Obj], kinds: Iterable[str], replicasets: Iterable[Obj],
              pods: Iterable[Obj]) -> list[Workload]:
    """Each workload (``workloads`` and ``kinds`` side by side) with its pods, by the owner
    chain; pure, on the API's JSON."""
    owner = {}
    for rs in replicasets:
        meta = rs.get("metadata") or {}
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "Deployment":
                owner[str(meta.get("name"))] = str(ref.get("name"))
    by_owner: dict[tuple[str, str, str], list[PodInfo]] = {}
    for pod in pods:
        found = workload_of(pod, owner)
        if found is not None:
            namespace = str((pod.get("metadata") or {}).get("namespace"))
            by_owner.setdefault((namespace, *found), []).append(_pod_info(pod))
    out = []
    for obj, kind in zip(workloads, kinds):
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        status = obj.get("status") or {}
        ref = WorkloadRef(str(meta.get("namespace")), kind, str(meta.get("name")))
        replicas = (status.get("desiredNumberScheduled") if kind == "DaemonSet"
                    else spec.get("replicas"))
        out.append(Workload(ref, _template_cpus(obj, "limits"), _template_cpus(obj, "requests"),
                            None if replicas is None else int(replicas),
                            tuple(sorted(by_owner.get((ref.namespace, kind, ref.name), []),
                                         key=lambda p: p.name)), limit_level(obj),
                            _template_labels(obj)))
    return out


def _template_labels(workload: Obj) -> tuple[tuple[str, str], ...]:
    meta = ((workload.get("spec") or {}).get("template") or {}).get("metadata") or {}
    return tuple(sorted((str(k), str(v)) for k, v in (meta.get("labels") or {}).items()))


LIST_PAGE = 250   # objects a list request asks for (the API's ``limit``; ``continue`` for more)


def _slim(obj: Obj) -> Obj:
    """What :func:`fold_pods` reads of a listed object, and nothing else: a list of 1,000 pods
    parsed whole held tens of MiB of fields no row uses (managedFields, status conditions)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    template = ((spec.get("template") or {}).get("spec") or {})
    template_labels = (((spec.get("template") or {}).get("metadata") or {}).get("labels")
                       or {})
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "labels": ({RECORD_LABEL[0]: labels[RECORD_LABEL[0]]}
                                    if RECORD_LABEL[0] in labels else {}),
                         "ownerReferences": [{"kind": r.get("kind"), "name": r.get("name")}
                                             for r in meta.get("ownerReferences") or []],
                         "deletionTimestamp": meta.get("deletionTimestamp")},
            "spec": {"nodeName": spec.get("nodeName"), "replicas": spec.get("replicas"),
                     "template": {"metadata": {"labels": template_labels}, "spec": {
                         "resources": template.get("resources"),
                         "containers": [{"resources": c.get("resources")}
                                        for c in template.get("containers") or []]}}},
            "status": {"phase": status.get("phase"),
                       "desiredNumberScheduled": status.get("desiredNumberScheduled")}}


def _listed(api: KubeApi, what: str, namespace: str | None,
            accept: str = "application/json") -> list[Obj]:
    """``list`` of pods, replicasets, deployments, statefulsets or daemonsets, as JSON, each
    object :func:`_slim`, :data:`LIST_PAGE` at a time (``accept``: as
    :meth:`KubeApi.get_json`'s)."""
    # the raw answer, parsed as JSON, through the client's ApiClient alone: neither the
    # client's models nor its API classes (whose import took most of a 1,000-workload list)
    group = "/api/v1" if what == "pods" else "/apis/apps/v1"
    where = "" if namespace is None else f"/namespaces/{namespace}"
    out: list[Obj] = []
    token = ""
    while True:
        query = urlencode({"limit": LIST_PAGE, **({"continue": token} if token else {})})
        try:
            listed = api.get_json(f"{group}{where}/{what}?{query}", REQUEST_TIMEOUT, accept)
        except ValueError:
            raise WorkloadError(f"the API server at {api.server} sent a list of {what} that "
                                "is not JSON") from None
        except Exception as exc:
            raise WorkloadError(api_problem(exc, "list", what, namespace or "(all)", "",
                                            api.server).replace(
                "(the Role in k8s/advise-rbac.yaml grants what advise needs)",
                "(cluster reads the workloads and their pods: list pods, replicasets, "
                "deployments, statefulsets, daemonsets)")) from None
        listed = listed if isinstance(listed, dict) else {}
        out += [_slim(obj) for obj in listed.get("items") or [] if isinstance(obj, dict)]
        token = str((listed.get("metadata") or {}).get("continue") or "")
        if not token:
            return out


WORKLOAD_KINDS = (("deployments", "Deployment"), ("statefulsets", "StatefulSet"),
                  ("daemonsets", "DaemonSet"))


def list_workloads(namespace: str | None, api: KubeApi | None = None) -> list[Workload]:
    """Every Deployment, StatefulSet and DaemonSet of ``namespace`` (None: all), with its
    pods: the five lists asked at once (each the API server's to answer, its time mostly
    the server's), the ReplicaSets as their metadata alone (only their owners are read)."""
    api = api or connect_as(WorkloadError)
    asked: list[tuple[str, str]] = [(what, "application/json") for what, _ in WORKLOAD_KINDS]
    asked += [("replicasets", METADATA_ONLY), ("pods", "application/json")]
    with ThreadPoolExecutor(max_workers=len(asked)) as pool:
        futures = [pool.submit(_listed, api, what, namespace, accept) for what, accept in asked]
        lists = [f.result() for f in futures]   # the first failure, in the order above
    objs: list[Obj] = []
    kinds: list[str] = []
    for (_, kind), found in zip(WORKLOAD_KINDS, lists):
        objs += found
        kinds += [kind] * len(found)
    return fold_pods(objs, kinds, lists[-2], lists[-1])


def read_workload(ref: WorkloadRef, api: KubeApi | None = None) -> Workload:
    """The one workload ``ref`` names; ``WorkloadError`` when there is none."""
    found = [w for w in list_workloads(ref.namespace, api) if w.ref == ref]
    if not found:
        raise WorkloadError(f"no {ref.kind} {ref.namespace}/{ref.name} (kubectl get "
                            f"{ref.kind.lower()} -n {ref.namespace})")
    return found[0]


# a workload's windows' paths, and one line per recorded pod without one (why)
Fetched = tuple[list[Path], list[str]]


def fetch_windows(workload: Workload, since_s: float, dest: Path, *,
                  until: float | None = None, now: Callable[[], float] = time.time) -> Fetched:
    """Each recorded pod's window of the ``since_s`` seconds to ``until`` (Unix seconds; None:
    now), from its node's agent, into ``dest``: the timelines' paths, and one line per pod
    that has none (why)."""
    return fetch_all_windows([workload], since_s, dest, until=until, now=now)[workload.ref]


def _node_windows(api: Any, node: str, refs: Sequence[PodRef], dest: Path, from_s: float,
                  to_s: float, workers: int
                  ) -> Iterator[tuple[PodRef, Path | AgentTimelineError]]:
    """The windows of ``refs`` (pods of ``node``) from the node's agent: one streamed
    ``/windows``, or an older agent's ``/timeline`` a pod at a time (``workers`` at once)."""
    if not node:
        for ref in refs:
            yield ref, AgentTimelineError(f"{ref}: not scheduled on a node yet")
        return
    try:
        link = agent_on_node(api, node)
    except AgentTimelineError as exc:
        for ref in refs:
            yield ref, exc
        return
    try:
        yield from dataclasses.replace(link, ref=refs[0]).windows(dest, refs, from_s, to_s)
        return
    except OlderAgent:
        pass
    except AgentTimelineError as exc:
        for ref in refs:
            yield ref, exc
        return

    def one(ref: PodRef) -> Path | AgentTimelineError:
        try:
            return dataclasses.replace(link, ref=ref).window(dest, from_s, to_s)
        except AgentTimelineError as exc:
            return exc
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(refs)))) as pool:
        yield from zip(refs, pool.map(one, refs))


def stream_all_windows(workloads: Sequence[Workload], since_s: float, dest: Path, *,
                       until: float | None = None, now: Callable[[], float] = time.time,
                       workers: int = FETCH_WORKERS) -> Iterator[tuple[Workload, Fetched]]:
    """Each workload's :data:`Fetched` as soon as its last recorded pod's window arrived:
    each node's agent found once and asked once (``/windows``), every node at once, so
    that a caller begins with the first workloads while the others arrive."""
    end = now() if until is None else until
    by_node: dict[str, list[PodRef]] = {}
    for w in workloads:
        for p in w.pods:
            if p.recorded:
                by_node.setdefault(p.node, []).append(PodRef(w.ref.namespace, p.name))
    waiting = {w.ref: sum(p.recorded for p in w.pods) for w in workloads}
    owner = {PodRef(w.ref.namespace, p.name): w.ref for w in workloads for p in w.pods
             if p.recorded}
    got: dict[PodRef, Path | AgentTimelineError] = {}
    by_ref = {w.ref: w for w in workloads}
    for workload in workloads:
        if not waiting[workload.ref]:
            yield workload, _fetched(workload, got)
    if not by_node:
        return
    try:
        api = agent_kube()
    except AgentTimelineError as exc:
        for workload in workloads:
            if waiting[workload.ref]:
                got.update({PodRef(workload.ref.namespace, p.name): exc
                            for p in workload.pods})
                yield workload, _fetched(workload, got)
        return
    arrived: queue.Queue[tuple[PodRef, Path | AgentTimelineError] | None] = queue.Queue()

    def ask(node: str, refs: list[PodRef]) -> None:
        try:
            for item in _node_windows(api, node, refs, dest, end - since_s, end, workers):
                arrived.put(item)
        except Exception as exc:   # noqa: BLE001 - one node's failure is its pods' line
            for ref in refs:
                if ref not in got:
                    said = " ".join(str(exc).split())[:200]
                    arrived.put((ref, AgentTimelineError(f"{ref}: {said}")))
        finally:
            arrived.put(None)

    with ThreadPoolExecutor(max_workers=len(by_node)) as pool:
        for node, refs in by_node.items():
            pool.submit(ask, node, refs)
        running = len(by_node)
        while running:
            item = arrived.get()
            if item is None:
                running -= 1
                continue
            ref, found = item
            if ref in got or ref not in owner:
                continue
            got[ref] = found
            waiting[owner[ref]] -= 1
            if not waiting[owner[ref]]:
                yield by_ref[owner[ref]], _fetched(by_ref[owner[ref]], got)
    for workload in workloads:   # a pod no node's answer named
        if waiting[workload.ref] > 0:
            for p in workload.pods:
                got.setdefault(PodRef(workload.ref.namespace, p.name),
                               AgentTimelineError("no answer from its node's agent"))
            yield workload, _fetched(workload, got)


def _fetched(workload: Workload, got: Mapping[PodRef, Path | AgentTimelineError]) -> Fetched:
    paths: list[Path] = []
    missing: list[str] = []
    for pod in workload.pods:
        if not pod.recorded:
            missing.append(f"{workload.ref.namespace}/{pod.name}: not recorded (label it "
                           f"{RECORD_LABEL[0]}={RECORD_LABEL[1]} for the node agent)")
            continue
        found = got[PodRef(workload.ref.namespace, pod.name)]
        if isinstance(found, Path):
            paths.append(found)
        else:
            missing.append(f"{workload.ref.namespace}/{pod.name}: {found}")
    return paths, missing


def fetch_all_windows(workloads: Sequence[Workload], since_s: float, dest: Path, *,
                      until: float | None = None, now: Callable[[], float] = time.time,
                      workers: int = FETCH_WORKERS) -> dict[WorkloadRef, Fetched]:
    """:func:`stream_all_windows`, whole: each workload's windows by its reference."""
    return {w.ref: fetched for w, fetched in stream_all_windows(
        workloads, since_s, dest, until=until, now=now, workers=workers)}
