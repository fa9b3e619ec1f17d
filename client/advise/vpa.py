"""A VPA that would change the limit the advice sets or reads: ``advise`` on a Deployment's
pod, ``advise --passive --k8s``. In an updating mode (``Recreate``, ``InPlaceOrRecreate``,
``Auto``) it stops the advice unless the user says ``--despite-vpa``."""

from __future__ import annotations

from client.advise import AdviseError

__all__ = ["vpa_check"]


def vpa_check(namespace: str, kind: str, name: str, despite: bool) -> str | None:
    """An ``AdviseError`` (one line) where a VPA in an updating mode targets the workload,
    unless ``despite``: the VPA would change the limit again. With ``despite``, the line to
    say (None: no VPA, or none could be read)."""
    from client.run.k8s_vpa import VpaError, updating_vpa, vpa_refusal
    from client.run.kube_api import KubeError

    try:
        vpa = updating_vpa(namespace, kind, name)
    except (VpaError, KubeError) as exc:
        if despite:
            return None
        raise AdviseError(f"cannot tell whether a VPA targets {namespace}/{kind.lower()}/"
                          f"{name}: {exc}; --despite-vpa goes on without knowing") from None
    if vpa is None:
        return None
    if not despite:
        raise AdviseError(vpa_refusal(vpa))
    return (f"advise: --despite-vpa: {vpa.words()} targets {namespace}/{kind.lower()}/{name} "
            "and may change its limit meanwhile")
