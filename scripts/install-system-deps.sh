#!/usr/bin/env bash
# Install the Debian packages that `make test` needs for its real-engine tests:
#   docker.io     the Docker engine (dockerd); tests start it themselves and stop it by pid
#   docker-compose  runs docker/compose.yaml (the limited/limitless pair)
#   debootstrap   builds the local base image when no image registry is reachable
#   chromium, chromium-driver   the real browser for the browser tests
#   python3-venv  `make` creates .venv with it
#   openssl       makes the self-signed certificate of the https tests
#   qemu-system-x86, linux-image-amd64, busybox-static   a real cgroup v2 kernel under qemu for
#                 the tests marked cgroup2 (tests/test_guest_cgroup2.py boots it with virtme-ng);
#                 its httpd (with a CGI script) is also one of the real servers of
#                 tests/test_run_wire_servers.py
#   curl          the reference client those tests compare http-timing's records with
#   nodejs        Node's http, another of those real servers (Go's is built with the Go
#                 toolchain scripts/install-load-tools.sh needs too)
#   wrk           benchmarks/timer_vs_wrk.py times the client's own timer against it
#   containerd, runc   Docker's engine runs on Debian's (the node builds its own, below)
#   etcd-server, containernetworking-plugins, conntrack, iptables, gcc, libc6-dev,
#   libseccomp-dev   the single-node Kubernetes cluster (`make kube-node`, kubenode/): its etcd,
#                 the CNI bridge/host-local/portmap plugins, what kube-proxy needs, gcc + libc6-dev
#                 to link the pause program static and runc (its containerd 2 and runc are built
#                 from the Go module proxy; runc's seccomp needs libseccomp-dev)
#   prometheus    its promtool checks the node agent's /metrics exposition and the recording
#                 and alerting rules in k8s/recorder/ (tests/test_agent*.py,
#                 tests/test_k8s_recorder.py); its service is never started (the policy-rc.d below)
#   tomcat10, tomcat10-examples   a real JVM: tests/test_threads_jvm.py starts Tomcat itself
#                 (its own CATALINA_BASE, on loopback) and times a JSP page of the examples; the
#                 packaged service is never started
# Idempotent and unattended: packages already installed are skipped, and no daemon is started
# (a temporary policy-rc.d refuses service starts during the install).
# Usage: sudo scripts/install-system-deps.sh [EXTRA_PACKAGE ...]
set -euo pipefail

PACKAGES=(docker.io docker-compose debootstrap chromium chromium-driver python3-venv openssl
          qemu-system-x86 linux-image-amd64 busybox-static curl wrk nodejs
          etcd-server containerd runc containernetworking-plugins conntrack iptables gcc libc6-dev
          libseccomp-dev
          prometheus tomcat10 tomcat10-examples "$@")
APT=(apt-get -o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0 -q)
export DEBIAN_FRONTEND=noninteractive

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for pkg in "${PACKAGES[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system-deps: all present: ${PACKAGES[*]}"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-system-deps: need root to install: ${missing[*]}" >&2
    exit 1
fi

POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
    trap 'rm -f "$POLICY"' EXIT
    printf '#!/bin/sh\nexit 101\n' >"$POLICY"
    chmod 755 "$POLICY"
fi

echo "install-system-deps: installing ${missing[*]}"
"${APT[@]}" update
"${APT[@]}" install -y --no-install-recommends "${missing[@]}"
