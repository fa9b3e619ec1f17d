"""A Deployment's replica count changed and put back (``advise --k8s ... --replicas``): the
count read and patched through the ``scale`` subresource, and the wait until exactly that many
of its pods are running and ready (none still scheduled, none starting).

A replica count above what the nodes can hold leaves pods Pending: :meth:`Scaler.scale` says
so in one line (the pod, the scheduler's words) once one has been Pending past the timeout.
:meth:`Scaler.holding` is the ``with`` block around every change of the count: when it is
left, by the end, an error, Ctrl-C or SIGTERM, the count it had is patched back (Ctrl-C and
SIGTERM ignored meanwhile) and awaited. The command that puts it back by hand is said before
anything changes.

The user needs ``get`` and ``patch`` on ``deployments/scale`` and ``list`` on pods
(k8s/advise-rbac.yaml).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from client.run.signals import ignoring_signals
from client.run.k8s_workloads import WorkloadError, WorkloadRef
from client.run.kube_api import KubeApi, api_problem

__all__ = ["PENDING_TIMEOUT_S", "PodsNow", "Scaler", "pods_now"]

PENDING_TIMEOUT_S = 60.0   # a pod Pending longer than this: the nodes cannot hold it
READY_TIMEOUT_S = 300.0    # the most to wait for a pod scheduled to start and be ready

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class PodsNow:
    """A Deployment's pods as the API has them now (those being deleted left out)."""

    ready: tuple[str, ...]                 # running and ready
    starting: tuple[str, ...]              # scheduled, not ready yet
    pending: tuple[tuple[str, str], ...]   # not scheduled: (name, the scheduler's words)
    limits: Mapping[str, float | None] = field(default_factory=dict)  # each pod's CPU limit


def _owned(pod: Obj, deployment: str) -> bool:
    meta = pod.get("metadata") or {}
    suffix = "-" + str((meta.get("labels") or {}).get("pod-template-hash") or "")
    return len(suffix) > 1 and any(
        ref.get("kind") == "ReplicaSet" and str(ref.get("name") or "") == deployment
        + suffix for ref in meta.get("ownerReferences") or [])


def _limit(pod: Obj) -> float | None:
    """The pod's CPU limit (its containers' summed; None: one has none)."""
    from client.run.limiters.kubernetes import cpu_cores

    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        cpus = cpu_cores(((container.get("resources") or {}).get("limits") or {}).get("cpu"))
        if cpus is None:
            return None
        total += cpus
    return total


