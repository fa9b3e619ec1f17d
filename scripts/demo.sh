#!/usr/bin/env bash
# make demo: the sweep on the best backend this machine has — a real kernel CPU quota where it
# may create cgroups (root + a cpu controller), else the in-process throttle — at 1, 0.3 and
# 0.1 CPU, 100 requests of ~5 ms each. `http-timing sweep` starts the service under each limit
# on a free port, times it, stops it, and prints where every file is (about 20 s).
# Expects http-timing and burn-service on PATH (the Makefile puts the venv's bin first).
#
# Settings (environment): DEMO_BACKEND (auto|kernel|inprocess|docker, default auto),
# DEMO_CPUS (default 1,0.3,0.1), DEMO_REQUESTS (default 100), DEMO_NAME (file name prefix,
# default demo-<UTC time>; raw-data/demo-* and pictures/demo-* are not tracked by git).
set -euo pipefail
NAME="${DEMO_NAME:-demo-$(date -u +%Y%m%d-%H%M%S)}"

http-timing sweep --backend "${DEMO_BACKEND:-auto}" --cpus "${DEMO_CPUS:-1,0.3,0.1}" \
    --requests "${DEMO_REQUESTS:-100}" --iterations 5000 --name "$NAME"
