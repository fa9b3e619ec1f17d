"""The cluster's own add-ons, applied once the node is Ready: CoreDNS (cluster DNS at
10.96.0.10, the kubelet's clusterDNS), built here and imported as an image."""
from __future__ import annotations

import json

from kubenode.config import DNS_SERVICE_IP
from kubenode.files import COREDNS_IMAGE

__all__ = ["coredns_manifests", "COREFILE"]

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
