"""A Kubernetes pod's CPU limit in place (``k8s:NAMESPACE/POD[/CONTAINER]``): the pod's
``resize`` subresource (Kubernetes 1.33+), through the official ``kubernetes`` client.

Registered as ``k8s`` in ``client.run.limiters.LIMITERS`` (``--cgroup k8s:NS/POD[/CONTAINER]``,
``--k8s NS/deployment/NAME``; several pods: ``client.run.limiters.pods``); tested on the project's node (tests/test_commands_advise_k8s.py).

- **The body** (:func:`resize_body`) sets the container's ``limits.cpu`` and moves
  ``requests.cpu`` only as the QoS class needs: a Guaranteed pod keeps requests equal to limits;
  a Burstable one keeps the request it had when we came unless the new limit is below it (then
  the request goes down to the limit, and back up with a later, larger limit), and is refused
  if that would make it Guaranteed. A BestEffort pod has no
  limit to change (adding one changes its QoS class: the API refuses that).
- **In force**: the pod's ``status.containerStatuses[].resources.limits.cpu`` says the new
  limit and the container's quota file (the node's cgroup, as ``--cgroup k8s:`` resolves it)
  reads it back; for a pod on another node, its node's agent counts the pod's rows under the
  new quota (``client.run.limiters.quota_source``: :func:`through_agent`). A resize the kubelet reports ``Infeasible``, or still ``Deferred`` at the
  timeout (the ``PodResizePending`` condition), ends with one line saying why.
- **The pod level** (``spec.resources``, KEP-2837): where the pod-level CPU limit binds
  (:func:`binding_level`: the container has none of its own, or one equal to it), the body
  (:func:`pod_resize_body`) sets ``spec.resources.limits.cpu``, the pod-level request moved
  as a container's is, and the containers tied to it moved along; in force once
  ``status.resources`` says it. Before anything changes a dry-run resize asks whether the API
  server takes it (Kubernetes 1.36+, InPlacePodLevelResourcesVerticalScaling): a 404 or 422
  is one line (:func:`pod_level_refused`). A resize the kubelet cannot act on
  (``Infeasible``) has the spec put back before the line. ``--apply`` patches the pod
  template's ``spec.resources`` (:func:`pod_level_deployment_patch`).
- **Refused**: a container whose ``resizePolicy`` for cpu is ``RestartContainer`` (unless
  ``--allow-restart``); a period other than 100 ms (the kubelet's, node-wide); a burst; "no
  limit".
- **Unchanged**: the container's restart count and id are read when we come and after every
  resize; a change ends the search, and the restore says they did not change
  (:meth:`KubernetesLimiter.unchanged`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from client.run.agent_timeline import AgentLink
from client.run.service_group import ServiceGroup
from client.run.kube_api import api_message, api_problem
from client.run.limiters.base import Limiter, LimiterError, quota_words, same_limit
from client.run.limiters.quota_source import AgentQuota, GroupFiles, QuotaSource
from cpuquota.limit import Limit

__all__ = ["KubernetesLimiter", "binding_level", "container_name", "cpu_cores", "cpu_quantity",
           "deployment_patch", "deployment_pods", "find_deployment_pods", "identity",
           "parse_workload", "pick_container", "pod_level_cpus", "pod_level_deployment_patch",
           "pod_level_refused", "pod_request_for", "pod_resize_body", "resize_body", "resize_state",
           "restarts_on_resize", "through_agent", "tied_containers"]

# a user who reaches the pod through its node's agent holds the roles of this file
USER_RBAC = ("the ClusterRole throttle-lab-pod-resizer in k8s/recorder/user-rbac.yaml grants "
             "it (kubectl -n NAMESPACE create rolebinding ... "
             "--clusterrole=throttle-lab-pod-resizer --user=YOU)")

Pod = Mapping[str, Any]   # a pod as the API's JSON (camelCase keys)


def cpu_cores(quantity: str | int | float | None) -> float | None:
    """``"300m"`` -> 0.3, ``"1.5"`` -> 1.5, ``2`` -> 2.0; None for none."""
    if quantity is None:
        return None
    text = str(quantity).strip()
    try:
        if text.endswith("m"):
            return float(Decimal(text[:-1]) / 1000)
        return float(Decimal(text))
    except InvalidOperation:
        raise LimiterError(f"not a CPU quantity: {text!r}") from None


def cpu_quantity(limit: Limit) -> str:
    """The limit as Kubernetes writes it: millicores (``450m``)."""
    return f"{limit.millicores}m"


def deployment_patch(container: str, limit: Limit, request: str | None = None
                     ) -> dict[str, Any]:
    """The strategic-merge patch ``--apply`` sends (the one the ``kubectl patch`` line of
    ``client.render.permanent`` shows)."""
    resources: dict[str, Any] = {"limits": {"cpu": cpu_quantity(limit)}}
    if request is not None:
        resources["requests"] = {"cpu": request}
    return {"spec": {"template": {"spec": {"containers": [
        {"name": container, "resources": resources}]}}}}


def pod_request_for(names: Mapping[str, Any], limit: Limit) -> str | None:
    """The ``requests.cpu`` a Deployment's patch carries beside ``limit``: the limit itself
    for a Guaranteed pod (its class kept) or where the request the pod had is above it."""
    request = names.get("request_millicores")
    if names.get("qos") == "Guaranteed" or (request is not None and request > limit.millicores):
        return cpu_quantity(limit)
    return None


def _container(pod: Pod, name: str, where: str = "spec") -> Mapping[str, Any]:
    key = "containers" if where == "spec" else "containerStatuses"
    part = pod.get(where) or {}
    for container in part.get(key) or []:
        if container.get("name") == name:
            return container
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    raise LimiterError(f"pod {_pod_name(pod)} has no container {name} (containers: "
                       f"{', '.join(map(str, names)) or 'none'})")


def _pod_name(pod: Pod) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def resize_body(pod: Pod, container: str, limit: Limit, *, request: float | None = None,
                allow_restart: bool = False) -> dict[str, Any]:
    """The ``resize`` patch that sets ``container``'s cpu limit to ``limit`` with the QoS class
    kept (see the module docstring); ``LimiterError`` when it cannot be kept. ``request``: the
    cpu request the container had when we came (a Burstable pod's request goes back up to it)."""
    spec = _container(pod, container)
    resources = spec.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    qos = (pod.get("status") or {}).get("qosClass")
    if not allow_restart and restarts_on_resize(pod, container):
        raise LimiterError(f"container {container} of pod {_pod_name(pod)} restarts on a "
                           "cpu resize (resizePolicy RestartContainer): --allow-restart lets "
                           "advise restart it")
    if "cpu" not in limits:
        raise LimiterError(f"container {container} of pod {_pod_name(pod)} has no cpu limit: "
                           "adding one would change the pod's QoS class"
                           + (f" ({qos})" if qos else ""))
    new = cpu_quantity(limit)
    now = cpu_cores(requests.get("cpu"))
    if qos == "Guaranteed":
        return _body(container, {"limits": {"cpu": new}, "requests": {"cpu": new}})
    had = request if request is not None else now
    if had is None:
        return _body(container, {"limits": {"cpu": new}})
    wanted = min(round(had * 1000), limit.millicores)
    others = [c for c in (pod.get("spec") or {}).get("containers") or []
              if c.get("name") != container]
    memory_equal = (limits.get("memory") is not None and
                    limits.get("memory") == requests.get("memory"))
    if wanted == limit.millicores and qos == "Burstable" and memory_equal and \
            all(_guaranteed(c) for c in others):
        raise LimiterError(f"{limit.cpus:g} CPU is not above container {container}'s request "
                           f"({had:g} CPU): a request equal to the limit would make the pod "
                           "Guaranteed (the API refuses a QoS change)")
    if now is not None and round(now * 1000) == wanted:
        return _body(container, {"limits": {"cpu": new}})
    return _body(container, {"limits": {"cpu": new}, "requests": {"cpu": f"{wanted}m"}})


def pod_level_cpus(pod: Pod, key: str = "limits") -> float | None:
    """The pod-level ``resources.<key>.cpu`` (``spec.resources``, KEP-2837), None: none."""
    return cpu_cores((((pod.get("spec") or {}).get("resources") or {}).get(key)
                      or {}).get("cpu"))


def _own_cpu(container: Mapping[str, Any], key: str = "limits") -> float | None:
    return cpu_cores(((container.get("resources") or {}).get(key) or {}).get("cpu"))


def binding_level(pod: Pod, container: str) -> str:
    """Which level's CPU limit binds ``container``: ``"pod"`` where the pod has a pod-level
    limit and the container none of its own or one equal to it (the API keeps a container's
    at or below the pod's; the kubelet writes the pod's on a container without one, so both
    groups show the same quota: the spec says the limit is the pod's), else ``"container"``."""
    pod_level = pod_level_cpus(pod)
    if pod_level is None:
        return "container"
    own = _own_cpu(_container(pod, container))
    return "container" if own is not None and round(own * 1000) < round(pod_level * 1000) \
        else "pod"


def tied_containers(pod: Pod) -> list[str]:
    """The containers whose own cpu limit equals the pod-level one: a pod-level resize moves
    theirs with it (a container's may not exceed the pod's, and one left above would bind)."""
    pod_level = pod_level_cpus(pod)
    if pod_level is None:
        return []
    return [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []
            if (own := _own_cpu(c)) is not None and round(own * 1000) == round(pod_level * 1000)]


def pod_resize_body(pod: Pod, limit: Limit, *, request: float | None = None,
                    tied: Mapping[str, float | None] | None = None) -> dict[str, Any]:
    """The ``resize`` patch that sets the pod-level cpu limit (``spec.resources.limits.cpu``)
    to ``limit``, the QoS class kept as :func:`resize_body` keeps a container's: a Guaranteed
    pod's pod-level request moves with it, a Burstable one's stays at ``request`` (the one it
    had when we came) unless the limit is below it. ``tied``: the containers whose own limit
    moves with the pod's (:func:`tied_containers`), each with the cpu request it had when we
    came. ``LimiterError`` when the QoS class, the containers' own limits or their requests
    do not allow it."""
    resources = (pod.get("spec") or {}).get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if "cpu" not in limits:
        raise LimiterError(f"pod {_pod_name(pod)} has no pod-level cpu limit "
                           "(spec.resources.limits.cpu) to resize")
    qos = (pod.get("status") or {}).get("qosClass")
    new = cpu_quantity(limit)
    tied = dict(tied if tied is not None else
                {name: _own_cpu(_container(pod, name), "requests") for name in
                 tied_containers(pod)})
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        own = _own_cpu(c)
        if c.get("name") not in tied and own is not None and round(own * 1000) > limit.millicores:
            raise LimiterError(f"{limit.cpus:g} CPU is below container {c.get('name')}'s own "
                               f"cpu limit ({own:g} CPU), which may not exceed the pod's")
    moved: list[dict[str, Any]] = []
    for name, had in tied.items():
        change: dict[str, Any] = {"limits": {"cpu": new}}
        if had is not None:
            change["requests"] = {"cpu": f"{min(round(had * 1000), limit.millicores)}m"}
        moved.append({"name": name, "resources": change})
    asked = sum(round((_own_cpu(c, "requests") or 0) * 1000) if c.get("name") not in tied
                else min(round((tied[str(c.get("name"))] or 0) * 1000), limit.millicores)
                for c in containers)
    pod_change: dict[str, Any] = {"limits": {"cpu": new}}
    now = cpu_cores(requests.get("cpu"))
    had = request if request is not None else now
    if qos == "Guaranteed":
        pod_change["requests"] = {"cpu": new}
        wanted = limit.millicores
    elif had is not None:
        wanted = min(round(had * 1000), limit.millicores)
        memory_equal = (limits.get("memory") is not None and
                        limits.get("memory") == requests.get("memory"))
        if wanted == limit.millicores and qos == "Burstable" and memory_equal:
            raise LimiterError(f"{limit.cpus:g} CPU is not above pod {_pod_name(pod)}'s "
                               f"pod-level cpu request ({had:g} CPU): a request equal to the "
                               "limit would make the pod Guaranteed (the API refuses a QoS "
                               "change)")
        if now is None or round(now * 1000) != wanted:
            pod_change["requests"] = {"cpu": f"{wanted}m"}
    else:
        wanted = None
    if wanted is not None and asked > wanted:
        raise LimiterError(f"{limit.cpus:g} CPU is below the sum of pod {_pod_name(pod)}'s "
                           f"containers' cpu requests ({asked / 1000:g} CPU), which the "
                           "pod-level request may not be below")
    body: dict[str, Any] = {"spec": {"resources": pod_change}}
    if moved:
        body["spec"]["containers"] = moved
    return body


def pod_level_deployment_patch(limit: Limit, request: str | None = None,
                               tied: Mapping[str, float | None] | None = None
                               ) -> dict[str, Any]:
    """The strategic-merge patch ``--apply`` sends where the pod-level limit binds: the pod
    template's ``spec.resources`` (and the containers whose own limit moves with it)."""
    resources: dict[str, Any] = {"limits": {"cpu": cpu_quantity(limit)}}
    if request is not None:
        resources["requests"] = {"cpu": request}
    spec: dict[str, Any] = {"resources": resources}
    if tied:
        spec["containers"] = [
            {"name": name, "resources": {"limits": {"cpu": cpu_quantity(limit)}, **(
                {"requests": {"cpu": cpu_quantity(limit)}} if had is not None and
                round(had * 1000) > limit.millicores else {})}} for name, had in tied.items()]
    return {"spec": {"template": {"spec": spec}}}


def pod_level_refused(why: str, pod: str, version: str | None) -> str:
    """The line for a pod-level resize the API server refuses (``why``: its 422 and message,
    or that it dropped the change): what it needs and what to do instead."""
    return (f"the API server refuses to resize pod {pod}'s pod-level resources ({why}): "
            "in-place resize of spec.resources needs Kubernetes 1.36+ with "
            f"InPlacePodLevelResourcesVerticalScaling on (this one is {version or 'unknown'}); "
            "judge it from its recorded window with advise --passive --k8s NS/KIND/NAME, or "
            "set the limit in its Deployment (spec.template.spec.resources) and let it roll out")


def resize_missing(status: int | None, version: str | None) -> str | None:
    """The line for a ``pods/resize`` the API server does not have (404 on a pod that is
    there): in-place resize needs Kubernetes 1.33+ (None: another failure)."""
    if status != 404:
        return None
    return ("the API server has no pods/resize subresource: in-place resize needs Kubernetes "
            f"1.33+ (this one is {version or 'older, or says no version'})")


def _body(container: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": container, "resources": resources}]}}


def restarts_on_resize(pod: Pod, container: str) -> bool:
    """Whether the container's ``resizePolicy`` for cpu is ``RestartContainer``."""
    return any(policy.get("resourceName") == "cpu" and
               policy.get("restartPolicy") == "RestartContainer"
               for policy in _container(pod, container).get("resizePolicy") or [])


def container_name(pod: Pod, given: str | None) -> str:
    """The container to resize: ``given`` (a name, or a container id as ``--cgroup k8s:``
    takes), or the pod's only container; ``LimiterError`` naming the choices otherwise."""
    containers = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    if given is None:
        if len(containers) == 1:
            return containers[0]
        raise LimiterError(f"pod {_pod_name(pod)} has {len(containers)} containers "
                           f"({', '.join(containers)}): say which with --container NAME")
    if given in containers:
        return given
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if str(status.get("containerID") or "").split("://")[-1].startswith(given):
            return str(status.get("name"))
    raise LimiterError(f"pod {_pod_name(pod)} has no container {given} (containers: "
                       f"{', '.join(containers) or 'none'})")


def pick_container(pod: Pod, port: int | None) -> tuple[str | None, str | None]:
    """The container to resize where a pod of several is named without ``--container``, and
    the line that says why: the only one with a CPU limit of its own, else the only one with
    a limit that serves ``port`` (the target URL's). (None, None): one container, or a
    pod-level limit (that level is resized). ``LimiterError`` naming the containers where
    neither picks one."""
    containers = list((pod.get("spec") or {}).get("containers") or [])
    if len(containers) <= 1 or pod_level_cpus(pod) is not None:
        return None, None
    names = [str(c.get("name")) for c in containers]
    limited = [c for c in containers if _own_cpu(c) is not None]
    listed = f"pod {_pod_name(pod)} has {len(names)} containers ({', '.join(names)})"
    if len(limited) == 1:
        name = str(limited[0].get("name"))
        return name, (f"{listed}: resizing {name}, the only one with a CPU limit (--container "
                      "NAME for another)")
    serving = [c for c in limited if port is not None and
               any(p.get("containerPort") == port for p in c.get("ports") or [])]
    if len(serving) == 1:
        name = str(serving[0].get("name"))
        return name, (f"{listed}: resizing {name}, the only one with a CPU limit that serves "
                      f"port {port} (--container NAME for another)")
    which = (f"{', '.join(str(c.get('name')) for c in limited)} have a CPU limit"
             if limited else "none has a CPU limit")
    serves = ("" if port is None or not limited else
              f", and not one of them alone serves port {port}")
    raise LimiterError(f"{listed}; {which}{serves}: say which with --container NAME")


def _guaranteed(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    return all(limits.get(r) is not None and limits.get(r) == requests.get(r, limits.get(r))
               for r in ("cpu", "memory"))


def resize_state(pod: Pod, container: str) -> tuple[float | None, str | None]:
    """(the cpu limit the kubelet reports applied, why a resize waits: ``Infeasible: ...``,
    ``Deferred: ...`` or ``InProgress: ...``, else None)."""
    status = _container(pod, container, "status")
    applied = cpu_cores(((status.get("resources") or {}).get("limits") or {}).get("cpu"))
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "PodResizePending":
            return applied, f"{condition.get('reason')}: {condition.get('message') or ''}".strip()
        if condition.get("type") == "PodResizeInProgress":
            return applied, "InProgress: the kubelet is acting on a resize"
    resize = (pod.get("status") or {}).get("resize")   # before 1.33: a status field
    if resize in ("Infeasible", "Deferred"):
        return applied, str(resize)
    return applied, None


def identity(pod: Pod, container: str) -> tuple[int, str]:
    """(restart count, container id): what must not change across a resize."""
    status = _container(pod, container, "status")
    return int(status.get("restartCount") or 0), str(status.get("containerID") or "")


class KubernetesLimiter(Limiter):
    """Set a pod's container's cpu limit with ``pods/resize``; see the module docstring.

    ``api``: a ``kubernetes.client.CoreV1Api`` (or anything with ``read_namespaced_pod`` and
    ``patch_namespaced_pod_resize``); ``to_json``: the API object as JSON (the client's
    ``api_client.sanitize_for_serialization``). ``quota``: where the quota is read back
    (default: ``target``'s files here); ``rbac``: the role a refused resize names (default:
    k8s/advise-rbac.yaml's)."""

    kind = "k8s"
    can_remove = False

    def __init__(self, target: ServiceGroup | None, api: Any, namespace: str, pod: str,
                 container: str | None, *, to_json: Callable[[Any], Pod] | None = None,
                 timeout: float = 60.0, allow_restart: bool = False, server: str = "",
                 request_timeout: float | None = None, apps: Any = None,
                 quota: QuotaSource | None = None, rbac: str = "") -> None:
        if quota is None:
            if target is None:
                raise ValueError("KubernetesLimiter: a target or a quota source")
            quota = GroupFiles(target.directory, target.version)
        self.quota, self.rbac, self.api, self.apps = quota, rbac, api, apps
        self.namespace, self.pod = namespace, pod
        self.to_json = to_json or api.api_client.sanitize_for_serialization
        self.timeout, self.allow_restart, self.server = timeout, allow_restart, server
        self.call: dict[str, Any] = ({} if request_timeout is None else
                                     {"_request_timeout": request_timeout})
        first = self.read_pod()
        self.container = container_name(first, container)
        self.level = binding_level(first, self.container)
        moving = [self.container] if self.level == "container" else [
            str(c.get("name")) for c in (first.get("spec") or {}).get("containers") or []
            if _own_cpu(c) is None or str(c.get("name")) in tied_containers(first)]
        for name in moving:
            if restarts_on_resize(first, name) and not allow_restart:
                raise LimiterError(f"container {name} of pod {namespace}/{pod} restarts "
                                   "on a cpu resize (resizePolicy RestartContainer): "
                                   "--allow-restart lets advise restart it")
        spec = _container(first, self.container)
        requests = (spec.get("resources") or {}).get("requests") or {}
        limits = (spec.get("resources") or {}).get("limits") or {}
        # as we came: put back at the end (the pod level's where it binds)
        self.request = cpu_cores(requests.get("cpu"))
        self.original_cpu = limits.get("cpu")
        self.tied: dict[str, float | None] = {}
        if self.level == "pod":
            self.request = pod_level_cpus(first, "requests")
            self.original_cpu = ((first.get("spec") or {}).get("resources") or {}).get(
                "limits", {}).get("cpu")
            self.tied = {name: _own_cpu(_container(first, name), "requests")
                         for name in tied_containers(first)}
        self.qos = (first.get("status") or {}).get("qosClass")
        self.before = identity(first, self.container)
        self.what = (f"container {self.container}" if self.level == "container" else
                     "its pod-level resources (spec.resources)")
        self.description = f"pods/resize of {namespace}/{pod}, {self.what}"
        self.names: dict[str, Any] = {"namespace": namespace, "pod": pod,
                                      "container": self.container, "qos": self.qos,
                                      "owner": _owner(first), "level": self.level,
                                      "tied": dict(self.tied),
                                      "request_millicores": (None if self.request is None else
                                                             round(self.request * 1000))}
        if self.level == "pod":
            self._probe(first)

    def _probe(self, first: Pod) -> None:
        """Before anything changes: whether the API server resizes this pod's pod-level
        resources, by a dry run of a resize 1m above the limit it has (nothing is stored);
        ``LimiterError`` in one line where it refuses (no pods/resize, the gate off)."""
        now = pod_level_cpus(first)
        assert now is not None
        probe = Limit((round(now * 1000) + 1) / 1000)
        body = pod_resize_body(first, probe, request=self.request, tied=self.tied)
        try:
            back = self.api.patch_namespaced_pod_resize(self.pod, self.namespace, body,
                                                        dry_run="All", **self.call)
        except Exception as exc:
            raise LimiterError(self._refused(exc)) from None
        said = pod_level_cpus(self.to_json(back)) if back is not None else None
        if said is not None and round(said * 1000) != probe.millicores:
            raise LimiterError(pod_level_refused("a dry run dropped the change",
                                                 f"{self.namespace}/{self.pod}",
                                                 self._version()))

    def _refused(self, exc: Exception) -> str:
        """The line for a failed ``pods/resize`` patch (404: no subresource; 422 at the pod
        level: the gate off or an older server)."""
        status = getattr(exc, "status", None)
        if status == 404 and self._pod_there() and \
                (missing := resize_missing(status, self._version())) is not None:
            return missing
        if status == 422 and self.level == "pod":
            message = api_message(getattr(exc, "body", None))
            return pod_level_refused(f"{status}: {message}" if message else str(status),
                                     f"{self.namespace}/{self.pod}", self._version())
        return _api_problem(exc, "patch", "pods/resize", self.namespace, self.pod,
                            self.server, self.rbac)

    def read_pod(self) -> Pod:
        try:
            return self.to_json(self.api.read_namespaced_pod(self.pod, self.namespace,
                                                             **self.call))
        except Exception as exc:   # the client's ApiException, a lost connection
            raise LimiterError(_api_problem(exc, "get", "pods", self.namespace, self.pod,
                                            self.server, self.rbac)) from None

    def read(self) -> Limit | None:
        return self.quota.read()

    def node_cpus(self) -> tuple[int, str] | None:
        """A pod on another node: that node's CPUs, as its agent says."""
        return self.quota.node_cpus()

    def check(self, limit: Limit | None) -> None:
        if limit is None:
            raise LimiterError("a pod's cpu limit cannot be taken away in place (its QoS class "
                               "would change)")
        if limit.period_ms != 100 or limit.burst_ms:
            raise LimiterError("Kubernetes sets the period per node (100 ms) and no burst")
        if problem := limit.kernel_problem():
            raise LimiterError(problem)

    def apply(self, limit: Limit | None) -> None:
        self.check(limit)
        assert limit is not None
        pod = self.read_pod()
        body = (pod_resize_body(pod, limit, request=self.request, tied=self.tied)
                if self.level == "pod" else
                resize_body(pod, self.container, limit, request=self.request,
                            allow_restart=self.allow_restart))
        try:
            self.api.patch_namespaced_pod_resize(self.pod, self.namespace, body, **self.call)
        except Exception as exc:
            raise LimiterError(self._refused(exc)) from None
        if self.level == "pod":
            try:
                self._await_status(limit, time.monotonic() + self.timeout)
            except LimiterError:
                self._undo(pod)   # the spec back as it was: the kubelet did not act on it
                raise
            self.quota.wait_for(Limit(limit.cpus, 100.0, 0.0), timeout=15.0)
            self._await_status(limit, time.monotonic() + self.timeout)
            return
        deadline = time.monotonic() + self.timeout
        self._await_status(limit, deadline)
        self.quota.wait_for(Limit(limit.cpus, 100.0, 0.0), timeout=15.0)
        # the kubelet posts its status after it acts: a status read before it had posted
        # an earlier resize (still at this limit) may be posted later; the quota now shows
        # this resize acted on, so the status must show it again, after that one
        self._await_status(limit, deadline)

    def _undo(self, before: Pod) -> None:
        """After a pod-level resize the kubelet would not act on: the pod's spec back to the
        limit it had (``before``), so nothing changed is left behind (best effort: the
        refusal is the line the caller says)."""
        cpu = pod_level_cpus(before)
        if cpu is None:
            return
        try:
            body = pod_resize_body(self.read_pod(), Limit(cpu), request=self.request,
                                   tied=self.tied)
            self.api.patch_namespaced_pod_resize(self.pod, self.namespace, body, **self.call)
        except Exception:
            pass

    def _pod_there(self) -> bool:
        try:
            self.read_pod()
        except LimiterError:
            return False
        return True

    def _version(self) -> str | None:
        """The API server's version (``v1.32.4``), None when it does not say."""
        try:
            from kubernetes import client

            return str(client.VersionApi(self.api.api_client).get_code(**self.call).git_version)
        except Exception:
            return None

    def _await_status(self, limit: Limit, deadline: float) -> None:
        """Until the pod's status shows ``limit`` applied with no resize pending or in
        progress; ``LimiterError`` when infeasible, past ``deadline`` or restarted."""
        while True:
            pod = self.read_pod()
            applied, pending = resize_state(pod, self.container)
            if self.level == "pod":
                applied = cpu_cores((((pod.get("status") or {}).get("resources") or {}).get(
                    "limits") or {}).get("cpu"))   # the kubelet's pod-level status
            if pending is not None and pending.startswith("Infeasible"):
                what = "" if self.level == "container" else "'s pod-level resources"
                raise LimiterError(f"the kubelet cannot resize {self.namespace}/{self.pod}"
                                   f"{what} to {cpu_quantity(limit)}: {pending}")
            if pending is None and applied is not None and \
                    round(applied * 1000) == limit.millicores:
                break
            if time.monotonic() >= deadline:
                raise LimiterError(f"the resize of {self.namespace}/{self.pod} to "
                                   f"{cpu_quantity(limit)} is not in force after "
                                   f"{self.timeout:g} s" + (f" ({pending})" if pending else ""))
            time.sleep(0.2)
        if not self.allow_restart and identity(pod, self.container) != self.before:
            raise LimiterError(f"container {self.container} of {self.namespace}/{self.pod} "
                               "restarted or was replaced during the resize")

    def drift(self, limit: Limit | None) -> str | None:
        """Whether the pod still holds ``limit`` as this limiter set it: the spec's cpu limit
        at the level that binds, and the quota where it is read back (:attr:`quota`); None
        when both do, else what each went from and to, and who does that (a VPA's updater
        in ``InPlaceOrRecreate`` resizes a pod in place as this does)."""
        if limit is None:
            return super().drift(limit)
        pod = self.read_pod()
        if self.level == "pod":
            where, spec_cpu = "spec.resources.limits.cpu", pod_level_cpus(pod)
        else:
            where = f"container {self.container}'s limits.cpu"
            spec_cpu = _own_cpu(_container(pod, self.container))
        changed = []
        if spec_cpu is None or round(spec_cpu * 1000) != limit.millicores:
            now = "none" if spec_cpu is None else f"{round(spec_cpu * 1000)}m"
            changed.append(f"the pod's {where} {cpu_quantity(limit)} -> {now}")
        want = Limit(limit.cpus, 100.0, 0.0)
        quota = self.quota.read()
        if not same_limit(quota, want):
            changed.append(f"the quota ({self.quota.where}) {quota_words(want)} -> "
                           f"{quota_words(quota)}")
        if not changed:
            return None
        return (f"{', '.join(changed)}: a VPA's updater (InPlaceOrRecreate) or another "
                f"controller resizes {self.namespace}/{self.pod} too (--despite-vpa does not help "
                "here: stop it, e.g. the VPA's updateMode Off, then run again)")

    def unchanged(self) -> str:
        """What the restore says of the container: its restart count and id as when we came
        (``LimiterError`` when the pod cannot be read)."""
        restarts, cid = identity(self.read_pod(), self.container)
        was_restarts, was_cid = self.before
        short = cid.split("://")[-1][:12]
        if (restarts, cid) == self.before:
            return (f"pod {self.namespace}/{self.pod}, container {self.container}: restart "
                    f"count {restarts} and container id {short} unchanged")
        return (f"pod {self.namespace}/{self.pod}, container {self.container} CHANGED: restart "
                f"count {was_restarts} -> {restarts}, container id "
                f"{was_cid.split('://')[-1][:12]} -> {short}")

    def patch_deployment(self, limit: Limit) -> str:
        """``--apply``: patch the pod's Deployment with ``limit`` (it rolls out new pods);
        what was done, in one line. ``LimiterError`` when the pod has no Deployment or the
        patch is refused."""
        owner = self.names.get("owner")
        if not owner:
            raise LimiterError(f"--apply: pod {self.namespace}/{self.pod} has no Deployment "
                               "to patch")
        request = pod_request_for(self.names, limit)
        body = (pod_level_deployment_patch(limit, request, self.tied) if self.level == "pod"
                else deployment_patch(self.container, limit, request))
        try:
            self.apps.patch_namespaced_deployment(owner, self.namespace, body, **self.call)
        except Exception as exc:
            raise LimiterError(api_problem(exc, "patch", "deployments", self.namespace, owner,
                                           self.server)) from None
        where = (f"container {self.container}: limits.cpu" if self.level == "container" else
                 "pod-level spec.resources.limits.cpu")
        return (f"applied: deployment {self.namespace}/{owner}, {where} "
                f"{cpu_quantity(limit)} (rolling out: kubectl rollout status "
                f"deployment/{owner} -n {self.namespace})")

    def restore_hint(self, limit: Limit | None) -> str:
        cpu = cpu_quantity(limit) if limit is not None else self.original_cpu or "?"
        resources: dict[str, Any] = {"limits": {"cpu": cpu}}
        if self.qos == "Guaranteed":
            resources["requests"] = {"cpu": cpu}
        elif self.request is not None:
            resources["requests"] = {"cpu": f"{round(self.request * 1000)}m"}
        body = _body(self.container, resources)
        if self.level == "pod":
            body = {"spec": {"resources": resources}}
            if self.tied:
                body["spec"]["containers"] = [
                    {"name": name, "resources": {"limits": {"cpu": cpu}, **(
                        {} if had is None else {"requests": {"cpu": f"{round(had * 1000)}m"}})}}
                    for name, had in self.tied.items()]
        patch = json.dumps(body, separators=(",", ":"))
        return (f"kubectl patch pod {self.pod} -n {self.namespace} --subresource resize "
                f"--patch '{patch}'")


def parse_workload(text: str) -> tuple[str, str]:
    """``NS/deployment/NAME`` (``deploy``, ``deployments`` too) -> (namespace, name)."""
    parts = text.split("/")
    if len(parts) != 3 or not all(parts) or parts[1] not in ("deployment", "deploy",
                                                               "deployments"):
        raise LimiterError(f"--k8s {text}: expected NAMESPACE/deployment/NAME")
    return parts[0], parts[2]


def deployment_pods(pods: list[Pod], deployment: str) -> list[str]:
    """The names of the running pods (not being deleted) a Deployment owns, by their
    ReplicaSet (:func:`_owner`)."""
    return sorted(str((p.get("metadata") or {}).get("name")) for p in pods
                  if _owner(p) == deployment
                  and (p.get("status") or {}).get("phase") == "Running"
                  and not (p.get("metadata") or {}).get("deletionTimestamp"))


def find_deployment_pods(api: Any, to_json: Callable[[Any], Any], namespace: str,
                         deployment: str, server: str = "",
                         request_timeout: float | None = None) -> list[str]:
    """The running pods of ``namespace/deployment``, sorted (``list pods``: no permission on
    Deployments needed). ``LimiterError`` when there is none. With several, each is resized
    alike and their groups are sampled together (``client.run.limiters.pods``)."""
    call = {} if request_timeout is None else {"_request_timeout": request_timeout}
    try:
        listed = to_json(api.list_namespaced_pod(namespace, **call))
    except Exception as exc:
        raise LimiterError(api_problem(exc, "list", "pods", namespace, "", server)) from None
    names = deployment_pods(list(listed.get("items") or []), deployment)
    if not names:
        raise LimiterError(f"deployment {namespace}/{deployment} has no running pod (no such "
                           "Deployment, or scaled to 0)")
    return names


def _owner(pod: Pod) -> str | None:
    """The Deployment a pod belongs to: its ReplicaSet's name less the pod's
    ``pod-template-hash`` (the ReplicaSet is ``NAME-<hash>``)."""
    meta = pod.get("metadata") or {}
    suffix = "-" + str((meta.get("labels") or {}).get("pod-template-hash") or "")
    for ref in meta.get("ownerReferences") or []:
        name = str(ref.get("name") or "")
        if ref.get("kind") == "ReplicaSet" and len(suffix) > 1 and name.endswith(suffix):
            return name[:-len(suffix)]
    return None


def _api_problem(exc: Exception, verb: str, resource: str, namespace: str, pod: str,
                 server: str = "", rbac: str = "") -> str:
    """``api_problem``'s line; a refusal names ``rbac`` where given (the user's roles)."""
    if rbac and getattr(exc, "status", None) == 403:
        return f"no permission: {verb} {resource} in namespace {namespace}: {rbac}"
    return api_problem(exc, verb, resource, namespace, pod, server)


def through_agent(link: AgentLink, *, allow_restart: bool = False) -> KubernetesLimiter:
    """The limiter of a pod whose group is not on this machine: resized with pods/resize,
    the quota read back from its node's agent (``link``); a refusal names the user's roles
    (k8s/recorder/user-rbac.yaml)."""
    from client.run.kube_api import REQUEST_TIMEOUT, KubeError, connect

    try:
        api = connect()
    except KubeError as exc:
        raise LimiterError(str(exc)) from None
    ref = link.ref
    return KubernetesLimiter(None, api.core, ref.namespace, ref.pod, ref.container or None,
                             to_json=api.to_json, allow_restart=allow_restart,
                             server=api.server, request_timeout=REQUEST_TIMEOUT, apps=api.apps,
                             quota=AgentQuota(link), rbac=USER_RBAC)
