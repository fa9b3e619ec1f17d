"""A Kubernetes pod's CPU limit in place (``k8s:NAMESPACE/POD[/CONTAINER]``): the pod's
``resize`` subresource (Kubernetes 1.33+), through the official ``kubernetes`` client.

**Not registered in** ``client.run.limiters.LIMITERS`` **yet**: written before a node was
available here to run it against (issue 33's node). Its pure parts (the resize body, the
resize's state, quantities) are tested with pod documents; the API calls are not tested
against a real API server. Register it (one line) once a test on the node shows it works.

- **The body** (:func:`resize_body`) sets the container's ``limits.cpu`` and moves
  ``requests.cpu`` only as the QoS class needs: a Guaranteed pod keeps requests equal to limits;
  a Burstable one keeps its request unless the new limit is below it (then the request goes
  down to the limit), and is refused if that would make it Guaranteed. A BestEffort pod has no
  limit to change (adding one changes its QoS class: the API refuses that).
- **In force**: the pod's ``status.containerStatuses[].resources.limits.cpu`` says the new
  limit and the container's quota file (the node's cgroup, as ``--cgroup k8s:`` resolves it)
  reads it back. A resize the kubelet reports ``Infeasible``, or still ``Deferred`` at the
  timeout (the ``PodResizePending`` condition), ends with one line saying why.
- **Refused**: a container whose ``resizePolicy`` for cpu is ``RestartContainer``; a period
  other than 100 ms (the kubelet's, node-wide); a burst; "no limit".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from client.run.cgroup_target import CgroupTarget
from client.run.limiters.base import LimiterError, read_quota, wait_for_quota
from cpuquota.limit import Limit

__all__ = ["KubernetesLimiter", "cpu_cores", "cpu_quantity", "resize_body", "resize_state"]

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


def resize_body(pod: Pod, container: str, limit: Limit) -> dict[str, Any]:
    """The ``resize`` patch that sets ``container``'s cpu limit to ``limit`` with the QoS class
    kept (see the module docstring); ``LimiterError`` when it cannot be kept."""
    spec = _container(pod, container)
    resources = spec.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    qos = (pod.get("status") or {}).get("qosClass")
    for policy in spec.get("resizePolicy") or []:
        if policy.get("resourceName") == "cpu" and policy.get("restartPolicy") == \
                "RestartContainer":
            raise LimiterError(f"container {container} of pod {_pod_name(pod)} restarts on a "
                               "cpu resize (resizePolicy RestartContainer)")
    if "cpu" not in limits:
        raise LimiterError(f"container {container} of pod {_pod_name(pod)} has no cpu limit: "
                           "adding one would change the pod's QoS class"
                           + (f" ({qos})" if qos else ""))
    new = cpu_quantity(limit)
    request = cpu_cores(requests.get("cpu"))
    if qos == "Guaranteed":
        wanted = {"limits": {"cpu": new}, "requests": {"cpu": new}}
    elif request is not None and request > limit.cpus:
        wanted = {"limits": {"cpu": new}, "requests": {"cpu": new}}
        others = [c for c in (pod.get("spec") or {}).get("containers") or []
                  if c.get("name") != container]
        memory_equal = (limits.get("memory") is not None and
                        limits.get("memory") == requests.get("memory"))
        if qos == "Burstable" and memory_equal and all(_guaranteed(c) for c in others):
            raise LimiterError(f"{limit.cpus:g} CPU is below container {container}'s request "
                               f"({request:g} CPU): moving the request down would make the pod "
                               "Guaranteed (the API refuses a QoS change)")
    else:
        wanted = {"limits": {"cpu": new}}
    return {"spec": {"containers": [{"name": container, "resources": wanted}]}}


def _guaranteed(container: Mapping[str, Any]) -> bool:
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    return all(limits.get(r) is not None and limits.get(r) == requests.get(r, limits.get(r))
               for r in ("cpu", "memory"))


def resize_state(pod: Pod, container: str) -> tuple[float | None, str | None]:
    """(the cpu limit the kubelet reports applied, why a resize waits: ``Infeasible: ...`` or
    ``Deferred: ...``, else None)."""
    status = _container(pod, container, "status")
    applied = cpu_cores(((status.get("resources") or {}).get("limits") or {}).get("cpu"))
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodResizePending" and condition.get("status") == "True":
            return applied, f"{condition.get('reason')}: {condition.get('message') or ''}".strip()
    resize = (pod.get("status") or {}).get("resize")   # before 1.33: a status field
    if resize in ("Infeasible", "Deferred"):
        return applied, str(resize)
    return applied, None


def identity(pod: Pod, container: str) -> tuple[int, str]:
    """(restart count, container id): what must not change across a resize."""
    status = _container(pod, container, "status")
    return int(status.get("restartCount") or 0), str(status.get("containerID") or "")


class KubernetesLimiter:
    """Set a pod's container's cpu limit with ``pods/resize``; see the module docstring.

    ``api``: a ``kubernetes.client.CoreV1Api`` (or anything with ``read_namespaced_pod`` and
    ``patch_namespaced_pod_resize``); ``to_json``: the API object as JSON (the client's
    ``api_client.sanitize_for_serialization``)."""

    kind = "k8s"
    can_remove = False

    def __init__(self, target: CgroupTarget, api: Any, namespace: str, pod: str,
                 container: str, *, to_json: Callable[[Any], Pod] | None = None,
                 timeout: float = 60.0) -> None:
        self.target, self.api = target, api
        self.namespace, self.pod, self.container = namespace, pod, container
        self.to_json = to_json or api.api_client.sanitize_for_serialization
        self.timeout = timeout
        self.directory: Path = target.directory
        self.description = f"pods/resize of {namespace}/{pod}, container {container}"
        self.names: dict[str, Any] = {"namespace": namespace, "pod": pod,
                                      "container": container}
        self.before = identity(self.read_pod(), container)

    def read_pod(self) -> Pod:
        try:
            return self.to_json(self.api.read_namespaced_pod(self.pod, self.namespace))
        except Exception as exc:   # the client's ApiException, a lost connection
            raise LimiterError(_api_problem(exc, "get", "pods", self.namespace, self.pod)) \
                from None

    def read(self) -> Limit | None:
        return read_quota(self.directory, self.target.version)

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
        body = resize_body(self.read_pod(), self.container, limit)
        try:
            self.api.patch_namespaced_pod_resize(self.pod, self.namespace, body)
        except Exception as exc:
            raise LimiterError(_api_problem(exc, "patch", "pods/resize", self.namespace,
                                            self.pod)) from None
        deadline = time.monotonic() + self.timeout
        while True:
            pod = self.read_pod()
            applied, pending = resize_state(pod, self.container)
            if pending is not None and pending.startswith("Infeasible"):
                raise LimiterError(f"the kubelet cannot resize {self.namespace}/{self.pod} to "
                                   f"{cpu_quantity(limit)}: {pending}")
            if applied is not None and round(applied * 1000) == limit.millicores:
                break
            if time.monotonic() >= deadline:
                raise LimiterError(f"the resize of {self.namespace}/{self.pod} to "
                                   f"{cpu_quantity(limit)} is not in force after "
                                   f"{self.timeout:g} s" + (f" ({pending})" if pending else ""))
            time.sleep(0.2)
        if identity(pod, self.container) != self.before:
            raise LimiterError(f"container {self.container} of {self.namespace}/{self.pod} "
                               "restarted or was replaced during the resize")
        wait_for_quota(self.directory, self.target.version, Limit(limit.cpus, 100.0, 0.0),
                       timeout=10.0)

    def restore_hint(self, limit: Limit | None) -> str:
        cpu = "?" if limit is None else cpu_quantity(limit)
        return (f"kubectl patch pod {self.pod} -n {self.namespace} --subresource resize "
                f"--patch '{{\"spec\":{{\"containers\":[{{\"name\":\"{self.container}\","
                f"\"resources\":{{\"limits\":{{\"cpu\":\"{cpu}\"}}}}}}]}}}}'")


def _api_problem(exc: Exception, verb: str, resource: str, namespace: str, pod: str) -> str:
    status = getattr(exc, "status", None)
    if status == 403:
        return (f"no permission: {verb} {resource} in namespace {namespace} (the Role in "
                "k8s/ grants what advise needs)")
    if status == 404:
        return f"no such pod: {namespace}/{pod}"
    reason = getattr(exc, "reason", None) or type(exc).__name__
    return f"{verb} {resource} {namespace}/{pod} failed: {reason}"
