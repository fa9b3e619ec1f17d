"""How to make a limit permanent, per kind of target, in words and commands (pure).

A limit changed in place lasts until whatever made the group makes it again (a restart, a
reboot, a rollout): the answer says where the limit lives for that kind of target.

- a systemd unit (a group named ``*.service``, ``*.scope``, ``*.slice``): ``CPUQuota=`` (and
  ``CPUQuotaPeriodSec=`` for a period other than 100 ms), live with ``systemctl set-property``;
- a Docker container: ``docker update --cpus`` now, ``docker run --cpus`` / compose ``cpus:``;
- a Kubernetes Deployment: ``resources.limits.cpu``, by ``kubectl patch`` or a kustomize patch;
- any other group: its quota file, which whoever creates the group must write each time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from client.analysis.advise import docker_flags, kubernetes_cpu
from client.run.limiters.kubernetes import (deployment_patch, pod_level_deployment_patch,
                                            pod_request_for)
from cpuquota.limit import Limit

__all__ = ["PERMANENT", "cgroup_permanent", "docker_permanent", "kubernetes_permanent",
           "pod_permanent", "systemd_permanent", "permanent_lines", "systemd_unit"]

UNIT_SUFFIXES = (".service", ".scope", ".slice")


def systemd_unit(group: str) -> str | None:
    """The systemd unit a group path belongs to (its last component that is a unit), or None:
    ``/system.slice/myapp.service`` -> ``myapp.service``."""
    for part in reversed([p for p in group.split("/") if p]):
        if part.endswith(UNIT_SUFFIXES):
            return part
    return None


def _percent(limit: Limit) -> str:
    return f"{limit.cpus * 100:.4g}%"


def systemd_permanent(unit: str, limit: Limit) -> list[str]:
    period = (f" CPUQuotaPeriodSec={limit.period_ms:g}ms" if limit.period_ms != 100 else "")
    section = "Slice" if unit.endswith(".slice") else "Scope" if unit.endswith(".scope") \
        else "Service"
    lines = [f"systemd unit {unit}: CPUQuota={_percent(limit)}{period}",
             f"  now and across restarts: systemctl set-property {unit} "
             f"CPUQuota={_percent(limit)}{period}"]
    if section != "Scope":   # a scope has no unit file of its own
        lines.append(f"  or in the unit file's [{section}] section: CPUQuota={_percent(limit)}"
                     + (f"\\n{period.strip()}" if period else ""))
    return lines


def cgroup_permanent(directory: Path, version: int, group: str, limit: Limit) -> list[str]:
    unit = systemd_unit(group)
    if unit is not None:
        return systemd_permanent(unit, limit)
    if version == 1:
        now = (f"echo {limit.period_us} > {directory}/cpu.cfs_period_us; "
               f"echo {limit.quota_us} > {directory}/cpu.cfs_quota_us")
    else:
        now = f"echo '{limit.quota_us} {limit.period_us}' > {directory}/cpu.max"
    return [f"cgroup {group}: {now}",
            "  the group's file keeps it only while the group lives: whatever creates the "
            f"group must write it (a systemd unit: CPUQuota={_percent(limit)}; docker run "
            f"{docker_flags(limit)}; Kubernetes limits.cpu: {kubernetes_cpu(limit)})"]


def docker_permanent(name: str, limit: Limit) -> list[str]:
    return [f"container {name}: docker update {docker_flags(limit)} {name} (kept across "
            "restarts of this container)",
            f"  a new container: docker run {docker_flags(limit)} ...",
            f"  docker compose: the service's cpus: \"{limit.cpus:g}\" (or deploy.resources."
            f"limits.cpus: \"{limit.cpus:g}\")"]


def kubernetes_permanent(namespace: str, deployment: str, container: str,
                         limit: Limit, request: str | None = None) -> list[str]:
    """The ``kubectl patch`` line and a kustomize patch for a Deployment's container;
    ``request``: a ``requests.cpu`` to write beside the limit (a Guaranteed pod's, or one the
    new limit would be below)."""
    cpu = kubernetes_cpu(limit)
    patch = deployment_patch(container, limit, request)
    period = ("" if limit.period_ms == 100 else
              f" (the period, {limit.period_ms:g} ms, is per node: kubelet "
              "--cpu-cfs-quota-period)")
    lines = [f"Deployment {namespace}/{deployment}, container {container}: limits.cpu {cpu}"
             + (f", requests.cpu {request}" if request is not None else "") + period,
             f"  kubectl patch deployment {deployment} -n {namespace} --type strategic -p "
             f"'{json.dumps(patch, separators=(',', ':'))}'",
             "  kustomize (patches: - path: cpu-limit.yaml), cpu-limit.yaml:",
             "    apiVersion: apps/v1",
             "    kind: Deployment",
             "    metadata:",
             f"      name: {deployment}",
             f"      namespace: {namespace}",
             "    spec:",
             "      template:",
             "        spec:",
             "          containers:",
             f"          - name: {container}",
             "            resources:",
             "              limits:",
             f"                cpu: {cpu}"]
    if request is not None:
        lines += ["              requests:", f"                cpu: {request}"]
    return lines


def pod_level_permanent(namespace: str, deployment: str, limit: Limit,
                        request: str | None = None,
                        tied: Mapping[str, float | None] | None = None) -> list[str]:
    """The ``kubectl patch`` line for a Deployment whose pod-level limit binds (its pod
    template's ``spec.resources``, KEP-2837)."""
    cpu = kubernetes_cpu(limit)
    patch = pod_level_deployment_patch(limit, request, tied)
    lines = [f"Deployment {namespace}/{deployment}, pod-level spec.resources: limits.cpu {cpu}"
             + (f", requests.cpu {request}" if request is not None else ""),
             f"  kubectl patch deployment {deployment} -n {namespace} --type strategic -p "
             f"'{json.dumps(patch, separators=(',', ':'))}'",
             "  kustomize: the same under spec.template.spec.resources of a patch of "
             f"Deployment {deployment}"]
    return lines


def pod_permanent(names: Mapping[str, Any], limit: Limit) -> list[str]:
    """A pod's limit for good: its Deployment's patch, or where a bare pod's limit lives."""
    namespace, container = str(names["namespace"]), str(names["container"])
    request = pod_request_for(names, limit)
    if names.get("level") == "pod":
        if names.get("owner"):
            return pod_level_permanent(namespace, str(names["owner"]), limit, request,
                                       names.get("tied") or None)
        return [f"pod {namespace}/{names['pod']} (no Deployment): a resize lasts until the pod "
                f"is made again; set spec.resources.limits.cpu: {kubernetes_cpu(limit)} (the "
                "pod level) in whatever makes it"]
    if names.get("owner"):
        return kubernetes_permanent(namespace, str(names["owner"]), container, limit, request)
    return [f"pod {namespace}/{names['pod']} (no Deployment): a resize lasts until the pod is "
            f"made again; set resources.limits.cpu: {kubernetes_cpu(limit)} of container "
            f"{container} in whatever makes it"]


PERMANENT: dict[str, Callable[[Mapping[str, Any], Limit], list[str]]] = {
    "cgroup": lambda names, limit: cgroup_permanent(Path(names["directory"]),
                                                    int(names["version"]), str(names["group"]),
                                                    limit),
    "docker": lambda names, limit: docker_permanent(str(names["name"]), limit),
    "k8s": pod_permanent,
}


def permanent_lines(kind: str, names: Mapping[str, Any], limit: Limit) -> list[str]:
    """How to keep ``limit`` for a target of ``kind`` named by ``names`` (a limiter's)."""
    words = PERMANENT.get(kind)
    return words(names, limit) if words is not None else []
