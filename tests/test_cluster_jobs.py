"""``cluster --jobs N``: the agents' windows replayed in N worker processes give the same table
as in one. A real HTTP server on loopback stands in for the API server and the two nodes'
agents (benchmarks/fake_kube.py), holding windows like the node agent's: idle pause pods and,
one workload in four, a pod its 0.5 CPU limit held in most periods
(benchmarks/cluster_offline.py). The console script runs as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from benchmarks.cluster_offline import windows
from benchmarks.fake_kube import Cluster, fake_kube
from benchmarks.prometheus_week import NAMESPACE, workload_lists
from client.advise.cluster_rows import POOL_FROM, replay_processes
from tests.support import BIN, http_timing, require, require_kernel_quota, stop_by_pid

WORKLOADS = POOL_FROM + 4
SINCE_S = 20


def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str,
          prefix: Sequence[str] = ()) -> tuple[int, dict[str, object], str]:
    until = time.time()
    fake = Cluster(workload_lists(WORKLOADS), {"node-1": "new", "node-2": "new"},
                   windows(WORKLOADS, 4, SINCE_S, int((until - SINCE_S) * 1e9)))
    tmp_path.mkdir()
    with fake_kube(fake, tmp_path) as kubeconfig:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        done = http_timing("cluster", "-n", NAMESPACE, "--since", str(SINCE_S), "--until",
                           f"{until:.3f}", "--json", *extra, cwd=tmp_path, timeout=240,
                           prefix=prefix)
    return done.returncode, json.loads(done.stdout or "{}"), done.stderr


@pytest.mark.timeout(300)
def test_rows_replayed_in_worker_processes_are_the_rows_of_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one_code, one, one_err = table(tmp_path / "one", monkeypatch, "--jobs", "1")
    two_code, two, two_err = table(tmp_path / "two", monkeypatch, "--jobs", "2")
    assert one_code == 0, one_err
    assert two_code == 0, two_err
    assert one["replay_processes"] == 1 and two["replay_processes"] == 2, (one, two)
    rows = one["workloads"]
    assert isinstance(rows, list) and len(rows) == WORKLOADS
    # some held by their limit, some idle: both kinds of row went through the workers
    assert any(r["periods_throttled"] for r in rows) and not all(r["periods_throttled"]
                                                                 for r in rows)
    assert two["workloads"] == rows   # the same rows, in the same order
    assert two["no_quota"] == one["no_quota"] and two["not_recorded"] == one["not_recorded"]
    assert not two_err.strip(), two_err   # a worker prints nothing of its own


def test_a_small_table_or_a_picture_is_replayed_in_this_process() -> None:
    assert replay_processes(4, POOL_FROM - 1, False) == 1
    assert replay_processes(4, POOL_FROM, True) == 1
    assert replay_processes(4, POOL_FROM, False) == 4
    assert replay_processes(64, POOL_FROM, False) == POOL_FROM   # one a workload at most
    assert replay_processes(1, 1000, False) == 1


@pytest.mark.parametrize("jobs", ["0", "-1", "two", "65"])
def test_a_bad_jobs_is_one_line(tmp_path: Path, jobs: str) -> None:
    done = http_timing("cluster", "-n", "x", "--jobs", jobs, cwd=tmp_path)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--jobs" in lines[0], done.stderr


def children(pid: int) -> set[int]:
    """``pid``'s children now (every task's), none once it is gone."""
    found: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found.update(int(c) for c in (task / "children").read_text().split())
    except (OSError, ValueError):
        pass
    return found


def cpu_s(pids: set[int]) -> float:
    """The CPU (user and system, s) these processes have used, those still there."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])   # utime, stime (clock ticks)
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent's wait does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_workers_end_with_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          how: signal.Signals) -> None:
    """Stopped while its workers replay, ``cluster`` leaves none running: on SIGTERM it ends
    them and says so in one line (exit 130); killed, the kernel ends them
    (``PR_SET_PDEATHSIG``)."""
    require(sys.platform.startswith("linux"), "the workers' end is Linux's PR_SET_PDEATHSIG "
                                              "and /proc's children")
    n, since, until = 600, 600, time.time()
    fake = Cluster(workload_lists(n), {"node-1": "new", "node-2": "new"},
                   windows(n, 4, since, int((until - since) * 1e9)))
    with fake_kube(fake, tmp_path) as kubeconfig:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
        # its output to files: a worker left running would hold a pipe open
        with (tmp_path / "out").open("w") as out, (tmp_path / "err").open("w") as err:
            proc = subprocess.Popen([str(BIN / "http-timing"), "cluster", "-n", NAMESPACE,
                                     "--since", str(since), "--until", f"{until:.3f}",
                                     "--json", "--jobs", "2"], cwd=tmp_path, stdout=out,
                                    stderr=err, text=True,
                                    # its scratch folder here: killed, it cannot remove it
                                    env=dict(os.environ, TMPDIR=str(tmp_path)))
        try:
            # two workers and the resource tracker, stopped once the workers replay (their
            # CPU): a worker still starting would end by itself at its first read
            workers: set[int] = set()
            deadline = time.monotonic() + 120
            while ((len(workers) < 3 or cpu_s(workers) < 1.0) and proc.poll() is None
                   and time.monotonic() < deadline):
                workers |= children(proc.pid)
                time.sleep(0.05)
            assert len(workers) >= 3 and proc.poll() is None, (
                f"the command ended (exit {proc.returncode}) or started {len(workers)} of 3 "
                f"processes ({cpu_s(workers):.1f} s of CPU) before it could be stopped")
            proc.send_signal(how)
            proc.wait(timeout=60)
        finally:
            stop_by_pid(proc)
    err = (tmp_path / "err").read_text()
    if how == signal.SIGTERM:
        assert proc.returncode == 130, (proc.returncode, err)
        assert err.strip().splitlines() == ["http-timing cluster: interrupted (nothing was "
                                            "changed)"], err
    else:
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, err)
    deadline = time.monotonic() + 30
    while any(alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in workers if alive(p)]
    for p in left:   # not left behind even when the test fails
        os.kill(p, signal.SIGKILL)
    assert not left, f"still running 30 s after the command ended: {left}"


@pytest.mark.root
@pytest.mark.timeout(300)
def test_under_a_one_cpu_quota_it_replays_in_one_process(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Run as in a pod limited to 1 CPU (``cpu-quota --cpus 1``: a real kernel quota on its
    group), ``cluster`` starts no worker: more processes could not run at once; ``--jobs``
    still says how many."""
    require_kernel_quota()
    quota = [str(BIN / "cpu-quota"), "--cpus", "1", "--quiet", "--"]
    code, default, err = table(tmp_path / "default", monkeypatch, prefix=quota)
    assert code == 0, err
    assert default["replay_processes"] == 1, default["replay_processes"]
    code, told, err = table(tmp_path / "told", monkeypatch, "--jobs", "2", prefix=quota)
    assert code == 0, err
    assert told["replay_processes"] == 2 and told["workloads"] == default["workloads"]


def test_replaying_puts_the_collector_back() -> None:
    import gc

    from client.advise.cluster_rows import REPLAY_GC_THRESHOLD, replaying

    before = gc.get_threshold()
    with replaying():
        assert gc.get_threshold() == REPLAY_GC_THRESHOLD
        assert gc.get_freeze_count() > 0   # the modules left out of collections
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with pytest.raises(KeyError), replaying():
        raise KeyError("a replay failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
