#!/usr/bin/env bash
# `make test`: every test this machine permits, as three plain pytest runs at once.
#
#   pytest -m guest                                   the cgroup v2 guest: boots a v2 kernel
#                                                     under qemu and runs the tests marked
#                                                     cgroup2 inside (tests/guest.py)
#   pytest -m "node or docker"                        the tests on the project's Kubernetes
#                                                     node (its fixture brings it up and takes
#                                                     it down) and the Docker engine's: one
#                                                     process for the engine they share
#   pytest -m "not guest and not node and not docker" the host's other tests, in three
#     -n 3 --dist loadfile                            worker processes (pytest-xdist), a test
#                                                     file to a worker: most of them wait on a
#                                                     quota or a server, not on a CPU
#
# The first two run in the background from the start (they mostly wait: for the emulated
# CPUs, for the kubelet and the pods), the host's in the foreground; their outputs are printed
# after it, each whole. Arguments go to all three (`make test PYTEST_ARGS=--durations=30`); a
# run that selects nothing (pytest's status 5) is not a failure. The status is 0 when all
# three passed, else the first failed run's.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
logs=$(mktemp -d -t throttle-lab-test.XXXXXX)
pids=()

finish() {
    for pid in "${pids[@]}"; do
        if kill -0 "$pid" 2> /dev/null; then
            kill -INT "$pid" 2> /dev/null   # pytest stops qemu and the node on Ctrl-C
            wait "$pid" 2> /dev/null
        fi
    done
    rm -rf "$logs"
}
trap finish EXIT

"$python" -m pytest -m guest "$@" > "$logs/guest" 2>&1 &
pids+=($!)
"$python" -m pytest -m "node or docker" "$@" > "$logs/node" 2>&1 &
pids+=($!)

status=0
keep() {   # the first failure's status; 5 (nothing selected) is none
    if [ "$1" -ne 0 ] && [ "$1" -ne 5 ] && [ "$status" -eq 0 ]; then
        status=$1
    fi
}

workers=${PYTEST_WORKERS:-3}
echo "== pytest -m 'not guest and not node and not docker' -n $workers (beside it: pytest -m guest, pytest -m 'node or docker')"
"$python" -m pytest -m "not guest and not node and not docker" -n "$workers" --dist loadfile "$@"
keep $?
wait "${pids[1]}"
node_status=$?
echo "== pytest -m 'node or docker' (started with the host's run)"
cat "$logs/node"
keep $node_status
wait "${pids[0]}"
guest_status=$?
echo "== pytest -m guest (started with the host's run)"
cat "$logs/guest"
keep $guest_status
exit $status
