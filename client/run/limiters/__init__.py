"""Limiters: change a *running* service's CPU limit in place and read it back.

``advise --cgroup TARGET`` and ``sweep --cgroup TARGET`` measure the user's own service at
other limits without restarting it. Each kind of target has one module that knows how its
limit is set (``client.run.targets`` is the same idea for the services the tool starts):

==========  =========================================================================
cgroup      a cgroup directory or ``pid:PID``: the quota file of the level that holds the
            quota (``cpu.cfs_quota_us``/``cpu.cfs_period_us`` on v1, ``cpu.max`` on v2),
            as ``--cgroup`` resolution finds it (``client.run.limiters.cgroupfs``)
docker      ``docker:NAME``: ``docker update --cpus`` (``client.run.limiters.docker``)
k8s         ``k8s:NS/POD[/CONTAINER]``: the pod's ``resize`` subresource through the official
            ``kubernetes`` client, QoS class kept (``client.run.limiters.kubernetes``);
            ``--k8s`` with several running pods: each alike (``client.run.limiters.pods``)
==========  =========================================================================

A :class:`Limiter` says the limit in force (``read``: the quota file as the kernel shows it),
sets one (``apply``: returns only once the quota file reads the new limit back, else
:class:`LimiterError`), refuses limits it cannot set (``check``); ``kind`` and ``names`` say what it is, for the words
that make an answer permanent (``client.render.permanent``). ``LIMITERS`` maps the TARGET's prefix to the
module's class: a new kind of target is one module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from client.run.cgroup_lookup import CommandRunner, run_command
from client.run.service_group import ServiceGroup
from client.run.limiters.base import (Limiter, LimiterError, quota_file_problem, read_quota,
                                      wait_for_quota)
from client.run.limiters.cgroupfs import CgroupLimiter
from client.run.limiters.docker import DockerLimiter
from client.run.kube_api import REQUEST_TIMEOUT
__all__ = ["LIMITERS", "Limiter", "LimiterError", "LimiterOptions", "limiter_for", "quota_file_problem",
           "read_quota", "wait_for_quota"]


@dataclass(frozen=True)
class LimiterOptions:
    """What the user allowed: a container that restarts on a resize (``--allow-restart``)."""

    allow_restart: bool = False


LimiterFactory = Callable[[ServiceGroup, CommandRunner, LimiterOptions], Limiter]


def _kubernetes(target: ServiceGroup, run: CommandRunner, options: LimiterOptions) -> Limiter:
    from client.run.cgroup_lookup import parse_k8s_spec
    from client.run.kube_api import KubeError, connect
    from client.run.limiters.kubernetes import KubernetesLimiter

    namespace, pod, container = parse_k8s_spec(target.spec)
    try:
        api = connect()
    except KubeError as exc:
        raise LimiterError(str(exc)) from None
    return KubernetesLimiter(target, api.core, namespace, pod, container, to_json=api.to_json,
                             allow_restart=options.allow_restart, server=api.server,
                             request_timeout=REQUEST_TIMEOUT, apps=api.apps)


LIMITERS: dict[str, LimiterFactory] = {
    "path": lambda target, run, options: CgroupLimiter(target),
    "pid": lambda target, run, options: CgroupLimiter(target),
    "docker": lambda target, run, options: DockerLimiter(target, run),
    "k8s": _kubernetes,
}


def limiter_for(target: ServiceGroup, run: CommandRunner = run_command,
                options: LimiterOptions = LimiterOptions()) -> Limiter:
    """The limiter of a resolved ``--cgroup`` target, by the prefix of what the user gave."""
    spec = target.spec
    prefix = spec.split(":", 1)[0] if ":" in spec and not spec.startswith("/") else "path"
    if prefix == "kubernetes":
        prefix = "k8s"
    factory = LIMITERS.get(prefix)
    if factory is None:
        kinds = ", ".join(k for k in LIMITERS)
        raise LimiterError(f"--cgroup {spec}: changing the limit of a {prefix}: target is not "
                           f"supported yet (in place: {kinds})")
    return factory(target, run, options)
