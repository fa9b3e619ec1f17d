#!/usr/bin/env bash
# make demo: start the burn service, time 100 requests with http-timing, stop the service.
# Expects burn-service and http-timing on PATH (the Makefile puts the venv's bin first).
set -euo pipefail
PORT="${DEMO_PORT:-7800}"
NAME="${DEMO_NAME:-demo-$(date -u +%Y%m%d-%H%M%S)}"
LOG="$(mktemp -t burn-service.XXXXXX.log)"

burn-service --port "$PORT" --log-level warning >"$LOG" 2>&1 &
SERVICE_PID=$!
cleanup() { kill "$SERVICE_PID" 2>/dev/null && wait "$SERVICE_PID" 2>/dev/null || true; rm -f "$LOG"; }
trap cleanup EXIT

for _ in $(seq 100); do
  if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=1)" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$SERVICE_PID" 2>/dev/null; then
    echo "demo: burn-service did not start:" >&2; cat "$LOG" >&2; exit 1
  fi
  sleep 0.2
done

http-timing --url "http://127.0.0.1:$PORT/cpuBurnFlow" --iterations 5000 --requests 100 --name "$NAME"
echo
echo "demo: raw data in raw-data/$NAME.csv (+ .json), picture in pictures/$NAME.png"
