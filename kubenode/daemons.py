"""The node's daemons' command lines (each started inside the node's namespaces)."""
from __future__ import annotations

from kubenode.config import API_PORT, NODE_ADDR, SERVICE_CIDR
from kubenode.context import Node

__all__ = ["containerd_cmd", "etcd_cmd", "apiserver_cmd", "controller_manager_cmd",
           "scheduler_cmd", "kubelet_cmd", "proxy_cmd"]


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
