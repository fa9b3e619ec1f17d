"""The node's programs, built from the Go module proxy and a C compiler, kept in a cache directory.

Kubernetes cannot be ``go install``-ed (its go.mod replaces the staging modules with local
paths), so it is built in a module of our own that requires ``k8s.io/kubernetes`` and replaces
each staging module with its published version. CoreDNS is a plain ``go install``; Traefik needs
the ``replace`` lines of its own go.mod (all to published forks). The pause program is
kubernetes' own ``build/pause/linux/pause.c``, linked static. containerd 2 (``containerd``, its shim
``containerd-shim-runc-v2``, ``ctr``) and runc are ``go install``-ed at their tags as their
Makefiles build them (runc with cgo and libseccomp). metrics-server (the resource metrics API the
HPA controller reads) is a plain ``go install`` too. Each build is skipped when its
result is already in the cache (a stamp file is written last, so a half build is redone).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Sequence

from kubenode.config import (CONTAINERD_BINARIES, CONTAINERD_VERSION, COREDNS_VERSION,
                             KUBE_BINARIES, KUBE_VERSION, METRICS_SERVER_VERSION, RUNC_VERSION,
                             TRAEFIK_VERSION, Layout)

__all__ = ["BuildError", "go_binary", "kube_gomod", "traefik_gomod", "build_kubernetes",
           "build_coredns", "build_containerd", "build_runc", "build_pause", "build_traefik", "build_metrics_server",
           "build_all", "kube_ldflags",
           "PAUSE_TAG", "module_dir"]

PAUSE_TAG = "3.10.1"
Log = Callable[[str], None]


class BuildError(RuntimeError):
    """A build failed; the message names the log file."""


def go_binary() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists()
                                   else None)
    if found is None:
        raise BuildError("no Go toolchain: install Go (https://go.dev/dl) or put `go` on PATH")
    return found


def _replaces(gomod: str) -> list[tuple[str, str]]:
    """The ``replace`` directives of a go.mod as (left side, right side) text pairs."""
    out: list[tuple[str, str]] = []
    in_block = False
    for raw in gomod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if in_block:
            if line == ")":
                in_block = False
            elif "=>" in line:
                left, right = (s.strip() for s in line.split("=>", 1))
                out.append((left, right))
            continue
        if re.match(r"^replace\s*\($", line):
            in_block = True
        elif line.startswith("replace ") and "=>" in line:
            left, right = (s.strip() for s in line[len("replace "):].split("=>", 1))
            out.append((left, right))
    return out


def _go_directive(gomod: str) -> str:
    match = re.search(r"^go\s+(\S+)", gomod, re.M)
    return match.group(1) if match else "1.22"


def kube_gomod(kubernetes_gomod: str, version: str = KUBE_VERSION) -> str:
    """Our module's go.mod: requires k8s.io/kubernetes ``version`` and replaces every module that
    kubernetes replaces with ``./staging/...`` by its published ``v0.<minor>.<patch>``."""
    staging = [left.split()[0] for left, right in _replaces(kubernetes_gomod)
               if right.startswith("./staging/")]
    if not staging:
        raise BuildError("k8s.io/kubernetes's go.mod has no ./staging replace lines")
    published = "v0." + version.lstrip("v").split(".", 1)[1]
    lines = ["module throttle-lab/kubebuild", "", f"go {_go_directive(kubernetes_gomod)}", "",
             f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{mod} => {mod} {published}" for mod in staging]
    lines += [")", ""]
    return "\n".join(lines)


def traefik_gomod(traefik_mod: str, version: str = TRAEFIK_VERSION) -> str:
    """Our module's go.mod for Traefik: its ``replace`` lines that point to published modules."""
    published = [(left, right) for left, right in _replaces(traefik_mod)
                 if not right.startswith((".", "/"))]
    lines = ["module throttle-lab/traefikbuild", "", f"go {_go_directive(traefik_mod)}", "",
             f"require github.com/traefik/traefik/v3 {version}", "", "replace ("]
    lines += [f"\t{left} => {right}" for left, right in published]
    lines += [")", ""]
    return "\n".join(lines)


def kube_ldflags(version: str = KUBE_VERSION) -> str:
    major, minor = version.lstrip("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    flags = [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
             f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean",
             f"-X {pkg}.buildDate=1970-01-01T00:00:00Z"]
    return "-s -w " + " ".join(flags)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("GOFLAGS", "-buildvcs=false")
    env.update(extra or {})
    return env


