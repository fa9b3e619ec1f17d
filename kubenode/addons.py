"""The cluster's own add-ons, applied once the node is Ready: CoreDNS (cluster DNS at
10.96.0.10, the kubelet's clusterDNS), built here and imported as an image; and the API
objects of metrics-server (a host process, not a pod: no image), which serves the resource
metrics API (``metrics.k8s.io``) the HPA controller and ``kubectl top`` read."""
from __future__ import annotations

import json

from kubenode.config import DNS_SERVICE_IP, METRICS_SERVER_PORT, NODE_ADDR
from kubenode.files import COREDNS_IMAGE

__all__ = ["coredns_manifests", "COREFILE", "metrics_server_manifests", "METRICS_APISERVICE"]

METRICS_APISERVICE = "v1beta1.metrics.k8s.io"
METRICS_USER = "system:metrics-server"   # its client certificate's CN (kubenode.pki)

# Names under cluster.local (and the reverse zones) from the API; anything else NXDOMAIN at once:
# the node has no upstream resolver (without this CoreDNS answers SERVFAIL after a timeout).
# Two server blocks: the template plugin runs before kubernetes inside one block.
COREFILE = """cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    errors
    ready
    health
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
    }
    cache 30
}
.:53 {
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
"""


def coredns_manifests() -> str:
    """A kubectl-apply-able List (JSON) of everything CoreDNS needs."""
    labels = {"k8s-app": "kube-dns"}
    items: list[dict[str, object]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "coredns", "namespace": "kube-system"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:coredns"},
         "rules": [{"apiGroups": [""], "resources": ["endpoints", "services", "pods",
                                                      "namespaces"],
                    "verbs": ["list", "watch"]},
                   {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                    "verbs": ["list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "system:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "system:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns",
                       "namespace": "kube-system"}]},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "coredns", "namespace": "kube-system"},
         "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "coredns", "namespace": "kube-system", "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {
                      "serviceAccountName": "coredns",
                      "dnsPolicy": "Default",
                      "priorityClassName": "system-cluster-critical",
                      "terminationGracePeriodSeconds": 1,
                      "containers": [{
                          "name": "coredns", "image": COREDNS_IMAGE,
                          "imagePullPolicy": "Never",
                          "args": ["-conf", "/etc/coredns/Corefile"],
                          "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53,
                                     "protocol": "TCP"}],
                          "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                        "limits": {"memory": "170Mi"}},
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181},
                                             "periodSeconds": 2},
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns"}]}],
                      "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
         "spec": {"selector": labels, "clusterIP": DNS_SERVICE_IP,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1)


def metrics_server_manifests(ca_bundle_b64: str) -> str:
    """A kubectl-apply-able List (JSON): metrics-server's user's rights (read nodes, pods and the
    kubelets' metrics; delegated authentication and authorization; the front proxy's CA), a
    Service with no selector and its one EndpointSlice naming the node's address (where the
    host process listens; the API server dials it, ``--enable-aggregator-routing``), and the
    APIService ``v1beta1.metrics.k8s.io`` on that Service, checked against the node's CA."""
    user = [{"kind": "User", "name": METRICS_USER, "apiGroup": "rbac.authorization.k8s.io"}]
    labels = {"k8s-app": "metrics-server"}

    def binding(kind: str, name: str, role_kind: str, role: str,
                namespace: str | None = None) -> dict[str, object]:
        meta: dict[str, object] = {"name": name, "labels": labels}
        if namespace:
            meta["namespace"] = namespace
        return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                            "name": role}, "subjects": user}

    items: list[dict[str, object]] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": METRICS_USER, "labels": labels},
         "rules": [{"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                   {"apiGroups": [""], "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "system:aggregated-metrics-reader",
                      "labels": {**labels,
                                 "rbac.authorization.k8s.io/aggregate-to-view": "true",
                                 "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                                 "rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
         "rules": [{"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"]}]},
        binding("ClusterRoleBinding", METRICS_USER, "ClusterRole", METRICS_USER),
        binding("ClusterRoleBinding", "metrics-server:system:auth-delegator", "ClusterRole",
                "system:auth-delegator"),
        binding("RoleBinding", "metrics-server-auth-reader", "Role",
                "extension-apiserver-authentication-reader", "kube-system"),
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": "metrics-server", "namespace": "kube-system", "labels": labels},
         "spec": {"ports": [{"name": "https", "port": 443, "protocol": "TCP",
                             "targetPort": METRICS_SERVER_PORT}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "metrics-server-host", "namespace": "kube-system",
                      "labels": {**labels, "kubernetes.io/service-name": "metrics-server",
                                 "endpointslice.kubernetes.io/managed-by": "throttle-lab"}},
         "addressType": "IPv4",
         "ports": [{"name": "https", "port": METRICS_SERVER_PORT, "protocol": "TCP"}],
         "endpoints": [{"addresses": [NODE_ADDR], "conditions": {"ready": True}}]},
        {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
         "metadata": {"name": METRICS_APISERVICE, "labels": labels},
         "spec": {"group": "metrics.k8s.io", "version": "v1beta1",
                  "service": {"name": "metrics-server", "namespace": "kube-system", "port": 443},
                  "caBundle": ca_bundle_b64, "groupPriorityMinimum": 100,
                  "versionPriority": 100}},
    ]
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1)
