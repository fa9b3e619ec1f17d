"""VerticalPodAutoscalers (``autoscaling.k8s.io``) that target a workload: a VPA in an updating
mode (``Auto``, ``Recreate``, ``InPlaceOrRecreate``) changes the pods' resources again with its
updater, so a limit ``advise`` tried or ``--apply`` wrote would not stay. ``advise --k8s`` and
``--apply`` stop at one (:func:`vpa_refusal`) unless told ``--despite-vpa``; ``cluster`` shows
each workload's VPA mode (:func:`vpa_modes`).

Whether the API has VPAs is asked of discovery first (every authenticated user may read it), so
a cluster without them needs no permission on them; one with them needs ``list
verticalpodautoscalers`` (k8s/advise-rbac.yaml grants it). A VPA leaves the CPU limit alone
when its policy for every container (``containerName: "*"``) is ``mode: Off``, leaves ``cpu``
out of ``controlledResources``, or has ``controlledValues: RequestsOnly``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from client.run.kube_api import KubeApi, REQUEST_TIMEOUT, api_problem

__all__ = ["GROUP", "UPDATING", "Vpa", "VpaError", "has_vpas", "list_vpas", "parse_vpas",
           "updating_vpa", "vpa_modes", "vpa_refusal"]

GROUP, VERSION, PLURAL = "autoscaling.k8s.io", "v1", "verticalpodautoscalers"
UPDATING = ("Auto", "Recreate", "InPlaceOrRecreate")   # the modes whose updater acts
DEFAULT_MODE = "Auto"   # an updatePolicy without updateMode

Obj = Mapping[str, Any]


class VpaError(RuntimeError):
    """The VPAs cannot be read; one line saying why and what to do."""


@dataclass(frozen=True)
class Vpa:
    """One VPA: what it targets and how it updates."""

    namespace: str
    name: str
    kind: str            # its targetRef's kind: Deployment, StatefulSet, DaemonSet...
    target: str          # its targetRef's name
    mode: str            # spec.updatePolicy.updateMode (Auto when not given)
    cpu_limit: bool      # its policy lets it change the CPU limit

    @property
    def updating(self) -> bool:
        """Whether its updater will change the pods' CPU limit again."""
        return self.mode in UPDATING and self.cpu_limit

    def words(self) -> str:
        """``VPA shop/web (updateMode InPlaceOrRecreate)``, and why it leaves the limit be."""
        why = "" if self.cpu_limit or self.mode not in UPDATING else \
            ", its policy leaves the CPU limit alone"
        return f"VPA {self.namespace}/{self.name} (updateMode {self.mode}{why})"


def _cpu_limit(spec: Obj) -> bool:
    """Whether the policy for every container lets the VPA change the CPU limit."""
    policies = ((spec.get("resourcePolicy") or {}).get("containerPolicies") or [])
    every = next((p for p in policies if p.get("containerName") == "*"), None)
    if every is None:
        return True
    if every.get("mode") == "Off" or every.get("controlledValues") == "RequestsOnly":
        return False
    resources = every.get("controlledResources")
    return resources is None or "cpu" in resources


def parse_vpas(items: Iterable[Obj]) -> list[Vpa]:
    """The VPAs of a ``list`` (the API's JSON); pure."""
    out = []
    for item in items:
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        ref = spec.get("targetRef") or {}
        mode = (spec.get("updatePolicy") or {}).get("updateMode") or DEFAULT_MODE
        out.append(Vpa(str(meta.get("namespace") or ""), str(meta.get("name") or ""),
                       str(ref.get("kind") or ""), str(ref.get("name") or ""), str(mode),
                       _cpu_limit(spec)))
    return out


def has_vpas(api: KubeApi) -> bool:
    """Whether the API serves ``autoscaling.k8s.io`` (discovery, open to every user), read
    as JSON (``get_json``: the core client's models take seconds to import)."""
    try:
        groups = api.get_json("/apis", REQUEST_TIMEOUT)
    except Exception as exc:
        raise VpaError(api_problem(exc, "get", "the API's groups (discovery)", "(all)", "",
                                   api.server)) from None
    return any(isinstance(g, dict) and g.get("name") == GROUP
               for g in (groups if isinstance(groups, dict) else {}).get("groups") or [])


def list_vpas(api: KubeApi, namespace: str | None) -> list[Vpa]:
    """The VPAs of ``namespace`` (None: all); [] when the API has none."""
    if not has_vpas(api):
        return []
    where = "" if namespace is None else f"/namespaces/{namespace}"
    listed: Any
    try:
        listed = api.get_json(f"/apis/{GROUP}/{VERSION}{where}/{PLURAL}", REQUEST_TIMEOUT)
    except Exception as exc:
        if getattr(exc, "status", None) == 404:   # the group without VPAs
            return []
        raise VpaError(api_problem(exc, "list", f"{PLURAL}.{GROUP}", namespace or "(all)", "",
                                   api.server)) from None
    if not isinstance(listed, dict):
        listed = {}
    return parse_vpas(listed.get("items") or [])


def vpa_modes(vpas: Iterable[Vpa]) -> dict[tuple[str, str, str], Vpa]:
    """(namespace, kind, name) of each VPA's target -> the VPA (an updating one first)."""
    out: dict[tuple[str, str, str], Vpa] = {}
    for vpa in sorted(vpas, key=lambda v: not v.updating):
        out.setdefault((vpa.namespace, vpa.kind, vpa.target), vpa)
    return out


def vpa_refusal(vpa: Vpa) -> str:
    """The one line that stops ``advise`` at a VPA that will change its target's limit."""
    return (f"{vpa.namespace}/{vpa.kind.lower()}/{vpa.target} is under {vpa.words()}: the VPA "
            "will change the limit again (its updater resizes or recreates the pods), so a "
            "limit advise tries or --apply writes would not stay; set its updateMode to Off or "
            "Initial, or give --despite-vpa to go on anyway")


def updating_vpa(namespace: str, kind: str, name: str, api: KubeApi | None = None
                 ) -> Vpa | None:
    """The VPA that will change ``kind`` ``namespace/name``'s CPU limit again (None: none
    will, or the API has no VPAs); ``VpaError`` or ``KubeError`` when that cannot be told."""
    from client.run.kube_api import connect

    found = vpa_modes(list_vpas(api or connect(), namespace)).get((namespace, kind, name))
    return found if found is not None and found.updating else None
