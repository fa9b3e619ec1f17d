"""The node recorder (k8s/recorder/daemonset.yaml): every POLL seconds, list the pods on this
node (NODE_NAME) with the label SELECTOR through the API server (the pod's service account),
and keep one ``http-timing record k8s:NS/POD --pod-uid UID`` running per running pod, its
timeline in TIMELINES. A recorder whose pod is gone ends by itself (the group disappears);
SIGTERM stops them all. Standard library only."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone

ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
POLL = float(os.environ.get("POLL", "15"))


def pods_here() -> list[tuple[str, str, str]]:
    """(namespace, name, uid) of the running pods on this node with the label."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    query = urllib.parse.urlencode({"labelSelector": os.environ["SELECTOR"],
                                    "fieldSelector": f"spec.nodeName={os.environ['NODE_NAME']},"
                                                     "status.phase=Running"})
    with open(f"{ACCOUNT}/token", encoding="ascii") as token:
        request = urllib.request.Request(f"https://{host}:{port}/api/v1/pods?{query}",
                                         headers={"Authorization": f"Bearer {token.read()}"})
    context = ssl.create_default_context(cafile=f"{ACCOUNT}/ca.crt")
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        items = json.load(answer)["items"]
    return [(p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"])
            for p in items]


def start(namespace: str, name: str, uid: str) -> subprocess.Popen[bytes]:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return subprocess.Popen(["http-timing", "record", f"k8s:{namespace}/{name}",
                             "--pod-uid", uid, "--name", f"{namespace}_{name}_{stamp}",
                             "--data-dir", os.environ["TIMELINES"],
                             "--max-size", os.environ.get("MAX_SIZE", "50000000"),
                             "--interval", os.environ.get("INTERVAL", "0.01")])


def main() -> int:
    running: dict[str, subprocess.Popen[bytes]] = {}   # pod uid -> its recorder
    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping:
        try:
            pods = pods_here()
        except (OSError, ValueError, KeyError) as exc:
            print(f"recorder: cannot list pods: {exc}", file=sys.stderr, flush=True)
            pods = []
        for namespace, name, uid in pods:
            if uid not in running or running[uid].poll() is not None:
                if uid not in running:
                    print(f"recorder: recording {namespace}/{name}", flush=True)
                running[uid] = start(namespace, name, uid)
        for uid in [u for u, p in running.items() if p.poll() is not None
                    and u not in {pod[2] for pod in pods}]:
            del running[uid]
        deadline = time.monotonic() + POLL
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.5)
    for proc in running.values():   # each writes its metadata's end and exits
        proc.send_signal(signal.SIGTERM)
    for proc in running.values():
        proc.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
