"""The node's certificates, made with openssl: one CA, a certificate per component, the
service-account key pair. EC P-256 keys (fast to make, accepted by every component)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kubenode.config import API_SERVICE_IP, NODE_ADDR, NODE_NAME
from kubenode.proc import run

__all__ = ["Cert", "CERTS", "make_pki", "pki_complete"]

DAYS = "30"


@dataclass(frozen=True)
class Cert:
    name: str
    subject: str
    sans: tuple[str, ...] = field(default=())
    server: bool = False


CERTS = (
    Cert("apiserver", "/CN=kube-apiserver",
         ("DNS:kubernetes", "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
          "DNS:kubernetes.default.svc.cluster.local", "DNS:localhost", "IP:127.0.0.1",
          f"IP:{NODE_ADDR}", f"IP:{API_SERVICE_IP}"), server=True),
    Cert("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client"),
    Cert("admin", "/O=system:masters/CN=throttle-lab-admin"),
    Cert("kubelet", f"/O=system:nodes/CN=system:node:{NODE_NAME}"),
    Cert("kubelet-serving", f"/CN={NODE_NAME}", (f"DNS:{NODE_NAME}", f"IP:{NODE_ADDR}"),
         server=True),
    Cert("controller-manager", "/CN=system:kube-controller-manager"),
    Cert("scheduler", "/CN=system:kube-scheduler"),
    Cert("kube-proxy", "/CN=system:kube-proxy"),
)


def _key(path: Path) -> None:
    run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-out", str(path)])


def pki_complete(pki: Path) -> bool:
    names = ["ca.crt", "ca.key", "sa.key", "sa.pub"]
    names += [f"{c.name}.{ext}" for c in CERTS for ext in ("crt", "key")]
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
        key, csr, crt = (pki / f"{cert.name}.{ext}" for ext in ("key", "csr", "crt"))
        _key(key)
        run(["openssl", "req", "-new", "-key", str(key), "-subj", cert.subject, "-out", str(csr)])
        ext = pki / f"{cert.name}.ext"
        lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
                 "extendedKeyUsage=" + ("serverAuth" if cert.server else "clientAuth")]
        if cert.sans:
            lines.append("subjectAltName=" + ",".join(cert.sans))
        ext.write_text("\n".join(lines) + "\n")
        run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey",
             str(pki / "ca.key"), "-CAcreateserial", "-days", DAYS, "-extfile", str(ext),
             "-out", str(crt)])
        csr.unlink()
        ext.unlink()
