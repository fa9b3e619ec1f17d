"""The node recorder (k8s/recorder/: the Go agent as a DaemonSet) on this node: the agent's
static binary built from agent/ (CGO_ENABLED=0, as ``make agent``), its image built from
agent/Dockerfile with ``docker build`` (FROM scratch: no registry) under a tag of its own (the
sources' hash), imported into the node's containerd like the project's images, and a kustomize
overlay over k8s/recorder that names that tag."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import subprocess
import time
from pathlib import Path
from typing import Callable

from kubenode.build import go_binary
from kubenode.config import Layout
from kubenode.context import Node, containerd_addresses
from kubenode.proc import run

__all__ = ["AGENT_IMAGE", "RECORDER_NAMESPACE", "agent_tag", "build_agent", "build_agent_image",
           "deploy_recorder", "recorder_overlay", "write_recorder_overlay"]

AGENT_IMAGE = "throttle-lab-agent"   # the name k8s/recorder/kustomization.yaml gives the image
RECORDER_NAMESPACE = "throttle-lab-recorder"   # k8s/recorder/namespace.yaml
Log = Callable[[str], None]


def _sources_digest(agent_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(agent_dir.rglob("*")):
        if path.is_file() and (path.suffix in (".go", ".mod", ".sum") or path.name == "Dockerfile"):
            digest.update(str(path.relative_to(agent_dir)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def agent_tag(root: Path) -> str:
    """``throttle-lab-agent:<hash of agent/'s sources and Dockerfile>``."""
    return f"{AGENT_IMAGE}:{_sources_digest(root / 'agent')}"


def build_agent(lay: Layout, root: Path) -> Path:
    """The static agent binary for these sources, built once into the cache directory."""
    agent_dir = root / "agent"
    out = lay.cache / "agent" / _sources_digest(agent_dir) / "throttle-agent"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"throttle-agent.{os.getpid()}")
    env = dict(os.environ, CGO_ENABLED="0")
    built = subprocess.run(["nice", "-n", "10", go_binary(), "build", "-trimpath", "-ldflags=-s -w",
                            "-o", str(tmp), "./cmd/throttle-agent"], cwd=agent_dir, env=env,
                           capture_output=True, text=True, timeout=1200)
    if built.returncode != 0:
        raise RuntimeError(f"building the agent failed: {built.stderr.strip()[-800:]}")
    tmp.replace(out)
    return out


def build_agent_image(lay: Layout, root: Path, log: Log = print) -> str:
    """``docker build`` agent/Dockerfile around the static binary (a context of the binary
    alone); return the tag. The caller holds a Docker engine (project_images.docker_engine)."""
    tag = agent_tag(root)
    if run(["docker", "image", "inspect", tag], check=False).returncode == 0:
        return tag
    binary = build_agent(lay, root)
    with tempfile.TemporaryDirectory(prefix="tl-agent-image-") as context:
        shutil.copy2(binary, Path(context) / "throttle-agent")
        t0 = time.monotonic()
        run(["docker", "build", "--force-rm", "-t", tag, "-f", str(root / "agent" / "Dockerfile"),
             context], timeout=600)
        log(f"docker build -t {tag} ({time.monotonic() - t0:.1f} s)")
    return tag


def recorder_overlay(recorder: str, tag: str, timelines: Path) -> str:
    """A kustomization over ``recorder`` (the path of k8s/recorder, relative to the overlay)
    that runs the agent image ``tag`` (never pulled: it was imported into the node) and keeps
    the timelines in ``timelines`` on the node (its state directory: gone with the node)."""
    name, _, version = tag.partition(":")
    return f"""# made by kubenode: {recorder} on the throttle-lab node, the agent image built here
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {recorder}
images:
  - name: {AGENT_IMAGE}
    newName: {name}
    newTag: "{version}"
patches:
  - target:
      kind: DaemonSet
      name: recorder
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/imagePullPolicy
        value: Never
      - op: replace
        path: /spec/template/spec/initContainers/0/imagePullPolicy
        value: Never
      - op: replace
        path: /spec/template/spec/volumes/1/hostPath/path
        value: {timelines}
"""


def write_recorder_overlay(directory: Path, root: Path, tag: str, timelines: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(recorder_overlay(
        os.path.relpath(root / "k8s" / "recorder", directory), tag, timelines))
    return directory


def deploy_recorder(node: Node, root: Path, overlay_dir: Path, log: Log = print) -> str:
    """The agent's image built and imported into the running node, the overlay written into
    ``overlay_dir`` and applied, the DaemonSet rolled out; return the image's tag."""
    from kubenode import project_images

    if not node.daemon_alive("containerd"):
        raise RuntimeError("the node is not up (make kube-node)")
    with project_images.docker_engine(log):
        tag = build_agent_image(node.lay, root, log)
        for address in containerd_addresses(node.lay):   # every node's: a pod on each
            project_images.import_images(address, [tag], log)
    write_recorder_overlay(overlay_dir, root, tag, node.lay.state / "recorder-timelines")
    node.kubectl("apply", "-k", str(overlay_dir))
    node.kubectl("-n", RECORDER_NAMESPACE, "rollout", "status", "daemonset/recorder",
                 "--timeout=180s", timeout=200)
    return tag
