"""A single-node Kubernetes cluster on this host, in namespaces of its own.

``python -m kubenode up|down|status|build``; ``make kube-node`` / ``make kube-down`` and the
tests' session fixture call :mod:`kubenode.node`. The bring-up is a list of small steps
(:mod:`kubenode.steps`), each with a check, a do and an undo.
"""
from __future__ import annotations

__all__: list[str] = []
