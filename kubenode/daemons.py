"""The node's daemons' command lines (each started inside the node's namespaces)."""
from __future__ import annotations

from kubenode.config import API_PORT, METRICS_SERVER_PORT, NODE_ADDR, SERVICE_CIDR
from kubenode.context import Node

__all__ = ["containerd_cmd", "etcd_cmd", "apiserver_cmd", "controller_manager_cmd",
           "scheduler_cmd", "kubelet_cmd", "proxy_cmd", "metrics_server_cmd"]


def containerd_cmd(n: Node) -> list[str]:
    return [str(n.lay.containerd_dir / "containerd"), "--config", str(n.p("containerd", "config.toml"))]


def etcd_cmd(n: Node) -> list[str]:
    url = "http://127.0.0.1:2379"
    peer = "http://127.0.0.1:2380"
    return ["/usr/bin/etcd", "--name", "node", "--data-dir", str(n.p("etcd", "data")),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"node={peer}", "--logger", "zap"]


def apiserver_cmd(n: Node) -> list[str]:
    k = n.p("pki")
    return [n.bin("kube-apiserver"), "--advertise-address", NODE_ADDR,
            "--bind-address", "0.0.0.0", "--secure-port", str(API_PORT),
            "--etcd-servers", "http://127.0.0.1:2379",
            "--client-ca-file", str(k / "ca.crt"),
            "--tls-cert-file", str(k / "apiserver.crt"),
            "--tls-private-key-file", str(k / "apiserver.key"),
            "--kubelet-client-certificate", str(k / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key", str(k / "apiserver-kubelet-client.key"),
            "--kubelet-preferred-address-types", "InternalIP",
            "--service-account-key-file", str(k / "sa.pub"),
            "--service-account-signing-key-file", str(k / "sa.key"),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction",
            "--allow-privileged=true",
            # the aggregation layer (metrics.k8s.io): the front proxy's identity, and the
            # APIService's endpoints dialled as they are (metrics-server is a host process)
            "--requestheader-client-ca-file", str(k / "ca.crt"),
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", str(k / "front-proxy-client.crt"),
            "--proxy-client-key-file", str(k / "front-proxy-client.key"),
            "--enable-aggregator-routing=true",
            "--profiling=false"]


def controller_manager_cmd(n: Node) -> list[str]:
    k = n.p("pki")
    kc = str(n.p("controller-manager.kubeconfig"))
    return [n.bin("kube-controller-manager"), "--kubeconfig", kc,
            "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--leader-elect=false",
            "--controllers", "*,-nodeipam",
            "--service-account-private-key-file", str(k / "sa.key"),
            "--root-ca-file", str(k / "ca.crt"),
            "--cluster-signing-cert-file", str(k / "ca.crt"),
            "--cluster-signing-key-file", str(k / "ca.key"),
            "--use-service-account-credentials", "--profiling=false"]


def scheduler_cmd(n: Node) -> list[str]:
    kc = str(n.p("scheduler.kubeconfig"))
    return [n.bin("kube-scheduler"), "--kubeconfig", kc, "--authentication-kubeconfig", kc,
            "--authorization-kubeconfig", kc, "--bind-address", "127.0.0.1",
            "--leader-elect=false", "--profiling=false"]


def kubelet_cmd(n: Node) -> list[str]:
    return [n.bin("kubelet"), "--config", str(n.p("kubelet.json")),
            "--kubeconfig", str(n.p("kubelet.kubeconfig")),
            "--hostname-override", n.member.name, "--node-ip", n.member.addr]


def proxy_cmd(n: Node) -> list[str]:
    return [n.bin("kube-proxy"), "--config", str(n.p("kube-proxy.json")),
            "--hostname-override", n.member.name]


def metrics_server_cmd(n: Node) -> list[str]:
    """metrics-server on the node's address: its own client certificate (the kubelets' CA
    trusts it, its ClusterRole reads nodes/metrics), the kubelets' serving certificates checked
    against the node's CA, a 15 s resolution (the HPA's sync period)."""
    k = n.p("pki")
    kc = str(n.p("metrics-server.kubeconfig"))
    return [str(n.lay.metrics_server_bin), "--kubeconfig", kc,
            "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--bind-address", NODE_ADDR, "--secure-port", str(METRICS_SERVER_PORT),
            "--tls-cert-file", str(k / "metrics-server-serving.crt"),
            "--tls-private-key-file", str(k / "metrics-server-serving.key"),
            "--kubelet-certificate-authority", str(k / "ca.crt"),
            "--kubelet-preferred-address-types", "InternalIP",
            "--kubelet-use-node-status-port",
            "--metric-resolution", "15s"]
