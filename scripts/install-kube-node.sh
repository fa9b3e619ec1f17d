#!/usr/bin/env bash
# Build what the project's Kubernetes node needs before a test starts it: Kubernetes,
# containerd 2, runc, CoreDNS, Traefik, metrics-server and pause from the Go module proxy into
# /var/cache/throttle-lab, the project's service and client images and the node agent's image
# into Docker's cache (`python -m kubenode build`). On a fresh machine that is many minutes (Kubernetes alone ~8 on
# a cold Go cache); the node tests' fixture would build the same, but under a test's timeout.
# Idempotent: what is built is found and skipped in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "install-kube-node: the node needs root; skipped" >&2
    exit 0
fi
make venv
.venv/bin/python -m kubenode build
# The agent's Go tests compile client-go: build them now (run none) so the suite's run of them
# starts from a warm cache.
GO="$(command -v go || echo /usr/local/go/bin/go)"
if [ -x "$GO" ]; then
    (cd agent && "$GO" test -count=1 -run '^$' ./... >/dev/null)
fi
