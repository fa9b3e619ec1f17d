"""Several pods of one Deployment resized alike (``--k8s NS/deployment/NAME`` with more than
one running pod): one :class:`client.run.limiters.kubernetes.KubernetesLimiter` per pod, behind
the same :class:`client.run.limiters.Limiter` interface.

- **apply** resizes each pod in turn, each awaited and read back (its
  ``status.containerStatuses[].resources`` and its quota file) before the next; a pod whose
  resize fails ends it (the restore then puts every pod back).
- **read** is the limit every pod's quota file shows; when they differ (a restore cut short)
  it is None, so the restore sets them all again.
- a pod on another node (``client.run.limiters.kubernetes.through_agent``) has its quota read
  back from its own node's agent; the description names each agent.
- **restore_hint** is one ``kubectl patch ... --subresource resize`` per pod; **unchanged**
  says each pod's restart count and container id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from client.run.limiters.base import Limiter, LimiterError, machine_cpus, same_limit
from client.run.limiters.kubernetes import KubernetesLimiter
from client.run.limiters.quota_source import AgentQuota
from cpuquota.limit import Limit

__all__ = ["PodsLimiter"]


class PodsLimiter(Limiter):
    """The pods of ``deployment`` (``NS/NAME``), each with its own limiter, set alike."""

    kind = "k8s"
    can_remove = False

    def __init__(self, deployment: str, limiters: Sequence[KubernetesLimiter]) -> None:
        if len(limiters) < 2:
            raise ValueError("PodsLimiter is for two pods or more")
        self.deployment, self.limiters = deployment, list(limiters)
        first = self.limiters[0]
        limits = [limiter.read() for limiter in self.limiters]
        if not all(same_limit(limit, limits[0]) for limit in limits):
            said = ", ".join(f"{lim.pod} {_cpus(limit)}"
                             for lim, limit in zip(self.limiters, limits))
            raise LimiterError(f"deployment {deployment}'s pods have different cpu limits now "
                               f"({said}): a rollout under way? Try again once it is done")
        pods = [limiter.pod for limiter in self.limiters]
        self.description = (f"pods/resize of the {len(pods)} pods of deployment {deployment} "
                            f"({', '.join(pods)}), {first.what}")
        agents = [lim.quota.where for lim in self.limiters if isinstance(lim.quota, AgentQuota)]
        if agents:   # pods on other nodes: each quota read back from its node's agent
            self.description += f", each quota read back from {', '.join(agents)}"
        self.names: dict[str, Any] = {**first.names, "pods": pods}

    def read(self) -> Limit | None:
        limits = [limiter.read() for limiter in self.limiters]
        return limits[0] if all(same_limit(limit, limits[0]) for limit in limits) else None

    def node_cpus(self) -> tuple[int, str] | None:
        """Pods on other nodes: the fewest CPUs of the pods' machines (a limit is the same on
        every pod)."""
        each = [lim.node_cpus() for lim in self.limiters]
        found = [cpus for cpus in each if cpus is not None]
        if not found:
            return None
        if len(found) < len(each):   # some pods on this machine
            found.append(machine_cpus())
        return min(found, key=lambda cpus: cpus[0])

    def check(self, limit: Limit | None) -> None:
        for limiter in self.limiters:
            limiter.check(limit)

    def apply(self, limit: Limit | None) -> None:
        for limiter in self.limiters:
            if not same_limit(limiter.read(), limit):
                limiter.apply(limit)

    def drift(self, limit: Limit | None) -> str | None:
        """Each pod's :meth:`KubernetesLimiter.drift`, joined (None: every pod holds it)."""
        found = [words for limiter in self.limiters if (words := limiter.drift(limit))]
        return "; ".join(found) if found else None

    def unchanged(self) -> str:
        return "; ".join(limiter.unchanged() for limiter in self.limiters)

    def patch_deployment(self, limit: Limit) -> str:
        return self.limiters[0].patch_deployment(limit)

    def restore_hint(self, limit: Limit | None) -> str:
        return "; ".join(limiter.restore_hint(limit) for limiter in self.limiters)


def _cpus(limit: Limit | None) -> str:
    return "no limit" if limit is None else f"{limit.cpus:g} CPU"
