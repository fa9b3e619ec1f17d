#!/usr/bin/env bash
# Install the load tools whose result files `http-timing import` reads, for the tests that run
# them for real (tests/test_commands_import_tools.py): Go modules with `go install`, oha with
# `cargo install` (a Rust build: 40 min on this 2-CPU machine under heavy load on 2026-11-24;
# see docs/own-service.md, "Your load tool, your access logs"). Locust comes from PyPI through the
# `test` extra; nginx is a Debian package.
# k6 is NOT installed (AGPL): its files are written in the tests as its documentation shows.
# Idempotent: a tool already on PATH or in its install directory is skipped.
# Usage: scripts/install-load-tools.sh          (GOBIN defaults to ~/go/bin, cargo to ~/.cargo/bin)
set -euo pipefail

GOBIN="${GOBIN:-$HOME/go/bin}"
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
export GOBIN PATH="$GOBIN:$CARGO_BIN:$PATH"

have() { command -v "$1" >/dev/null 2>&1; }

go_tool() {   # go_tool NAME MODULE@VERSION
    if have "$1"; then echo "install-load-tools: $1 present"; return; fi
    if ! have go; then echo "install-load-tools: no go: cannot install $1" >&2; return 1; fi
    echo "install-load-tools: go install $2"
    go install "$2"
}

go_tool vegeta github.com/tsenart/vegeta/v12@v12.13.0
go_tool hey github.com/rakyll/hey@v0.1.4

if have oha; then
    echo "install-load-tools: oha present"
elif have cargo; then
    echo "install-load-tools: cargo install oha (a Rust build: many minutes)"
    start=$(date +%s)
    cargo install --locked --quiet oha@1.16.0
    echo "install-load-tools: oha built in $(( $(date +%s) - start )) s"
else
    echo "install-load-tools: no cargo: cannot install oha" >&2
    exit 1
fi

if ! have nginx && ! [ -x /usr/sbin/nginx ]; then
    echo "install-load-tools: apt-get install nginx"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q install -y nginx \
        || { apt-get -o DPkg::Lock::Timeout=600 -q update && \
             DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -q install -y nginx; }
fi
