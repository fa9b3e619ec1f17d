"""Images without a registry: one-file images written as docker-archive tars (pause, CoreDNS,
Traefik), the project's images from ``docker save``, imported into the node's containerd
(``ctr -n k8s.io images import``) where the kubelet finds them (pods use IfNotPresent/Never)."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Sequence

from kubenode.config import layout
from kubenode.proc import run

__all__ = ["single_binary_archive", "ctr_binary", "ctr_import", "ctr_images", "ctr_ref",
           "has_image"]


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def single_binary_archive(binary: Path, tag: str, dest: Path, *, entrypoint: Sequence[str],
                          args: Sequence[str] = (), user: str = "") -> Path:
    """A docker-archive tar (``docker load`` / ``ctr import`` format): one layer holding
    ``binary`` at ``/<name>`` (plus an empty /tmp), and its config."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        tmp = tarfile.TarInfo("tmp")
        tmp.type = tarfile.DIRTYPE
        tmp.mode = 0o1777
        layer.addfile(tmp)
        _add(layer, binary.name, binary.read_bytes(), 0o755)
    layer_bytes = layer_buf.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    config: dict[str, object] = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "Cmd": list(args) or None,
                   "User": user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"throttle-lab kubenode: {binary.name}"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [layer_name]}]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest, "w") as tar:
        _add(tar, config_name, config_bytes)
        _add(tar, layer_name, layer_bytes)
        _add(tar, "manifest.json", json.dumps(manifest).encode())
    return dest


def ctr_binary() -> str:
    """containerd 2's ``ctr``, built beside the node's containerd (the host's may be 1.x)."""
    return str(layout().containerd_dir / "ctr")


def ctr_images(address: str) -> set[str]:
    out = run([ctr_binary(), "--address", address, "-n", "k8s.io", "images", "ls", "-q"]).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def ctr_ref(tag: str) -> str:
    """containerd's name for an imported ``name:tag``: the CRI normalises an unqualified name
    as Docker does, under Docker Hub's domain (nothing is pulled: the images are imported)."""
    first = tag.split("/")[0]
    if "/" in tag and ("." in first or ":" in first or first == "localhost"):
        return tag
    return ("docker.io/library/" if "/" not in tag else "docker.io/") + tag


def has_image(address: str, tag: str) -> bool:
    """Whether the containerd at ``address`` holds the imported ``tag`` (:func:`ctr_ref`)."""
    return ctr_ref(tag) in ctr_images(address)


def ctr_import(address: str, archive: Path) -> None:
    run([ctr_binary(), "--address", address, "-n", "k8s.io", "images", "import",
         str(archive)], timeout=600)
