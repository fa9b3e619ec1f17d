"""``http-timing sweep`` end to end: it starts real services under each limit, times them,
stops them by pid/container id, and writes every run, the comparison picture and tables."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from client.data.files import read_run
from client.run.targets import resolve_backend
from tests.support import (BIN, gone, http_timing,
                           interrupted_after_rows, require_kernel_quota)

PNG = b"\x89PNG\r\n\x1a\n"


def sweep(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``http-timing sweep ARGS`` (``tests.support.http_timing``: stopped by its pid past
    ``timeout``, the services it started with it)."""
    return http_timing("sweep", *args, cwd=cwd, timeout=timeout)


def metadata(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# --- real sweeps ----------------------------------------------------------------------------

def test_inprocess_sweep_saves_runs_picture_and_table(tmp_path: Path) -> None:
    result = sweep("--backend", "inprocess", "--cpus", "1,0.5", "--requests", "4",
                   "--iterations", "1000", "--warmup", "2", "--name", "t", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for cpus, percent in (("1", 100), ("0.5", 50)):
        run = read_run(tmp_path / "raw-data" / f"t-inprocess-{cpus}.csv")
        assert len(run.records) == 4 and all(r.status == 200 for r in run.records)
        assert run.metadata.limits["inprocess"]["cpu_limit_percent"] == percent
        assert run.metadata.sweep.backend == "inprocess"
        assert run.metadata.warmup == 2  # sent first, not among the 4 recorded
        assert run.metadata.service is not None and gone(run.metadata.service["pid"])  # by its pid
        assert (tmp_path / "pictures" / f"t-inprocess-{cpus}.png").read_bytes()[:8] == PNG
    assert (tmp_path / "pictures" / "t-inprocess-sweep.png").read_bytes()[:8] == PNG
    table = (tmp_path / "pictures" / "t-inprocess-sweep.md").read_text()
    assert "| t-inprocess-1 | 1 CPU (in-process) | 4 |" in table
    assert "| t-inprocess-0.5 | 0.5 CPU (in-process) | 4 |" in table
    assert "t-inprocess-0.5  0.5 CPU (in-process)" in result.stdout  # printed too
    assert "comparison picture: pictures/t-inprocess-sweep.png" in result.stdout
    assert "Status code" not in result.stdout  # per-request lines only with --show-requests


def test_no_plot_leaves_the_raw_data_and_the_table_only(tmp_path: Path) -> None:
    result = sweep("--backend", "inprocess", "--cpus", "1,0.5", "--requests", "3",
                   "--iterations", "500", "--name", "n", "--no-plot", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "pictures").iterdir()) == ["n-inprocess-sweep.md"]
    table = (tmp_path / "pictures" / "n-inprocess-sweep.md").read_text()
    assert "| n-inprocess-0.5 | 0.5 CPU (in-process) | 3 |" in table and "](" not in table
    assert len(read_run(tmp_path / "raw-data" / "n-inprocess-0.5.csv").records) == 3
    assert "table: pictures/n-inprocess-sweep.md" in result.stdout
    assert "picture:" not in result.stdout and "pictures:" not in result.stdout


def test_rate_sweep_is_the_throughput_scaling_test(tmp_path: Path) -> None:
    result = sweep("--backend", "inprocess", "--cpus", "0.5,1", "--rate", "20", "--duration",
                   "0.5", "--iterations", "500", "--name", "s", "--show-requests", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert sum(1 for line in result.stdout.splitlines() if " Status code 200 time " in line) == 20
    scaling = (tmp_path / "pictures" / "s-inprocess-sweep-throughput.md").read_text()
    assert ("| limit | requests | RPS | vs previous | avg ms | p95 ms | p99 ms | error rate"
            in scaling)
    assert "| 0.5 CPU | 10 |" in scaling and "| 1 CPU | 10 |" in scaling
    assert "| 1 CPU | 10 |" in result.stdout
    run = read_run(tmp_path / "raw-data" / "s-inprocess-1.csv")
    assert run.metadata.mode == "open-loop" and run.metadata.rate_rps == 20
    assert all(r.scheduled_ns is not None for r in run.records)


def test_kernel_sweep_uses_a_real_quota_and_removes_it(tmp_path: Path) -> None:
    """On the host's cgroup v1. The kernel backend runs ``burn-service --cpus``, whose group
    on cgroup v2 (made, limited, counted, removed) test_cpu_quota's v2 tests check in the
    guest; here it would take minutes under TCG to say nothing more."""
    cgroup_version = 1
    require_kernel_quota(cgroup_version)
    result = sweep("--backend", "kernel", "--cpus", "0.5", "--requests", "4", "--iterations",
                   "1000", "--name", "k", cwd=tmp_path, timeout=240)
    assert result.returncode == 0, result.stderr
    run = read_run(tmp_path / "raw-data" / "k-kernel-0.5.csv")
    cgroup = run.metadata.limits["cgroup"]
    assert cgroup["cpus"] == 0.5 and cgroup["quota_us"] == 50_000
    assert cgroup["version"] == cgroup_version
    assert not Path(cgroup["path"]).exists()  # the supervisor removed its group
    assert gone(run.metadata.service["pid"])
    assert all(r.kernel_nr_throttled is not None for r in run.records)
    assert "periods" in result.stdout and "removed" in result.stdout  # cpu.stat summary


def test_auto_backend_picks_the_kernel_where_permitted(tmp_path: Path) -> None:
    backend, why_not = resolve_backend("auto")
    expected = backend.name
    result = sweep("--cpus", "0.5", "--requests", "2", "--iterations", "100", "--name", "a",
                   cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "raw-data" / f"a-{expected}-0.5.csv").exists()
    assert (why_not is None) == (expected == "kernel")
    if why_not:
        assert why_not in result.stdout


@pytest.mark.docker
def test_docker_sweep_runs_the_image_with_cpus(tmp_path: Path) -> None:
    from tests.dockerd import docker, docker_engine, project_image

    with docker_engine():
        image = project_image().image
        result = sweep("--backend", "docker", "--image", image, "--cpus", "0.5", "--requests",
                       "3", "--iterations", "1000", "--name", "d", cwd=tmp_path, timeout=400)
        assert result.returncode == 0, result.stderr
        run = read_run(tmp_path / "raw-data" / "d-docker-0.5.csv")
        container = run.metadata.service["container"]
        assert run.metadata.limits["cgroup"]["cpus"] == 0.5  # read inside the container
        listed = docker("ps", "--all", "--quiet", "--no-trunc", "--filter", f"id={container}")
        assert listed.stdout.strip() == ""  # stopped and removed by its id


def test_docker_without_an_image_is_one_clear_line(tmp_path: Path) -> None:
    result = sweep("--backend", "docker", "--image", "throttle-lab-missing:none", "--cpus",
                   "0.5", cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("http-timing: --backend docker cannot work here: ")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--cpus", "fast"], "is not a number of CPUs"),
    (["--backend", "inprocess", "--cpus", "2"], "at most 1 CPU"),
    (["--rate", "5", "--concurrency", "2"], "cannot be combined"),
    (["--name", "a/b"], "plain file name prefix"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = sweep("--backend", "inprocess", *args, cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "raw-data").exists()


def test_ctrl_c_stops_the_service_and_keeps_the_requests(tmp_path: Path) -> None:
    csv_path = tmp_path / "raw-data" / "i-inprocess-0.5.csv"
    code, out, err = interrupted_after_rows(
        [str(BIN / "http-timing"), "sweep", "--backend", "inprocess", "--cpus", "0.5,1",
         "--requests", "100000", "--iterations", "1000", "--name", "i"], tmp_path, csv_path, 5)
    assert code == 130, err
    assert "interrupted; 0 of 2 limits done" in err and "Traceback" not in err
    run = read_run(csv_path)
    assert len(run.records) >= 5  # what was on disk when Ctrl-C came, at least
    assert run.metadata.interrupted is True and run.metadata.completed == len(run.records)
    assert gone(run.metadata.service["pid"])
    assert not (tmp_path / "raw-data" / "i-inprocess-1.csv").exists()  # never started


# --- replicas -------------------------------------------------------------------------------

def check_replica_sweep(tmp_path: Path, backend: str, result: subprocess.CompletedProcess[str]
                        ) -> None:
    assert result.returncode == 0, result.stderr
    one = read_run(tmp_path / "raw-data" / f"r-{backend}-replicas-1.csv")
    four = read_run(tmp_path / "raw-data" / f"r-{backend}-replicas-4.csv")
    assert {r.replica for r in one.records} == {0}
    assert {r.replica for r in four.records if r.ok} == {0, 1, 2, 3}  # four distinct replicas
    assert four.metadata.replicas is not None and four.metadata.replicas.count == 4
    assert four.metadata.replicas.cpus_each == pytest.approx(0.1)
    assert len(four.metadata.replicas.rss_mib) == 4
    assert four.metadata.limit is not None and four.metadata.limit.cpus == pytest.approx(0.1)
    members = (four.metadata.service or {})["replicas"]
    assert len(members) == 4 and all(gone(m["pid"]) for m in members)  # stopped by pid
    table = (tmp_path / "pictures" / f"r-{backend}-sweep-replicas.md").read_text()
    assert "| replicas | CPU each | requests/s |" in table
    assert "| 1 | 0.4 |" in table and "| 4 | 0.1 |" in table
    assert (tmp_path / "pictures" / f"r-{backend}-sweep.png").read_bytes()[:8] == PNG


def test_replicas_in_process_n_small_or_one_big(tmp_path: Path) -> None:
    result = sweep("--backend", "inprocess", "--replicas", "1,4", "--cpus", "0.4",
                   "--concurrency", "4", "--duration", "2", "--iterations", "2000",
                   "--name", "r", cwd=tmp_path)
    check_replica_sweep(tmp_path, "inprocess", result)
    assert "replicas table: pictures/r-inprocess-sweep-replicas.md" in result.stdout


def test_replicas_under_the_kernel_quota_one_cgroup_each(tmp_path: Path) -> None:
    require_kernel_quota()
    result = sweep("--backend", "kernel", "--replicas", "1,4", "--cpus", "0.4",
                   "--concurrency", "4", "--duration", "2", "--iterations", "2000",
                   "--name", "r", cwd=tmp_path)
    check_replica_sweep(tmp_path, "kernel", result)
    four = read_run(tmp_path / "raw-data" / "r-kernel-replicas-4.csv")
    assert four.metadata.limits is not None
    assert not Path(four.metadata.limits["cgroup"]["path"]).exists()  # its group is gone


def test_a_fleet_of_twenty_at_one_percent_answers_an_open_loop(tmp_path: Path) -> None:
    result = sweep("--backend", "inprocess", "--replicas", "20", "--cpus", "0.2", "--rate",
                   "20", "--duration", "5", "--iterations", "500", "--name", "f", cwd=tmp_path,
                   timeout=400)
    assert result.returncode == 0, result.stderr
    run = read_run(tmp_path / "raw-data" / "f-inprocess-replicas-20.csv")
    assert len(run.records) == 100
    assert len({r.replica for r in run.records if r.ok}) >= 15
    assert "started 20/20 replicas" in result.stdout
    members = (run.metadata.service or {})["replicas"]
    assert all(gone(m["pid"]) for m in members)


@pytest.mark.parametrize(("args", "message"), [
    (["--replicas", "1,x"], "whole numbers"),
    (["--replicas", "0"], "must be >= 1"),
    (["--replicas", "2", "--cpus", "0.4,0.2"], "one total"),
])
def test_bad_replicas_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = sweep("--backend", "inprocess", *args, cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
