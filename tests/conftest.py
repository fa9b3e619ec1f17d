from __future__ import annotations

import os
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("MPLBACKEND", "Agg")

ORIGINAL_0_3 = ("26 Status code 200 time 5207306\n31 Status code 200 time 5064695\n"
                "36 Status code 200 time 4997000\n41 Status code 200 time 4951787\n"
                "154 Status code 200 time 69835568\n257 Status code 200 time 69930524\n"
                "6 requests in 327ms avg 54ms\n")


def _cgroup2_here() -> bool:
    """Whether /sys/fs/cgroup is the unified (v2) hierarchy with the cpu controller."""
    try:
        return "cpu" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    except OSError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cgroup2`` run in the qemu guest (a real v2 kernel); elsewhere they are
    skipped with the reason (the guest runner runs them)."""
    if _cgroup2_here():
        return
    skip = pytest.mark.skip(reason="needs a cgroup v2 kernel with the cpu controller: runs in "
                                   "the qemu guest (pytest -m cgroup2 there)")
    for item in items:
        if "cgroup2" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with raw-data/throttled.* (in-process 30 %), raw-data/free.* (no limit)
    and graph-30.txt (the original's lines), recorded once with real services."""
    from tests.support import http_timing, running_service, service_process

    cwd = tmp_path_factory.mktemp("explain")
    with service_process(["--cpu-limit", "30"]) as (base, _):
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
