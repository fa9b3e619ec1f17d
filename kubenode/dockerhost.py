"""The host as it was before a Docker engine started here, put back after it stopped.

``dockerd`` changes the host it starts on and leaves the changes when it stops: the
``net.ipv4.ip_forward`` sysctl set to 1, its iptables chains and rules (``DOCKER``,
``DOCKER-USER``, ``DOCKER-ISOLATION-STAGE-*``, a ``MASQUERADE`` rule, and the ``FORWARD``
policy set to ``DROP``), the ``docker0`` bridge with its address, and runtime directories
(``/run/docker``, with the host's network namespace still bound in it, and ``/run/containerd/s``, where its shims put their sockets whatever its
state directory: a directory the node's ``down`` must then remove). Seen on a fresh machine
(2026-11-26): after the test suite's dockerd had stopped, all of those were still there, and the
node's check that the host's sysctls are as before failed on ``ip_forward``.

An engine started by the project (the Docker tests, ``make kube-images``) takes a
:func:`snapshot` before it starts and calls :func:`put_back` after it stopped, which undoes
exactly what differs: each sysctl written back, each iptables table restored as it was (a table
that was not there is emptied, its policies ``ACCEPT``), the links and directories that were not
there removed (``/run/docker`` after unmounting what dockerd bound there: the host's network
namespace at ``/run/docker/netns/default``). An engine that already ran is the user's and is not touched. What stays: the
engine's images under ``/var/lib/docker`` (a cache, as the builds in ``/var/cache/throttle-lab``)
and the kernel modules it loaded.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = ["HostState", "IPTABLES", "LINKS", "RUNTIME_DIRS", "SYSCTLS", "put_back",
           "restore_input", "snapshot", "tables"]

# the sysctls dockerd writes (forwarding, route_localnet for its proxy, br_netfilter's)
SYSCTLS = ("net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding",
           "net/ipv6/conf/default/forwarding", "net/ipv4/conf/all/route_localnet",
           "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables")
IPTABLES = ("iptables", "ip6tables")    # each with its -save and -restore
LINKS = ("docker0",)
# innermost first: a directory is removed only when it was not there before
RUNTIME_DIRS = ("/run/docker", "/run/containerd/s", "/run/containerd")

# each table's built-in chains, the only ones with a policy
BUILTIN = {"filter": ("INPUT", "FORWARD", "OUTPUT"),
           "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
           "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
           "raw": ("PREROUTING", "OUTPUT"),
           "security": ("INPUT", "FORWARD", "OUTPUT")}

Log = Callable[[str], None]


@dataclass(frozen=True)
class HostState:
    sysctls: dict[str, str | None]   # None: the file is not there
    iptables: dict[str, str]         # tool -> its -save output ("" when it has no tables)
    links: frozenset[str]
    dirs: frozenset[str]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _save(tool: str) -> str | None:
    if shutil.which(f"{tool}-save") is None:
        return None
    proc = subprocess.run([f"{tool}-save"], capture_output=True, text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else None


def snapshot() -> HostState:
    """What dockerd may change, as it is now."""
    saved = {tool: text for tool in IPTABLES if (text := _save(tool)) is not None}
    return HostState(
        sysctls={key: _read(Path("/proc/sys") / key) for key in SYSCTLS},
        iptables=saved,
        links=frozenset(name for name in LINKS if Path(f"/sys/class/net/{name}").exists()),
        dirs=frozenset(d for d in RUNTIME_DIRS if Path(d).exists()))


def tables(save: str) -> dict[str, list[str]]:
    """``iptables-save`` output as table -> its lines (chains and rules, no comments, no
    ``*table`` nor ``COMMIT``)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in save.splitlines():
        if line.startswith("*"):
            current = out.setdefault(line[1:].strip(), [])
        elif line.strip() == "COMMIT" or line.startswith("#") or not line.strip():
            continue
        elif current is not None:
            current.append(line)
    return out


def _without_counters(lines: list[str]) -> list[str]:
    return [line.split(" [", 1)[0] if line.startswith(":") else line for line in lines]


def restore_input(before: str, after: str) -> str:
    """The ``*-restore`` input that makes ``after`` what ``before`` was, for the tables that
    differ ("" when none does): a table as it was before (``*-restore`` replaces the whole
    table, its own chains included), or one that was not there emptied with its built-in
    chains' policies ``ACCEPT``."""
    was, now = tables(before), tables(after)
    blocks = []
    for table, lines in now.items():
        if table in was:
            if _without_counters(was[table]) == _without_counters(lines):
                continue
            body = was[table]
        else:
            body = [f":{chain} ACCEPT [0:0]" for chain in BUILTIN.get(table, ())
                    if any(line.startswith(f":{chain} ") for line in lines)]
        blocks.append("\n".join([f"*{table}", *body, "COMMIT"]))
    return "\n".join(blocks) + "\n" if blocks else ""


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path``, deepest first (from /proc/self/mountinfo)."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    inside = [p for p in points if p == str(path) or p.startswith(f"{path}/")]
    return sorted(set(inside), key=lambda p: p.count("/"), reverse=True)


def put_back(before: HostState, log: Log = print) -> list[str]:
    """Undo what differs from ``before`` (dockerd has stopped); returns what was put back, and
    raises with every part that could not be (after trying them all)."""
    done: list[str] = []
    failed: list[str] = []
    for key, value in before.sysctls.items():
        path = Path("/proc/sys") / key
        now = _read(path)
        if value is not None and now is not None and now != value:
            try:
                path.write_text(f"{value}\n")
                done.append(f"{key.replace('/', '.')} {now} -> {value}")
            except OSError as exc:
                failed.append(f"{key}: {exc}")
    for tool, saved in before.iptables.items():
        after = _save(tool)
        script = restore_input(saved, after or "")
        if not script:
            continue
        proc = subprocess.run([f"{tool}-restore"], input=script, capture_output=True, text=True,
                              timeout=60)
        if proc.returncode == 0:
            done.append(f"{tool}: " + ", ".join(line[1:] for line in script.splitlines()
                                                if line.startswith("*")))
        else:
            failed.append(f"{tool}-restore: {proc.stderr.strip()}")
    for name in LINKS:
        if name not in before.links and Path(f"/sys/class/net/{name}").exists():
            proc = subprocess.run(["ip", "link", "delete", name], capture_output=True, text=True,
                                  timeout=30)
            if proc.returncode == 0:
                done.append(f"link {name} deleted")
            else:
                failed.append(f"link {name}: {proc.stderr.strip()}")
    for d in RUNTIME_DIRS:
        path = Path(d)
        if d in before.dirs or not path.exists():
            continue
        try:
            if d == "/run/docker":   # its own runtime state, with the host's netns bound there
                for point in _mounts_under(path):
                    subprocess.run(["umount", point], check=True, capture_output=True, timeout=30)
                shutil.rmtree(path)
            else:
                path.rmdir()          # only if empty: a socket there is someone else's
            done.append(f"removed {d}")
        except OSError as exc:
            failed.append(f"{d}: {exc}")
    for line in done:
        log(f"  put back after dockerd: {line}")
    if failed:
        raise RuntimeError("after dockerd stopped, could not put back: " + "; ".join(failed))
    return done
