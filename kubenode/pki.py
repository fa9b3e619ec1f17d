"""The node's certificates, made with openssl: one CA, a certificate per component, the
service-account key pair. EC P-256 keys (fast to make, accepted by every component). A node
that joins node 1 gets its kubelet's and kube-proxy's certificates signed by node 1's CA.

The aggregation layer (metrics.k8s.io, served by metrics-server) takes three more: the API
server's front-proxy client (the requestheader CA is the one CA, the name ``front-proxy-client``
the only one allowed to assert a user), metrics-server's client certificate (its user, bound to
its ClusterRole) and its serving one (the name the aggregator dials,
``metrics-server.kube-system.svc``)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kubenode.config import API_SERVICE_IP, NODE_ADDR, Member, member
from kubenode.proc import run

__all__ = ["Cert", "CERTS", "kubelet_certs", "joining_certs", "make_pki", "join_pki",
           "pki_complete"]

DAYS = "30"


@dataclass(frozen=True)
class Cert:
    name: str
    subject: str
    sans: tuple[str, ...] = field(default=())
    server: bool = False


def kubelet_certs(m: Member) -> tuple[Cert, Cert]:
    """A node's kubelet: its client certificate (the Node authorizer's name) and its serving one."""
    return (Cert("kubelet", f"/O=system:nodes/CN=system:node:{m.name}"),
            Cert("kubelet-serving", f"/CN={m.name}", (f"DNS:{m.name}", f"IP:{m.addr}"),
                 server=True))


KUBE_PROXY_CERT = Cert("kube-proxy", "/CN=system:kube-proxy")

CERTS = (
    Cert("apiserver", "/CN=kube-apiserver",
         ("DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
          "DNS:kubernetes.default.svc.cluster.local", "DNS:localhost", "IP:127.0.0.1",
          f"IP:{NODE_ADDR}", f"IP:{API_SERVICE_IP}"), server=True),
    Cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client"),
    Cert("admin", "/O=system:masters/CN=throttle-lab-admin"),
    *kubelet_certs(member(1)),
    Cert("controller-manager", "/CN=system:kube-controller-manager"),
    Cert("scheduler", "/CN=system:kube-scheduler"),
    KUBE_PROXY_CERT,
    Cert("front-proxy-client", "/CN=front-proxy-client"),
    Cert("metrics-server", "/CN=system:metrics-server"),
    Cert("metrics-server-serving", "/CN=metrics-server",
         ("DNS:metrics-server.kube-system.svc", f"IP:{NODE_ADDR}"), server=True),
)


def joining_certs(m: Member) -> tuple[Cert, ...]:
    return (*kubelet_certs(m), KUBE_PROXY_CERT)


def _key(path: Path) -> None:
    run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", str(path)])


def pki_complete(pki: Path, certs: tuple[Cert, ...] = CERTS, *, ca: bool = True) -> bool:
    """Every file there: with ``ca``, the CA's key and the service-account pair too."""
    names = ["ca.crt", *(["ca.key", "sa.key", "sa.pub"] if ca else [])]
    names += [f"{c.name}.{ext}" for c in certs for ext in ("crt", "key")]
    return all((pki / n).exists() for n in names)


def make_pki(pki: Path) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    _key(pki / "ca.key")
    run(["openssl", "req", "-x509", "-new", "-key", str(pki / "ca.key"), "-subj",
         "/CN=throttle-lab-node-ca", "-days", DAYS, "-out", str(pki / "ca.crt")])
    _key(pki / "sa.key")
    run(["openssl", "pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")])
    for cert in CERTS:
        _sign(pki, pki, cert)


def join_pki(ca: Path, pki: Path, certs: tuple[Cert, ...]) -> None:
    """``certs`` in ``pki``, signed by the CA in ``ca`` (node 1's); its certificate copied, its
    key not."""
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    shutil.copyfile(ca / "ca.crt", pki / "ca.crt")
    for cert in certs:
        _sign(ca, pki, cert)


def _sign(ca: Path, pki: Path, cert: Cert) -> None:
    key, csr, crt = (pki / f"{cert.name}.{ext}" for ext in ("key", "csr", "crt"))
    _key(key)
    run(["openssl", "req", "-new", "-key", str(key), "-subj", cert.subject, "-out", str(csr)])
    ext = pki / f"{cert.name}.ext"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             "extendedKeyUsage=" + ("serverAuth" if cert.server else "clientAuth")]
    if cert.sans:
        lines.append("subjectAltName=" + ",".join(cert.sans))
    ext.write_text("\n".join(lines) + "\n")
    run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca / "ca.crt"), "-CAkey",
         str(ca / "ca.key"), "-CAcreateserial", "-days", DAYS, "-extfile", str(ext),
         "-out", str(crt)])
    csr.unlink()
    ext.unlink()
