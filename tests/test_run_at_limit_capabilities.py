"""What each kind of service at a limit declares it can do (``client.run.at_limit.Capabilities``)
and what the seam's defaults do: burn-service started for each run puts nothing back and keeps
nothing; a running service changed in place restores, keeps, shows its group's counters, and
patches only a pod with an owner; ``--apply`` elsewhere is one line."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from client.run.at_limit import Capabilities, StartedService
from client.run.inplace import InPlace
from client.run.limiters.base import Limiter
from client.run.measure import Traffic
from client.run.plan import LoadPlan
from client.run.targets import resolve_backend
from cpuquota.limit import Limit


class FakeLimiter(Limiter):
    """A limiter of a given kind that holds its limit in memory."""

    def __init__(self, kind: str, names: dict[str, Any], can_remove: bool) -> None:
        self.kind, self.names, self.can_remove = kind, names, can_remove
        self.description = f"a fake {kind}"
        self.limit: Limit | None = Limit(1.0)
        self.patched: list[Limit] = []

    def read(self) -> Limit | None:
        return self.limit

    def check(self, limit: Limit | None) -> None:
        pass

    def apply(self, limit: Limit | None) -> None:
        self.limit = limit

    def restore_hint(self, limit: Limit | None) -> str:
        return "put it back"

    def patch_deployment(self, limit: Limit) -> str:
        self.patched.append(limit)
        return f"applied {limit.cpus:g}"


def test_a_started_service_declares_nothing_to_put_back() -> None:
    backend, _ = resolve_backend("inprocess")
    at = StartedService(backend, Traffic(LoadPlan.from_options(requests=3)), ("http-timing",))
    assert at.capabilities == Capabilities()
    assert at.capabilities.removes and at.can_remove
    assert not (at.capabilities.restores or at.capabilities.keeps or at.capabilities.evidence
                or at.capabilities.patches)
    assert at.state() is None and at.names == {} and at.kind == at.name
    assert at.spec == at.description
    with pytest.raises(ValueError, match="no owner to patch"):
        at.patch_for_good(Limit(0.5))
    assert at.with_replicas(4).replicas == 4


@pytest.mark.parametrize("names, can_remove, patches", [
    ({"namespace": "shop", "pod": "api-1", "owner": "api"}, False, True),
    ({"directory": "/sys/fs/cgroup/x"}, True, False),
])
def test_a_running_service_restores_keeps_and_shows_its_group(
        names: dict[str, Any], can_remove: bool, patches: bool) -> None:
    limiter = FakeLimiter("k8s" if "pod" in names else "cgroup", names, can_remove)
    where = SimpleNamespace(spec="the group")   # where its throttling is read: not read here
    at = InPlace(where, limiter, Limit(1.0), None)  # type: ignore[arg-type]
    caps = at.capabilities
    assert caps == Capabilities(removes=can_remove, restores=True, keeps=True, evidence=True,
                                patches=patches)
    assert at.can_remove is can_remove and at.kind == limiter.kind and at.names == names
    at.keep(Limit(0.5))
    assert at.restore_to == Limit(0.5)
    assert at.patch_for_good(Limit(0.5)) == "applied 0.5" and limiter.patched == [Limit(0.5)]
    assert at.spec == "the group" and at.state()["original"] == {  # type: ignore[index]
        "cpus": 1.0, "quota_us": 100000, "period_us": 100000, "burst_us": 0}
    with pytest.raises(ValueError, match="starts services of its own"):
        at.with_replicas(2)
