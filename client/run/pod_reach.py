"""Where a ``k8s:NS/POD`` group is read: here, from its files (this machine is the pod's node),
or through the pod's node's agent by the API server's proxy (``client.run.agent_timeline``:
a kubeconfig is enough). :func:`reach` decides (pure); :func:`locate` tries the files first.

The files are read when the pod's group is found on this machine; when it is not (a laptop,
another node, no kubectl, no cgroup file system) its node's agent is asked. A pod that does not
exist, or that the user may not read, is said as kubectl says it. ``HTTP_TIMING_THROUGH_API=1``
asks the agent even where the files are (to compare the two, or when the files are not
readable here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from client.run.agent_timeline import PodRef, parse_pod_ref
from client.run.service_group import ServiceGroup, ServiceGroupError, NotHere

__all__ = ["THROUGH_API_ENV", "Reach", "forced_through_api", "locate", "pod_ref", "reach"]

THROUGH_API_ENV = "HTTP_TIMING_THROUGH_API"


@dataclass(frozen=True)
class Reach:
    agent: bool   # True: through the node's agent; False: the group's files here
    why: str


def forced_through_api(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for the agent even where the files are."""
    return environ.get(THROUGH_API_ENV, "").strip().lower() in ("1", "true", "yes")


def reach(spec: str, local: ServiceGroupError | None, forced: bool = False) -> Reach:
    """Where ``spec``'s group is read, given what looking for it here said (``local``: None
    when its files were found; not asked when ``forced``). Only a pod that is not here
    (:class:`NotHere`) goes to its agent: a pod that does not exist, or that the user may not
    read, is said as it is."""
    if not spec.startswith("k8s:"):
        return Reach(False, "not a pod: only its files can be read")
    if forced:
        return Reach(True, f"{THROUGH_API_ENV}=1: through its node's agent")
    if local is None:
        return Reach(False, "its group is on this machine")
    if isinstance(local, NotHere):
        return Reach(True, f"not on this machine ({local}): through its node's agent")
    return Reach(False, str(local))


def locate(spec: str, resolve: Callable[[str], ServiceGroup],
           environ: Mapping[str, str] = os.environ) -> ServiceGroup | PodRef:
    """The group's files when they are here, else the pod to ask its node's agent for;
    ``ServiceGroupError`` (one line) for a target that is neither."""
    forced = forced_through_api(environ)
    local: ServiceGroupError | None = None
    if not (forced and spec.startswith("k8s:")):
        try:
            return resolve(spec)
        except ServiceGroupError as exc:
            local = exc
    if not reach(spec, local, forced).agent:
        assert local is not None
        raise local
    return pod_ref(spec)


def pod_ref(spec: str) -> PodRef:
    """``k8s:NS/POD[/CONTAINER]`` as the agents know it (``ServiceGroupError`` if it is not)."""
    try:
        ref = parse_pod_ref(spec)
    except ValueError as exc:
        raise ServiceGroupError(str(exc)) from None
    if ref is None:
        raise ServiceGroupError(f"{spec}: not a pod")
    return ref
