"""The ingress controller: Traefik (built here from the Go module proxy, ``CGO_ENABLED=0``),
its RBAC, its IngressClass ``traefik`` and a Service, as one kubectl-apply-able List.

Its access log is JSON (``--accesslog.format=json``: each request's start in ns, its duration,
the pod that served it) in a file of the node's state directory (a hostPath volume), so that
the host reads it as it grows: ``http-timing import <state>/traefik/access.log --timeline ...``.
The Deployment carries a digest of the whole List (``MANIFEST_ANNOTATION``): a node whose
Traefik was applied from other manifests is updated in place by ``up``."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kubenode.files import TRAEFIK_IMAGE

__all__ = ["traefik_manifests", "manifest_digest", "access_log", "INGRESS_CLASS", "WEB_PORT",
           "MANIFEST_ANNOTATION", "LOG_DIR_IN_POD"]

INGRESS_CLASS = "traefik"
WEB_PORT = 8000
MANIFEST_ANNOTATION = "throttle-lab.io/manifests"
LOG_DIR_IN_POD = "/var/log/traefik"
ACCESS_LOG = "access.log"


def access_log(log_dir: Path) -> Path:
    """Where the host reads Traefik's access log (``log_dir``: the node's ``traefik`` state
    directory, the hostPath the pod writes into)."""
    return log_dir / ACCESS_LOG


def manifest_digest(log_dir: Path) -> str:
    """The digest of the List without it: what the running Deployment must carry."""
    return hashlib.sha256(_manifests(log_dir, "").encode()).hexdigest()[:16]


def traefik_manifests(log_dir: Path) -> str:
    return _manifests(log_dir, manifest_digest(log_dir))


def _manifests(log_dir: Path, digest: str) -> str:
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
         "metadata": {"name": "traefik", "namespace": "kube-system", "labels": labels,
                      "annotations": {MANIFEST_ANNOTATION: digest}},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": "traefik",
                      "terminationGracePeriodSeconds": 1,
                      "containers": [{
                          "name": "traefik", "image": TRAEFIK_IMAGE,
                          "imagePullPolicy": "Never",
                          "args": ["--providers.kubernetesingress",
                                   f"--entrypoints.web.address=:{WEB_PORT}",
                                   "--accesslog=true", "--accesslog.format=json",
                                   f"--accesslog.filepath={LOG_DIR_IN_POD}/{ACCESS_LOG}",
                                   "--ping=true", "--ping.entrypoint=web"],
                          "ports": [{"name": "web", "containerPort": WEB_PORT}],
                          "readinessProbe": {"httpGet": {"path": "/ping", "port": WEB_PORT},
                                             "periodSeconds": 2},
                          "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                          "volumeMounts": [{"name": "access-log",
                                            "mountPath": LOG_DIR_IN_POD}]}],
                      "volumes": [{"name": "access-log", "hostPath": {
                          "path": str(log_dir), "type": "DirectoryOrCreate"}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "traefik", "namespace": "kube-system", "labels": labels},
         "spec": {"selector": labels, "ports": [{"name": "web", "port": 80,
                                                  "targetPort": WEB_PORT}]}},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1)
