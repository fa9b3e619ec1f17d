"""``make kube-demo``: the node up, the project's images in, ``kubectl apply -k k8s/`` (with the
node's Ingress class), both Deployments Ready, the Job run to completion and its log (the two
reports) printed; the Job's raw data copied out of the pod's emptyDir and drawn on the host
(pictures/k8s-*.png); the pi page fetched through each Ingress (Traefik) and its gaps
summarised. The node is left running."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from kubenode import node as kubenode
from kubenode.config import layout
from kubenode.overlay import write_overlay
from kubenode.traefik import WEB_PORT

__all__ = ["main", "copy_raw_data", "gaps_at_least", "pi_line", "pi_pages", "STALL_US"]

NAMESPACE = "throttle-lab"
TARGETS = ("limited", "limitless")


HOLD_SECONDS = 600


def copy_raw_data(n: kubenode.Node, pod_uid: str, dest: Path) -> list[Path]:
    """The Job pod's /tmp/raw-data (an emptyDir) as the kubelet keeps it on the node's disk
    while the pod runs (the Job holds it: HOLD_FOR_COPY)."""
    src = (n.p("mnt", "var-lib-kubelet", "pods", pod_uid, "volumes", "kubernetes.io~empty-dir",
               "tmp", "raw-data"))
    if not src.is_dir():
        raise RuntimeError(f"the Job's raw data is not at {src}")
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for target in TARGETS:
        for suffix in (".csv", ".json"):
            found = src / f"{target}{suffix}"
            if found.exists():
                copy = dest / f"k8s-{target}{suffix}"
                shutil.copyfile(found, copy)
                out.append(copy)
    return out


def traefik_base(n: kubenode.Node) -> str:
    """Traefik's web entry point, reached from the host through the veth (its pod's address)."""
    ip = n.kubectl("-n", "kube-system", "get", "pod", "-l", "app.kubernetes.io/name=traefik",
                   "-o", "jsonpath={.items[0].status.podIP}").stdout.strip()
    return f"http://{ip}:{WEB_PORT}"


STALL_US = 50_000   # a gap of the pi page this long is a quota's wait (issue 33: >= 50 ms)


def gaps_at_least(body: dict[str, Any], us: int = STALL_US) -> int:
    """How many of the pi page's gaps (``/api/pi``'s ``gaps``, by whole µs) are ``us`` or
    longer."""
    return sum(g["count"] for g in body["gaps"] if g["us"] >= us)


def pi_pages(n: kubenode.Node) -> tuple[int, dict[str, dict[str, Any]]]:
    """The pi page's JSON (/api/pi) through each Ingress, with a counter that costs ~150 ms of
    CPU (many periods' quota at the limited Deployment's 100m: 10 ms a period), calibrated on
    the limitless one: (the counter, {Deployment: body})."""
    base = traefik_base(n)

    def pi(name: str, counter: int) -> dict[str, Any]:
        deadline = time.monotonic() + 120
        while True:  # Traefik picks a new Ingress up within seconds
            reply = httpx.get(f"{base}/api/pi", params={"counter": counter},
                              headers={"Host": ingress_host(name)}, timeout=60)
            if reply.status_code != 404 or time.monotonic() > deadline:
                reply.raise_for_status()
                body: dict[str, Any] = reply.json()
                return body
            time.sleep(1)

    probe = pi("limitless", 100_000)
    counter = min(5_000_000, int(100_000 * 150e6 / max(probe["cpu_ns"], 1)))
    return counter, {name: pi(name, counter) for name in TARGETS}


def ingress_host(name: str) -> str:
    return f"{name}.{NAMESPACE}.localhost"


def pi_line(name: str, counter: int, body: dict[str, Any]) -> str:
    pauses = body["pauses"]
    return (f"pi page through {ingress_host(name)}: counter {counter}, CPU "
            f"{body['cpu_ns'] / 1e6:.0f} ms in {body['wall_ns'] / 1e6:.0f} ms, "
            f"{pauses['count']} gaps >= {pauses['threshold_us'] / 1000:g} ms, "
            f"{gaps_at_least(body)} >= {STALL_US / 1000:g} ms "
            f"(longest {pauses['longest_us'] / 1000:.1f} ms)")


def main(root: Path) -> int:
    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    lay = layout()
    t0 = time.monotonic()
    n = kubenode.up(lay, log)
    log(f"node up ({time.monotonic() - t0:.0f} s); images ...")
    kubenode.load_project_images(lay, log, root)
    # A Job runs once: a previous demo's is deleted so that this one runs again.
    n.kubectl("-n", NAMESPACE, "delete", "job", "http-timing", "--ignore-not-found", "--cascade=foreground",
              timeout=120)
    with tempfile.TemporaryDirectory(prefix="kube-demo-") as overlay:
        write_overlay(Path(overlay), root / "k8s", hold_for_copy=HOLD_SECONDS)
        n.kubectl("apply", "-k", overlay, timeout=120)
    for name in TARGETS:
        n.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{name}", "--timeout=300s",
                  timeout=320)
    log("both Deployments Ready; the Job times both Services from inside the cluster")
    pod = ""
    deadline = time.monotonic() + 900
    while True:
        pod = n.kubectl("-n", NAMESPACE, "get", "pod", "-l", "job-name=http-timing", "-o",
                        "jsonpath={.items[0].metadata.name} {.items[0].metadata.uid}",
                        check=False).stdout.strip()
        logs = n.kubectl("-n", NAMESPACE, "logs", "job/http-timing", check=False).stdout
        if "held up to" in logs:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the Job did not finish its runs in 15 min:\n" + logs[-2000:])
        time.sleep(2)
    print(logs.split("raw data in /tmp/raw-data")[0])
    name, uid = pod.split()
    copies = copy_raw_data(n, uid, root / "raw-data")
    n.kubectl("-n", NAMESPACE, "exec", name, "--", "touch", "/tmp/raw-data/.copied")
    n.kubectl("-n", NAMESPACE, "wait", "--for=condition=complete", "job/http-timing",
              "--timeout=120s", timeout=140)
    csvs = [str(p) for p in copies if p.suffix == ".csv"]
    http_timing = shutil.which("http-timing") or str(Path(sys.executable).parent / "http-timing")
    subprocess.run([http_timing, "plot", "--pictures-dir",
                    str(root / "pictures"), *csvs], check=True, cwd=root)
    log("raw data: " + ", ".join(str(p.relative_to(root)) for p in copies))
    log("pictures: " + ", ".join(f"pictures/{Path(c).stem}.png" for c in csvs))
    counter, pages = pi_pages(n)
    for name, body in pages.items():
        print(pi_line(name, counter, body))
    print(kubenode.shell_exports(lay), end="")
    log("the node keeps running; stop it with: make kube-down")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(__file__).resolve().parent.parent))
