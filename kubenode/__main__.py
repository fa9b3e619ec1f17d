"""``python -m kubenode up|down|status|build|images|recorder``: the node on this host (needs
root); ``build`` builds what a start would (the programs, the project's and the agent's images)
without a node; ``recorder`` runs k8s/recorder (the node agent) on it with the agent image
built here."""
from __future__ import annotations

import argparse
import sys

from kubenode import build, node
from kubenode.config import MAX_NODES, layout

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubenode",
                                     description="A single-node Kubernetes cluster on this host, "
                                                 "in namespaces of its own.")
    parser.add_argument("command", choices=("up", "down", "status", "build", "images",
                                                 "recorder"))
    parser.add_argument("--nodes", type=int, default=1,
                        help="up: node 1 and this many minus one joined to it (default 1)")
    args = parser.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        lay = layout()
    except ValueError as exc:
        log(f"kubenode: {exc}")
        return 2

    if not 1 <= args.nodes <= MAX_NODES:
        log(f"kubenode: --nodes {args.nodes}: a cluster here has 1 to {MAX_NODES} nodes")
        return 2

    try:
        if args.command == "build":   # everything a node's start would build, no node
            build.build_all(lay, log)
            seconds = node.build_project_images(lay, log)
            log("images built: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
        elif args.command == "up":
            node.up(lay, log, nodes=args.nodes)
            print(node.shell_exports(lay), end="")
            log("stop it with: make kube-down")
        elif args.command == "down":
            seconds = node.down(lay, log)
            log(f"node down in {seconds['total']:.1f} s; nothing of it left on the host")
        elif args.command == "images":
            seconds = node.load_project_images(lay, log)
            log("images in the node: " + ", ".join(f"{k} {v:.0f} s" for k, v in seconds.items()))
        elif args.command == "recorder":
            from pathlib import Path

            from kubenode import recorder
            root = Path(__file__).resolve().parent.parent
            overlay = lay.state / "recorder-overlay"
            tag = recorder.deploy_recorder(node.Node(lay, log), root, overlay, log)
            log(f"the recorder runs {tag}; remove it with: kubectl delete -k {overlay}")
        else:
            print(node.status_json(lay))
    except (RuntimeError, PermissionError, OSError) as exc:
        log(f"kubenode {args.command}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