def _run(cmd: Sequence[str], *, cwd: Path, log_file: Path, env: dict[str, str] | None = None) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        rc = subprocess.call(["nice", "-n", "10", *cmd], cwd=cwd, stdout=log,
                             stderr=subprocess.STDOUT, env=env or _env())
    if rc != 0:
        raise BuildError(f"{cmd[0]} {cmd[1] if len(cmd) > 1 else ''} failed (exit {rc}); "
                         f"see {log_file}")


def module_dir(module: str, version: str, *, cwd: Path, log_file: Path) -> tuple[Path, Path]:
    """Download one module through the module proxy; return (source dir, go.mod file)."""
    cwd.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["nice", "-n", "10", go_binary(), "mod", "download", "-json",
                          f"{module}@{version}"], cwd=cwd, capture_output=True, text=True,
                         env=_env({"GO111MODULE": "on"}))
    if out.returncode != 0:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text(out.stdout + out.stderr)
        raise BuildError(f"go mod download {module}@{version} failed; see {log_file}")
    info = json.loads(out.stdout)
    return Path(info["Dir"]), Path(info["GoMod"])


def _stamp(directory: Path) -> Path:
    return directory / ".complete"


def build_kubernetes(lay: Layout, log: Log = print) -> Path:
    """The six programs in ``lay.kube_bin``; reused when the stamp says they are complete."""
    stamp = _stamp(lay.kube_bin)
    if stamp.exists() and all((lay.kube_bin / b).exists() for b in KUBE_BINARIES):
        return lay.kube_bin
    src = lay.kube_dir / "src"
    log_file = lay.kube_dir / "build.log"
    log(f"building Kubernetes {KUBE_VERSION} (six programs; ~8 min on a cold cache), "
        f"log: {log_file}")
    src.mkdir(parents=True, exist_ok=True)
    _, gomod = module_dir("k8s.io/kubernetes", KUBE_VERSION, cwd=src, log_file=log_file)
    (src / "go.mod").write_text(kube_gomod(gomod.read_text()))
    (src / "go.sum").touch()
    tmp = lay.kube_dir / "bin.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run([go_binary(), "build", "-mod=mod", "-trimpath", "-ldflags", kube_ldflags(), "-o",
          str(tmp) + "/", *[f"k8s.io/kubernetes/cmd/{b}" for b in KUBE_BINARIES]],
         cwd=src, log_file=log_file)
    shutil.rmtree(lay.kube_bin, ignore_errors=True)
    tmp.rename(lay.kube_bin)
    _stamp(lay.kube_bin).write_text(KUBE_VERSION + "\n")
    return lay.kube_bin


def build_coredns(lay: Layout, log: Log = print) -> Path:
    target = lay.coredns_bin
    if _stamp(target.parent).exists() and target.exists():
        return target
    log_file = target.parent / "build.log"
    log(f"building CoreDNS {COREDNS_VERSION} (~4 min on a cold cache), log: {log_file}")
    target.parent.mkdir(parents=True, exist_ok=True)
    _run([go_binary(), "install", "-trimpath", "-ldflags", "-s -w",
          f"github.com/coredns/coredns@{COREDNS_VERSION}"], cwd=target.parent,
         log_file=log_file, env=_env({"CGO_ENABLED": "0", "GOBIN": str(target.parent)}))
    _stamp(target.parent).write_text(COREDNS_VERSION + "\n")
    return target


def build_containerd(lay: Layout, log: Log = print) -> Path:
    """containerd, its runc shim and ``ctr`` in ``lay.containerd_dir``: static (no cgo: the
    btrfs snapshotter is left out), the shim without gRPC as containerd's Makefile builds it."""
    target = lay.containerd_dir
    if _stamp(target).exists() and all((target / b).exists() for b in CONTAINERD_BINARIES):
        return target
    log_file = target / "build.log"
    log(f"building containerd {CONTAINERD_VERSION} (~3 min on a cold cache), log: {log_file}")
    target.mkdir(parents=True, exist_ok=True)
    pkg = "github.com/containerd/containerd/v2"
    ldflags = f"-s -w -X {pkg}/version.Version={CONTAINERD_VERSION}"
    env = _env({"CGO_ENABLED": "0", "GOBIN": str(target)})
    for tags, cmds in (("urfave_cli_no_docs,no_btrfs", ("containerd", "ctr")),
                       ("urfave_cli_no_docs,no_grpc", ("containerd-shim-runc-v2",))):
        _run([go_binary(), "install", "-trimpath", "-tags", tags, "-ldflags", ldflags,
              *[f"{pkg}/cmd/{c}@{CONTAINERD_VERSION}" for c in cmds]], cwd=target,
             log_file=log_file, env=env)
    _stamp(target).write_text(CONTAINERD_VERSION + "\n")
    return target


