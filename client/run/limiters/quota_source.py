"""Where a pod's quota is read back after a resize: its group's files on this machine
(:class:`GroupFiles`), or, for a pod on another node, that node's agent (:class:`AgentQuota`,
through the API server's proxy: a kubeconfig is enough).

The agent re-reads each watched group's quota files every second and starts a new timeline
segment when the quota changes; the metadata of its latest segment (``cgroup.quota_us``,
``period_us``, ``burst_us``) is the quota its rows are counted under. A resize is in force
there once that metadata says the new quota and the segment has a row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from client.run.agent_timeline import AgentLink, AgentTimelineError, NoTimeline
from client.run.limiters.base import LimiterError, read_quota, same_limit, wait_for_quota
from cpuquota.limit import Limit, LimitError

__all__ = ["AgentQuota", "GroupFiles", "QuotaSource", "limit_of"]

RECENT_S = 10.0     # the window the agent is asked for: its rows are at most a second apart


class QuotaSource(Protocol):
    """The quota a pod's group is throttled under, as the kernel's files show it."""

    @property
    def where(self) -> str:
        """Where it is read, in a few words."""

    def read(self) -> Limit | None:
        """The quota now (None: none); ``LimiterError`` when it cannot be read."""

    def wait_for(self, limit: Limit | None, timeout: float) -> Limit | None:
        """Return once ``limit`` is in force (what was read); ``LimiterError`` if not within
        ``timeout`` seconds."""

    def node_cpus(self) -> tuple[int, str] | None:
        """The CPUs of the group's machine and their words, where it is not this one (None:
        this machine's, or not known)."""


@dataclass(frozen=True)
class GroupFiles:
    """The group's quota files on this machine."""

    directory: Path
    version: int

    @property
    def where(self) -> str:
        return str(self.directory)

    def read(self) -> Limit | None:
        return read_quota(self.directory, self.version)

    def node_cpus(self) -> tuple[int, str] | None:
        return None   # the files are this machine's

    def wait_for(self, limit: Limit | None, timeout: float) -> Limit | None:
        return wait_for_quota(self.directory, self.version, limit, timeout=timeout)


def limit_of(cgroup: Mapping[str, Any] | None) -> Limit | None:
    """The quota in force that a timeline's ``cgroup`` metadata names (None: none), as
    :func:`client.run.limiters.base.read_quota` reads it from the files."""
    quota, period = (cgroup or {}).get("quota_us"), (cgroup or {}).get("period_us")
    if not isinstance(quota, (int, float)) or not isinstance(period, (int, float)) or \
            quota <= 0 or period <= 0:
        return None
    burst = (cgroup or {}).get("burst_us") or 0
    try:
        return Limit(quota / period, period / 1000, min(burst, quota) / 1000, "cgroup")
    except LimitError as exc:
        raise LimiterError(f"the agent's timeline names an unexpected quota: {exc}") from None


Fetch = Callable[[float], Mapping[str, Any]]   # from (Unix s) -> the window's metadata


@dataclass(frozen=True)
class AgentQuota:
    """The quota the pod's node's agent counts the pod's rows under (see the module
    docstring). ``fetch``: the metadata of the agent's window from a time on (default: the
    link's, through the API server's proxy)."""

    link: AgentLink
    fetch: Fetch | None = None

    @property
    def where(self) -> str:
        link = self.link
        return f"the node agent {link.namespace}/{link.agent}'s timeline on node {link.node}"

    def _latest(self) -> Mapping[str, Any] | None:
        """The metadata of the agent's latest rows of the pod (None: no row in the last
        ``RECENT_S``: a segment just begun has none yet)."""
        fetch = self.fetch or (lambda since: self.link.metadata(since))
        try:
            return fetch(time.time() - RECENT_S)
        except NoTimeline:
            return None
        except AgentTimelineError as exc:
            raise LimiterError(f"{self.link.ref}: {exc}") from None

    def read(self) -> Limit | None:
        meta = self._latest()
        if meta is None:
            raise LimiterError(f"{self.link.ref}: {self.where} has no row of the pod in the "
                               f"last {RECENT_S:g} s: is the agent recording it?")
        return limit_of(meta.get("cgroup"))

    def node_cpus(self) -> tuple[int, str] | None:
        """The CPUs of the pod's node, as its agent says (None: an agent that does not)."""
        meta = self._latest()
        cpus = None if meta is None else meta.get("host_cpus")
        if not isinstance(cpus, int) or cpus <= 0:
            return None
        return cpus, f"node {self.link.node}'s {cpus} CPUs"

    def wait_for(self, limit: Limit | None, timeout: float) -> Limit | None:
        deadline = time.monotonic() + timeout
        while True:
            meta = self._latest()
            found = None if meta is None else limit_of(meta.get("cgroup"))
            if meta is not None and same_limit(found, limit):
                return found
            if time.monotonic() >= deadline:
                want = "no quota" if limit is None else f"{limit.quota_us}/{limit.period_us} µs"
                have = ("no row yet" if meta is None else "no quota" if found is None else
                        f"{found.quota_us}/{found.period_us} µs")
                raise LimiterError(f"the limit is not in force: {self.where} counts "
                                   f"{self.link.ref} under {have}, not {want}, after "
                                   f"{timeout:g} s")
            time.sleep(0.25)
