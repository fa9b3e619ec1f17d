#!/bin/sh
# pip install into /opt/venv, used by docker/Dockerfile: from the wheelhouse docker/wheels/ (made
# on the host by docker/build-wheels.sh) when it was built for this image's Python, else from
# the package index as usual.   pip-install.sh [PIP INSTALL ARGS...]
set -eu
WHEELS=/tmp/docker/wheels
STAMP="$WHEELS/.pyproject.sha256"
TAG="$(/opt/venv/bin/python -c 'import sys; print(sys.implementation.cache_tag)')"
if [ -f "$STAMP" ] && [ "$(cut -d' ' -f2 "$STAMP")" = "$TAG" ]; then
    echo "pip-install: from the wheelhouse ($TAG), no index"
    exec /opt/venv/bin/pip install --quiet --no-index --find-links "$WHEELS" "$@"
fi
if [ -f "$STAMP" ]; then
    echo "pip-install: docker/wheels is for $(cut -d' ' -f2 "$STAMP"), this image has $TAG: using the index"
fi
exec /opt/venv/bin/pip install --quiet "$@"
