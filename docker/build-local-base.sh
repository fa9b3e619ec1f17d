#!/usr/bin/env bash
# Build a Debian base image with python3 + python3-venv locally (debootstrap -> docker import),
# for machines where no image registry can be reached, so `FROM python:3.12-slim` cannot be pulled.
# Cached: when the image already exists nothing is built. The image name is the last line printed:
#
#   BASE=$(docker/build-local-base.sh | tail -n 1)
#   docker build --build-arg BASE="$BASE" -t throttle-lab -f docker/Dockerfile .
#
# Needs root, debootstrap and a running Docker engine. Settings (environment):
#   LOCAL_BASE_IMAGE  image name            (default throttle-lab-base:bookworm)
#   DEBIAN_SUITE      Debian release        (default bookworm: python3 3.11)
#   DEBIAN_MIRROR     Debian mirror         (default http://deb.debian.org/debian)
set -euo pipefail

IMAGE="${LOCAL_BASE_IMAGE:-throttle-lab-base:bookworm}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "build-local-base: $IMAGE exists, not rebuilt" >&2
    echo "$IMAGE"
    exit 0
fi
for tool in debootstrap docker; do
    command -v "$tool" >/dev/null || { echo "build-local-base: $tool not found (scripts/install-system-deps.sh installs it)" >&2; exit 1; }
done
if [ "$(id -u)" -ne 0 ]; then
    echo "build-local-base: debootstrap needs root" >&2
    exit 1
fi

ROOTFS="$(mktemp -d /tmp/throttle-lab-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT

echo "build-local-base: debootstrap $SUITE into $ROOTFS" >&2
debootstrap --variant=minbase --include=python3,python3-venv "$SUITE" "$ROOTFS" "$MIRROR" >&2
# No package lists, caches or logs in the image.
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
       "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/log/*.log
tar --numeric-owner -C "$ROOTFS" -c . \
    | docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' - "$IMAGE" >&2
echo "$IMAGE"
