"""A kustomize overlay over the project's ``k8s/`` for this node: the Ingress class of the
node's controller (Traefik), and optionally the Job holding its raw data for copying."""
from __future__ import annotations

import os
from pathlib import Path

from kubenode.traefik import INGRESS_CLASS

__all__ = ["overlay_kustomization", "write_overlay"]


def overlay_kustomization(k8s: str, *, ingress_class: str = INGRESS_CLASS,
                          hold_for_copy: int = 0) -> str:
    text = f"""# made by kubenode: {k8s} on the throttle-lab node
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {k8s}
patches:
  - target:
      kind: Ingress
    patch: |-
      - op: replace
        path: /spec/ingressClassName
        value: {ingress_class}
"""
    if hold_for_copy:
        text += f"""  - target:
      kind: Job
      name: http-timing
    patch: |-
      apiVersion: batch/v1
      kind: Job
      metadata:
        name: http-timing
      spec:
        template:
          spec:
            containers:
              - name: http-timing
                env:
                  - name: HOLD_FOR_COPY
                    value: "{hold_for_copy}"
"""
    return text


def write_overlay(directory: Path, k8s: Path, *, ingress_class: str = INGRESS_CLASS,
                  hold_for_copy: int = 0) -> Path:
    """Write the overlay's kustomization.yaml into ``directory`` (``kubectl apply -k directory``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(overlay_kustomization(
        os.path.relpath(k8s, directory), ingress_class=ingress_class, hold_for_copy=hold_for_copy))
    return directory
