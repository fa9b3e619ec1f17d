"""The ingress controller: Traefik (built here from the Go module proxy, ``CGO_ENABLED=0``),
its RBAC, its IngressClass ``traefik`` and a Service, as one kubectl-apply-able List."""
from __future__ import annotations

import json

from kubenode.files import TRAEFIK_IMAGE

__all__ = ["traefik_manifests", "INGRESS_CLASS", "WEB_PORT"]

INGRESS_CLASS = "traefik"
WEB_PORT = 8000


def traefik_manifests() -> str:
    labels = {"app.kubernetes.io/name": "traefik"}
    items: list[dict[str, object]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "traefik", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "throttle-lab:traefik"},
         "rules": [
             {"apiGroups": [""], "resources": ["services", "endpoints", "secrets", "nodes"],
              "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
              "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["networking.k8s.io", "extensions"],
              "resources": ["ingresses", "ingressclasses"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["networking.k8s.io", "extensions"], "resources": ["ingresses/status"],
              "verbs": ["update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "throttle-lab:traefik"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "throttle-lab:traefik"},
         "subjects": [{"kind": "ServiceAccount", "name": "traefik", "namespace": "kube-system"}]},
        {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
         "metadata": {"name": INGRESS_CLASS},
         "spec": {"controller": "traefik.io/ingress-controller"}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "traefik", "namespace": "kube-system", "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": "traefik",
                      "terminationGracePeriodSeconds": 1,
                      "containers": [{
                          "name": "traefik", "image": TRAEFIK_IMAGE,
                          "imagePullPolicy": "Never",
                          "args": ["--providers.kubernetesingress",
                                   f"--entrypoints.web.address=:{WEB_PORT}",
                                   "--accesslog=true", "--ping=true",
                                   "--ping.entrypoint=web"],
                          "ports": [{"name": "web", "containerPort": WEB_PORT}],
                          "readinessProbe": {"httpGet": {"path": "/ping", "port": WEB_PORT},
                                             "periodSeconds": 2},
                          "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "traefik", "namespace": "kube-system", "labels": labels},
         "spec": {"selector": labels, "ports": [{"name": "web", "port": 80,
                                                  "targetPort": WEB_PORT}]}},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1)
