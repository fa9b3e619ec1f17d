from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# matplotlib takes its backend from MPLBACKEND when it is first imported (not here: ~9 s of the
# v2 guest's pytest start under TCG, and the guest draws no pictures)
os.environ["MPLBACKEND"] = "Agg"

# Set (to "cgroup2") in the guest that tests/test_guest_cgroup2.py boots: a real cgroup v2 kernel.
GUEST_ENV = "THROTTLE_LAB_GUEST"


def pytest_configure(config: pytest.Config) -> None:
    """The tests send Ctrl-C (SIGINT) and SIGQUIT to the tools as a terminal would. A shell that
    started the suite in the background without job control (``make test &`` in a script) set
    both to ignored, and an ignored signal stays ignored across exec: every Ctrl-C test would
    hang. The tools respect an ignored SIGINT (a user who ignores it means it), so the suite
    gives the processes it starts a terminal's dispositions."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.hookimpl(trylast=True)   # after -k and -m: only the tests that will run count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cgroup2`` run only in the cgroup v2 guest (the host mounts the cpu
    controller on v1), and only they run there: the rest is deselected on each side. Nothing
    is reordered: ``make test`` runs the rigs' tests as pytest runs of their own (scripts/test.sh)."""
    in_guest = os.environ.get(GUEST_ENV) == "cgroup2"
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (keep if (item.get_closest_marker("cgroup2") is not None) == in_guest else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """In the v2 guest: say that the tests begin (when, for the guest's summary)."""
    from tests.guest import STARTED_ENV

    marker = os.environ.get(STARTED_ENV)
    if marker and os.environ.get(GUEST_ENV) == "cgroup2":
        Path(marker).write_text(f"{len(session.items)} tests\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The v2 guest's own time and slowest tests (they are not in pytest's durations here)."""
    from tests.guest import SUMMARY

    lines = config.stash.get(SUMMARY, None)
    if lines:
        terminalreporter.section("the cgroup v2 guest")
        for line in lines:
            terminalreporter.write_line(line)


ORIGINAL_0_3 = ("26 Status code 200 time 5207306\n31 Status code 200 time 5064695\n"
                "36 Status code 200 time 4997000\n41 Status code 200 time 4951787\n"
                "154 Status code 200 time 69835568\n257 Status code 200 time 69930524\n"
                "6 requests in 327ms avg 54ms\n")


@pytest.fixture(scope="session")
def kube_node(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The two-node cluster (kubenode), one per session, node 1 yielded: tests/kube.py."""
    from tests.kube import node_session

    yield from node_session()


@pytest.fixture(scope="session")
def node_recorder(kube_node: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The node recorder DaemonSet on the session's node, once for the modules that use it
    (tests/recorder_support.py); yields the agent's running pod (its JSON)."""
    from tests.recorder_support import recorder_up

    with recorder_up(kube_node, tmp_path_factory.mktemp("recorder")) as pod:
        yield pod


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with raw-data/throttled.* (in-process 5 %: below the share even a busy
    machine leaves a process, so its budget runs out), raw-data/free.* (no limit) and
    graph-30.txt (the original's lines), recorded once with real services."""
    from tests.support import http_timing, running_service, service_process

    cwd = tmp_path_factory.mktemp("explain")
    with service_process(["--cpu-limit", "5"]) as (base, _):
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "5000",
                             "--requests", "60", "--name", "throttled", "--quiet", "--no-plot",
                             cwd=cwd)
        assert result.returncode == 0, result.stderr
    with running_service() as base:
        result = http_timing("--url", base + "/cpuBurnFlow", "--iterations", "2000",
                             "--requests", "30", "--name", "free", "--quiet", "--no-plot",
                             cwd=cwd)
        assert result.returncode == 0, result.stderr
    (cwd / "graph-30.txt").write_text(ORIGINAL_0_3)
    return cwd
