#!/usr/bin/env bash
# `make test`: every test this machine permits, as three plain pytest runs.
#
#   pytest -m guest                       the cgroup v2 guest: boots a v2 kernel under qemu and
#                                         runs the tests marked cgroup2 inside (tests/guest.py)
#   pytest -m "not guest and not node"    the host's tests
#   pytest -m node                        the tests on the project's Kubernetes node (its
#                                         fixture brings the node up and takes it down)
#
# The guest's run goes on in the background from the start (it is the longest, and it mostly
# waits for its emulated CPUs); the host's run and then the node's run in the foreground. The
# guest's output is printed when it ends. Arguments go to all three (`make test
# PYTEST_ARGS=--durations=30`); a run that selects nothing (pytest's status 5) is not a failure.
# The status is 0 when all three passed, else the first failed run's.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
guest_log=$(mktemp -t throttle-lab-guest.XXXXXX)
guest_pid=""

finish() {
    if [ -n "$guest_pid" ] && kill -0 "$guest_pid" 2> /dev/null; then
        kill -INT "$guest_pid" 2> /dev/null   # pytest stops qemu on Ctrl-C (tests/guest.py)
        wait "$guest_pid" 2> /dev/null
    fi
    rm -f "$guest_log"
}
trap finish EXIT

"$python" -m pytest -m guest "$@" > "$guest_log" 2>&1 &
guest_pid=$!

status=0
keep() {   # the first failure's status; 5 (nothing selected) is none
    if [ "$1" -ne 0 ] && [ "$1" -ne 5 ] && [ "$status" -eq 0 ]; then
        status=$1
    fi
}

echo "== pytest -m 'not guest and not node' (the guest's run goes on beside it: pytest -m guest)"
"$python" -m pytest -m "not guest and not node" "$@"
keep $?
echo "== pytest -m node"
"$python" -m pytest -m node "$@"
keep $?
wait "$guest_pid"
guest_status=$?
guest_pid=""
echo "== pytest -m guest (started with the host's run)"
cat "$guest_log"
keep $guest_status
exit $status