def build_runc(lay: Layout, log: Log = print) -> Path:
    """runc with cgo (its nsexec is C) and the ``seccomp`` tag (libseccomp-dev, from
    scripts/install-system-deps.sh): the tags of runc's Makefile but ``libpathrs`` (a Rust
    library Debian does not ship)."""
    target = lay.runc_bin
    if _stamp(target.parent).exists() and target.exists():
        return target
    log_file = target.parent / "build.log"
    if shutil.which("gcc") is None:
        raise BuildError("no gcc: scripts/install-system-deps.sh installs it")
    log(f"building runc {RUNC_VERSION} (~1 min on a cold cache), log: {log_file}")
    target.parent.mkdir(parents=True, exist_ok=True)
    _run([go_binary(), "install", "-trimpath", "-tags", "seccomp,urfave_cli_no_docs",
          "-ldflags", "-s -w", f"github.com/opencontainers/runc@{RUNC_VERSION}"],
         cwd=target.parent, log_file=log_file,
         env=_env({"CGO_ENABLED": "1", "GOBIN": str(target.parent)}))
    _stamp(target.parent).write_text(RUNC_VERSION + "\n")
    return target


def build_traefik(lay: Layout, log: Log = print) -> Path:
    target = lay.traefik_bin
    if _stamp(target.parent).exists() and target.exists():
        return target
    src = target.parent / "src"
    log_file = target.parent / "build.log"
    log(f"building Traefik {TRAEFIK_VERSION} (~5-9 min on a cold cache), log: {log_file}")
    src.mkdir(parents=True, exist_ok=True)
    _, gomod = module_dir("github.com/traefik/traefik/v3", TRAEFIK_VERSION, cwd=src,
                          log_file=log_file)
    (src / "go.mod").write_text(traefik_gomod(gomod.read_text()))
    (src / "go.sum").touch()
    _run([go_binary(), "build", "-mod=mod", "-trimpath", "-ldflags", "-s -w", "-o", str(target),
          "github.com/traefik/traefik/v3/cmd/traefik"], cwd=src, log_file=log_file,
         env=_env({"CGO_ENABLED": "0"}))
    _stamp(target.parent).write_text(TRAEFIK_VERSION + "\n")
    return target


def build_metrics_server(lay: Layout, log: Log = print) -> Path:
    """metrics-server, static: it runs as a host process in node 1's namespaces."""
    target = lay.metrics_server_bin
    if _stamp(target.parent).exists() and target.exists():
        return target
    log_file = target.parent / "build.log"
    log(f"building metrics-server {METRICS_SERVER_VERSION} (~8 min on a cold cache), "
        f"log: {log_file}")
    target.parent.mkdir(parents=True, exist_ok=True)
    _run([go_binary(), "install", "-trimpath", "-ldflags", "-s -w",
          f"sigs.k8s.io/metrics-server/cmd/metrics-server@{METRICS_SERVER_VERSION}"],
         cwd=target.parent, log_file=log_file,
         env=_env({"CGO_ENABLED": "0", "GOBIN": str(target.parent)}))
    _stamp(target.parent).write_text(METRICS_SERVER_VERSION + "\n")
    return target


def build_pause(lay: Layout, log: Log = print) -> Path:
    """kubernetes' pause.c, ``gcc -static``, as the pause image's only file."""
    target = lay.pause_bin
    if _stamp(target.parent).exists() and target.exists():
        return target
    log_file = target.parent / "build.log"
    gcc = shutil.which("gcc")
    if gcc is None:
        raise BuildError("no gcc: scripts/install-system-deps.sh installs it")
    kube_src, _ = module_dir("k8s.io/kubernetes", KUBE_VERSION, cwd=target.parent,
                             log_file=log_file)
    log("building the pause program (pause.c, gcc -static)")
    _run([gcc, "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{PAUSE_TAG}-throttle-lab",
          "-o", str(target), str(kube_src / "build" / "pause" / "linux" / "pause.c")],
         cwd=target.parent, log_file=log_file)
    _stamp(target.parent).write_text(PAUSE_TAG + "\n")
    return target


def build_all(lay: Layout, log: Log = print) -> None:
    build_kubernetes(lay, log)
    build_containerd(lay, log)
    build_runc(lay, log)
    build_coredns(lay, log)
    build_pause(lay, log)
    build_traefik(lay, log)
    build_metrics_server(lay, log)
