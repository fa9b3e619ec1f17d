#!/usr/bin/env bash
# Build a wheelhouse of the project's dependencies (client and service extra) on the host, into
# docker/wheels/.
# docker/Dockerfile installs from it with `pip install --no-index` when it holds wheels; without
# it the image installs from the package index as usual. Use it where pip inside a build cannot
# reach the index (e.g. a TLS-intercepting proxy only the host trusts). The wheels must fit the
# image's Python: build them with the same minor version (Debian bookworm base: Python 3.11).
# Cached: skipped while docker/wheels/.pyproject.sha256 matches pyproject.toml.
#
#   docker/build-wheels.sh [PYTHON]     (default: python3)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${1:-python3}"
WHEELS="$ROOT/docker/wheels"
STAMP="$WHEELS/.pyproject.sha256"
WANT="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1) $("$PYTHON" -c 'import sys; print(sys.implementation.cache_tag)')"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "build-wheels: $WHEELS is up to date" >&2
    exit 0
fi
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
# PIP_FIND_LINKS may point at a host-only folder; the wheelhouse must come from the index.
LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
# Everything both images install: the client's dependencies and the service extra's.
if ! env -u PIP_FIND_LINKS "$PYTHON" -m pip wheel --wheel-dir "$WHEELS" "$ROOT[service]" "setuptools>=68" wheel \
        >"$LOG" 2>&1; then
    cat "$LOG" >&2
    echo "build-wheels: pip wheel failed" >&2
    exit 1
fi
rm -f "$WHEELS"/throttle_lab-*.whl   # the project itself is built from the source in the image
echo "$WANT" >"$STAMP"
echo "build-wheels: $(ls "$WHEELS"/*.whl | wc -l) wheels in $WHEELS" >&2