def pods_now(pods: list[Obj], deployment: str) -> PodsNow:
    """Pure, on the API's list of pods: the Deployment's pods, ready, starting or pending."""
    ready, starting, pending, limits = [], [], [], {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        if not _owned(pod, deployment) or meta.get("deletionTimestamp"):
            continue
        name = str(meta.get("name"))
        limits[name] = _limit(pod)
        conditions = {c.get("type"): c for c in status.get("conditions") or []}
        scheduled = conditions.get("PodScheduled") or {}
        if status.get("phase") == "Running" and (conditions.get("Ready") or {}).get(
                "status") == "True":
            ready.append(name)
        elif status.get("phase") == "Pending" and scheduled.get("status") != "True":
            words = " ".join(str(scheduled.get("message") or scheduled.get("reason")
                                 or "not scheduled").split())
            pending.append((name, words[:200]))
        else:
            starting.append(name)
    return PodsNow(tuple(sorted(ready)), tuple(sorted(starting)), tuple(sorted(pending)),
                   limits)


@dataclass
class Scaler:
    """The replica count of Deployment ``ref`` through ``api``; ``pending_timeout_s``: how
    long a pod may stay unscheduled before the count is said to be more than the nodes
    hold."""

    api: KubeApi
    ref: WorkloadRef
    pending_timeout_s: float = PENDING_TIMEOUT_S
    ready_timeout_s: float = READY_TIMEOUT_S
    poll_s: float = 1.0
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], float] = time.monotonic
    original: int | None = None            # the count when we came (read by ``holding``)

    @property
    def _path(self) -> str:
        return (f"/apis/apps/v1/namespaces/{self.ref.namespace}/deployments/"
                f"{self.ref.name}/scale")

    def _problem(self, exc: Exception, verb: str, resource: str) -> WorkloadError:
        return WorkloadError(api_problem(exc, verb, resource, self.ref.namespace,
                                         self.ref.name, self.api.server))

    def replicas(self) -> int:
        """``spec.replicas`` of the Deployment's scale."""
        try:
            scale = self.api.get_json(self._path)
        except Exception as exc:
            raise self._problem(exc, "get", "deployments/scale") from None
        return int(((scale or {}).get("spec") or {}).get("replicas") or 0)

    def pods(self) -> PodsNow:
        """The Deployment's pods now (:func:`pods_now`)."""
        try:
            listed = self.api.get_json(f"/api/v1/namespaces/{self.ref.namespace}/pods")
        except Exception as exc:
            raise self._problem(exc, "list", "pods") from None
        return pods_now(list((listed or {}).get("items") or []), self.ref.name)

    def patch(self, replicas: int) -> None:
        try:
            self.api.patch_json(self._path, {"spec": {"replicas": replicas}})
        except Exception as exc:
            raise self._problem(exc, "patch", "deployments/scale") from None

    def scale(self, replicas: int) -> PodsNow:
        """Patch the count to ``replicas`` and wait until exactly that many pods are ready
        and no other is scheduled or starting; ``WorkloadError`` (one line) for a pod
        Pending past the timeout (more than the nodes hold) or one never ready."""
        self.patch(replicas)
        return self.settle(replicas)

    def settle(self, replicas: int) -> PodsNow:
        """Wait until ``replicas`` pods are ready, and no more (see :meth:`scale`)."""
        began = self.now()
        pending_since: dict[str, float] = {}
        while True:
            pods = self.pods()
            if len(pods.ready) == replicas and not pods.starting and not pods.pending:
                return pods
            at = self.now()
            pending_since = {name: pending_since.get(name, at) for name, _ in pods.pending}
            for name, words in pods.pending:
                if at - pending_since[name] >= self.pending_timeout_s:
                    raise WorkloadError(
                        f"{self.ref}: {replicas} replicas are more than the nodes hold: pod "
                        f"{name} still Pending after {self.pending_timeout_s:g} s ({words})")
            if at - began >= self.ready_timeout_s:
                raise WorkloadError(
                    f"{self.ref}: {replicas} replicas not ready after "
                    f"{self.ready_timeout_s:g} s ({len(pods.ready)} ready, "
                    f"{len(pods.starting)} starting: {', '.join(pods.starting) or '-'})")
            self.sleep(self.poll_s)

    def restore_hint(self) -> str:
        return (f"kubectl -n {self.ref.namespace} scale deployment/{self.ref.name} "
                f"--replicas={self.original}")

    @contextmanager
    def holding(self, say: Callable[[str], None] = print) -> Iterator[Scaler]:
        """The block inside which the count may change; the count read on entry is put back
        and awaited when it is left, whatever ends it. A failure to put it back is said with
        the command that would, and raised as ``WorkloadError`` (unless another error is on
        its way)."""
        self.original = self.replicas()
        say(f"replicas: {self.ref} has {self.original} now; if this process is killed, put "
            f"it back with: {self.restore_hint()}")
        failed: BaseException | None = None
        try:
            yield self
        except BaseException as exc:
            failed = exc
            raise
        finally:
            with ignoring_signals():
                try:
                    if self.replicas() != self.original:
                        self.patch(self.original)
                    pods = self.settle(self.original)
                    say(f"replicas: restored: {self.ref} has {self.original} "
                        f"({len(pods.ready)} ready)")
                except WorkloadError as exc:
                    line = (f"replicas: could NOT put the count back ({exc}): "
                            f"{self.restore_hint()}")
                    say(line)
                    if failed is None:
                        raise WorkloadError(line) from None

