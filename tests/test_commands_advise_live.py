"""``advise --cgroup`` and ``sweep --cgroup`` on a running service that is not burn-service
(benchmarks/burner_server.py, a stdlib server burning CPU per request) in a cgroup with a real
quota: the answer agrees with its own runs, each judged by the requests the quota delayed (the
group's cpu.stat says which; those slow without throttling are counted apart); the group's quota
is back to what it was afterwards, also after Ctrl-C and SIGTERM (real signals to a real
process); bad input is one line. Every figure is judged against what the same run measured
(the group's own cpu.stat), not against a speed.

On a shared, busy machine a 3 ms request can wait 30 ms for a CPU with no quota at all. So the
service's group gets 10x the default weight (``cpu.shares``) and the client a nice of -10: the
quota, not the neighbours, decides what the runs see, as on the machine a service runs in
production. Neither changes what a quota does."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from client.analysis.advise import MAIN_ROLES
from client.data.files import read_run
from tests.support import (BIN, HIERARCHIES, http_timing, require_kernel_quota, stop_by_pid,
                           usage_error)

BURN = "/burn?ms=3"     # 3 ms of CPU per request
ORIGINAL = "50000"      # the group's quota when each test starts: 0.5 CPU


NICE = ["nice", "-n", "-10"]


def boost(group: Path) -> Path:
    """The test group's weight against the machine's other load (removed with the group)."""
    if (group / "cpu.shares").exists():
        (group / "cpu.shares").write_text("10240")
    else:
        (group / "cpu.weight").write_text("1000")   # cgroup v2 (default 100)
    return group


def timed(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``http-timing ARGS`` at nice -10 (see the module docstring)."""
    return http_timing(*args, cwd=cwd, timeout=timeout, prefix=NICE)


BUSY = "below what the service does without any CPU limit"


def advise_on_a_busy_machine(*args: str, cwd: Path, restored: Callable[[], bool]
                             ) -> subprocess.CompletedProcess[str]:
    """``http-timing advise ARGS``, once more (at most twice) when it refused because the
    service missed the target *without any limit* (the machine's other load, not the quota:
    the tool says so, exit 2, and the quota is back each time)."""
    for _ in range(3):
        result = timed(*args, cwd=cwd, timeout=900)
        if not (result.returncode == 2 and BUSY in result.stderr):
            return result
        assert restored()
    return result


def quota(group: Path) -> str:
    """The group's quota in µs, "-1" for none (v1's spelling, also for v2's ``max``)."""
    if (group / "cpu.cfs_quota_us").exists():
        return (group / "cpu.cfs_quota_us").read_text().strip()
    first = (group / "cpu.max").read_text().split()[0]
    return "-1" if first == "max" else first


def no_quota(group: Path) -> None:
    if (group / "cpu.cfs_quota_us").exists():
        (group / "cpu.cfs_quota_us").write_text("-1")
    else:
        (group / "cpu.max").write_text("max 100000")


def advise_args(group: Path, base_url: str, *extra: str, p99: str = "30") -> list[str]:
    return ["advise", "--cgroup", str(group), "--url", base_url + BURN, "--p99", p99,
            "--requests", "100", "--profile-seconds", "3", "--no-alternatives", "--name", "a",
            *extra]


def check_judged_by_the_groups_counters(cwd: Path, runs: list[dict[str, Any]]) -> None:
    """Each run's requests slow without throttling are those of its own file over 30 ms in
    which the group's cpu.stat counted no throttled period (sequential requests: the exact
    change across each one); the rest over 30 ms are the ones throttling delayed."""
    for run in runs:
        if run["cpus"] is None:
            continue        # the profile: no limit, nothing to judge
        records = [r for r in read_run(cwd / "raw-data" / f"{run['name']}.csv").records if r.ok]
        assert all(r.cgroup_nr_throttled is not None for r in records), run["name"]
        over = [r for r in records if r.latency_ms > 30]
        assert run["slow_unthrottled"] == sum(r.cgroup_nr_throttled == 0 for r in over)
        assert run["throttled_over_target"] == sum((r.cgroup_nr_throttled or 0) > 0 for r in over)


@pytest.mark.root
def test_advise_a_running_service_in_place(tmp_path: Path) -> None:
    require_kernel_quota(1)
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(0.5) as service:
        boost(service.group)
        result = advise_on_a_busy_machine(*advise_args(service.group, service.base_url),
                                          "--json", cwd=tmp_path,
                                          restored=lambda: quota(service.group) == ORIGINAL)
        after = quota(service.group)
    assert result.returncode == 0, result.stderr[-3000:]
    assert after == ORIGINAL                       # put back as it was
    # put back, or, when its last run was at the original 0.5 CPU, already as it was (the
    # answer's check can run last, at 0.5 CPU)
    assert ("in place: restored: 0.5 CPU" in result.stderr
            or "in place: the limit is as it was: 0.5 CPU" in result.stderr), result.stderr[-3000:]
    answer = json.loads(result.stdout)
    rec = answer["recommended"]
    assert rec is not None and 0 < rec["cpus"] <= 2
    # the answer agrees with the runs it recorded, judged by the requests the quota delayed:
    # the runs at the answer met the target (their mean), the next lower limit tried did not
    at = [r for r in answer["runs"] if r["cpus"] == rec["cpus"] and r["role"] != "less"]
    assert len(at) >= 2 and answer["at_recommended"]["met"]
    assert answer["at_recommended"]["judged_p99_ms"] <= 30
    lower = answer["next_lower"]
    if lower is not None:   # else the smallest limit tried already met
        assert lower["met"] is False and lower["throttled_over_target"] > 0
    check_judged_by_the_groups_counters(tmp_path, answer["runs"])
    # 25 % less, measured on the same service: a miss is the quota's (requests over 30 ms the
    # kernel throttled); a met run says so
    less = answer["inplace"]["less_25"]
    assert less["cpus"] == pytest.approx(int(rec["cpus"] * 1000 * 0.75) / 1000)
    tables = (tmp_path / "pictures" / "a-advise.md").read_text()
    if less["met"]:
        assert "so a tighter limit met it too this time" in tables
    else:
        assert less["judged_p99_ms"] > 30 and less["throttled_over_target"] > 0
    assert (f"Slow without throttling: {answer['at_recommended']['slow_unthrottled']} of "
            f"{answer['at_recommended']['requests']} requests at the answer") in tables
    # each run carries what the group's cpu.stat counted
    counted = answer["inplace"]["cgroup"]
    assert set(counted) == {r["name"] for r in answer["runs"]} | set(less["name"].split(" + "))
    for name in less["name"].split(" + "):
        assert counted[name]["quota_cpus"] == pytest.approx(less["cpus"])
    profile = answer["runs"][0]
    assert profile["role"] == "profile" and counted[profile["name"]]["quota_cpus"] is None
    # the runs' own files: each run's metadata names the limit that was in force
    run = read_run(tmp_path / "raw-data" / f"{at[0]['name']}.csv")
    assert run.metadata.limit is not None
    assert run.metadata.limit.cpus == pytest.approx(rec["cpus"])
    assert run.timeline and all(r.cgroup_nr_throttled is not None for r in run.records)
    assert answer["inplace"]["left_at"]["quota_us"] == int(ORIGINAL)
    assert any("cpu.cfs_quota_us" in line for line in answer["inplace"]["permanent"])
    tables = (tmp_path / "pictures" / "a-advise.md").read_text()
    assert "Verification: the runs at" in tables and "25 % less" in tables


@pytest.mark.root
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_advice_puts_the_limit_back(tmp_path: Path, signum: int) -> None:
    """Ctrl-C (SIGINT) or SIGTERM while a candidate limit is in force: exit 130, the group's
    quota as it was, the completed runs saved."""
    require_kernel_quota(1)
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(0.5) as service:
        boost(service.group)
        # a target the busiest machine meets without a limit: the search must get going
        argv = [*NICE, str(BIN / "http-timing"),
                *advise_args(service.group, service.base_url, p99="80")]
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            seen = quota(service.group)
            while seen in (ORIGINAL, "-1") and proc.poll() is None:  # -1: the profile
                assert time.monotonic() < deadline, "no candidate limit was ever set"
                time.sleep(0.02)
                seen = quota(service.group)
            assert proc.poll() is None, proc.communicate()
            # at once: the candidate's run (100 requests) has just begun; a pause here could
            # outlast the search's last run on a busy machine (then it ends with 0)
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=120)
        finally:
            stop_by_pid(proc)   # SIGTERM: advise puts the quota back, then SIGKILL
        after = quota(service.group)
    assert proc.returncode == 130, err[-2000:]
    assert int(seen) not in (50000, -1)          # a candidate was in force when signalled
    assert after == ORIGINAL, out[-2000:]
    assert "in place: restored: 0.5 CPU" in out and "interrupted" in err
    assert list((tmp_path / "raw-data").glob("a-advise-*.csv"))


@pytest.mark.root
@HIERARCHIES
def test_sweep_a_running_service_in_place(tmp_path: Path, cgroup_version: int) -> None:
    """A group without a limit (--allow-new-limit): each limit in force in its run, no limit
    again at the end; on cgroup v1 and v2 (cpu.max)."""
    require_kernel_quota(cgroup_version)
    from tests.cgroup_fixtures import burner_in_group

    # the v2 guest runs ~15x slower (TCG): fewer limits and requests say as much there, and
    # no pictures (seconds each there; they are the same on either hierarchy)
    cpus, requests = (("none", "1", "0.3"), 60) if cgroup_version == 1 else (("none", "0.3"), 20)
    plot = [] if cgroup_version == 1 else ["--no-plot"]
    with burner_in_group(0.5) as service:
        no_quota(boost(service.group))
        result = timed("sweep", "--cgroup", f"pid:{service.pid}", "--url",
                       service.base_url + BURN, "--cpus", ",".join(cpus), "--requests",
                       str(requests), "--allow-new-limit", "--name", "s", *plot, cwd=tmp_path,
                       timeout=600)
        after = quota(service.group)
    assert result.returncode == 0, result.stderr[-3000:]
    assert after == "-1"
    runs = {name: read_run(tmp_path / "raw-data" / f"s-inplace-{name}.csv") for name in cpus}
    for name, run in runs.items():
        limit = run.metadata.limit
        assert (limit is None) if name == "none" else (limit is not None and
                                                       limit.cpus == float(name))
        assert run.timeline and len(run.records) == requests
    tight = runs["0.3"].timeline
    assert tight is not None and tight[-1].nr_throttled > tight[0].nr_throttled
    assert "cgroup: " in result.stdout and "periods throttled" in result.stdout
    assert (tmp_path / "pictures" / "s-inplace-sweep.png").exists() == (not plot)
    assert (tmp_path / "pictures" / "s-inplace-sweep.md").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--cgroup", "/nonexistent/group", "--url", "http://127.0.0.1:9/"], "no such cgroup"),
    (["--cgroup", "pid:999999999", "--url", "http://127.0.0.1:9/"], "no such process"),
    (["--cgroup", "/nonexistent/group"], "needs --url"),
    (["--url", "http://127.0.0.1:9/"], "goes with --cgroup"),
    (["--k8s", "shop/api", "--url", "http://127.0.0.1:9/"], "expected NAMESPACE/deployment/NAME"),
    (["--k8s", "shop/deployment/api", "--cgroup", "/x", "--url", "http://127.0.0.1:9/"],
     "give one of them"),
    (["--k8s", "shop/deployment/api"], "--k8s NS/deployment/NAME needs --url"),
    (["--cgroup", "/x", "--container", "app", "--url", "http://127.0.0.1:9/"],
     "--container goes with a pod"),
    (["--container", "app"], "goes with --cgroup"),
])
def test_bad_targets_are_one_line(tmp_path: Path, argv: list[str], message: str,
                                  capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for command in (["advise", "--p99", "30"], ["sweep"]):
        line = usage_error([*command, *argv], tmp_path, monkeypatch, capsys)
        assert message in line, line
    assert not (tmp_path / "raw-data").exists()


def test_no_cluster_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    line = usage_error(["advise", "--p99", "30", "--k8s", "shop/deployment/api", "--url",
                        "http://127.0.0.1:9/"], tmp_path, monkeypatch, capsys)
    assert "no kubeconfig" in line and "set KUBECONFIG as for kubectl" in line


@pytest.mark.root
def test_bad_input_on_a_real_group_is_one_line(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """No limit and no --allow-new-limit; a target the service misses without any limit;
    no permission (as user nobody): each one line, the group's quota unchanged."""
    require_kernel_quota(1)
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(0.5) as service:
        group, url = boost(service.group), service.base_url + BURN
        (group / "cpu.cfs_quota_us").write_text("-1")
        line = usage_error(["advise", "--cgroup", str(group), "--url", url, "--p99", "30"],
                           tmp_path, monkeypatch, capsys)
        assert "has no CPU limit now" in line and "--allow-new-limit" in line
        assert quota(group) == "-1"
        (group / "cpu.cfs_quota_us").write_text(ORIGINAL)
        line = usage_error(["advise", "--cgroup", str(group), "--url", url, "--p99", "0.5",
                            "--requests", "20", "--profile-seconds", "1"],
                           tmp_path, monkeypatch, capsys)
        assert "below what the service does without any CPU limit" in line, line
        assert quota(group) == ORIGINAL
        home = Path(tempfile.mkdtemp(prefix="nobody-"))   # where nobody may write its files
        home.chmod(0o777)
        try:
            nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                                     "--clear-groups", str(BIN / "http-timing"), "advise",
                                     "--cgroup", str(group), "--url", url, "--p99", "30"],
                                    cwd=home, capture_output=True, text=True, timeout=120)
        finally:
            shutil.rmtree(home)
        assert quota(group) == ORIGINAL
    lines = nobody.stderr.strip().splitlines()
    assert nobody.returncode == 2 and len(lines) == 1, nobody.stderr
    assert "permission denied" in lines[0] and "Traceback" not in nobody.stderr


@pytest.mark.docker
def test_advise_a_running_container_in_place(tmp_path: Path) -> None:
    """The same service in a Docker container (the locally built Debian base with python3,
    the burner mounted, host network), started with --cpus 0.5: advise docker:NAME changes
    it with docker update and leaves it at 0.5 CPU again."""
    from tests.dockerd import _local_base, docker, docker_engine
    from tests.cgroup_fixtures import BURNER

    with docker_engine():
        base = _local_base()
        if base is None:
            from tests.support import require
            require(False, "no local base image (needs root and debootstrap)")
        name = f"throttle-lab-live-{tmp_path.name[-8:]}"
        container = docker("run", "--detach", "--name", name, "--cpus", "0.5",
                           "--cpu-shares", "10240", "--network", "host", "--volume",
                           f"{BURNER}:/burner.py:ro", str(base), "python3", "/burner.py",
                           "--port", "0").stdout.strip()
        try:
            port = _container_port(container)
            with _boosted_parents(f"docker:{name}"):
                result = advise_on_a_busy_machine(
                    "advise", "--cgroup", f"docker:{name}", "--url",
                    f"http://127.0.0.1:{port}{BURN}", "--p99", "30", "--requests", "100",
                    "--profile-seconds", "3", "--name", "d", "--json", cwd=tmp_path,
                    restored=lambda: _nano_cpus(container) == "500000000")
            nano = _nano_cpus(container)
        finally:
            docker("rm", "--force", container)
    assert result.returncode == 0, result.stderr[-3000:]
    assert nano == "500000000"          # back at --cpus 0.5
    answer = json.loads(result.stdout)
    assert answer["recommended"] is not None and answer["at_recommended"]["met"]
    assert answer["inplace"]["kind"] == "docker"
    # docker cannot take a limit away: the profile ran at all the machine's CPUs
    profile = answer["inplace"]["cgroup"][answer["runs"][0]["name"]]
    assert profile["quota_cpus"] == pytest.approx(answer["search"]["ceiling_cpus"])
    less = answer["inplace"]["less_25"]
    assert less is not None and less["met"] is False
    assert any("docker update --cpus" in line for line in answer["inplace"]["permanent"])


@contextmanager
def _boosted_parents(spec: str) -> Iterator[None]:
    """The weight of the groups above the container's (Docker's ``/docker``) raised like the
    container's own (``--cpu-shares``) for the test, and put back by path at the end."""
    from client.run.cgroup_target import resolve_cgroup

    directory = resolve_cgroup(spec).directory.parent
    saved: list[tuple[Path, str]] = []
    try:
        while (directory / "cpu.shares").exists() and (directory.parent / "cpu.shares").exists():
            saved.append((directory, (directory / "cpu.shares").read_text().strip()))
            (directory / "cpu.shares").write_text("10240")
            directory = directory.parent
        yield
    finally:
        for path, shares in saved:
            (path / "cpu.shares").write_text(shares)


def _nano_cpus(container: str) -> str:
    from tests.dockerd import docker

    return docker("inspect", "--format", "{{.HostConfig.NanoCpus}}", container).stdout.strip()


def _container_port(container: str, timeout: float = 60) -> int:
    from tests.dockerd import docker

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = docker("logs", container).stdout.split()
        if len(logs) >= 2 and logs[0] == "port":
            return int(logs[1])
        time.sleep(0.2)
    raise AssertionError(f"the burner in {container} never said its port")


WAITS = "/burn?ms=3&sleep_ms=60&sleep_every=10"   # every 10th request also sleeps 60 ms


@pytest.mark.root
def test_advise_a_service_that_waits_on_some_requests(tmp_path: Path) -> None:
    """A multi-threaded service (a thread per connection, two at a time) whose every 10th
    request also sleeps 60 ms after its work, past the 30 ms target: it misses the target
    without any limit, and advise says so and why; in every run the requests over the target
    no throttling delayed are counted apart, so the answer is the smallest limit at which
    throttling pushes no further request past the target; the quota is put back byte for
    byte."""
    require_kernel_quota(1)
    from tests.cgroup_fixtures import burner_in_group

    files = ("cpu.cfs_quota_us", "cpu.cfs_period_us")
    with burner_in_group(0.5) as service:
        group = boost(service.group)
        before = [(group / name).read_bytes() for name in files]
        result = advise_on_a_busy_machine(
            "advise", "--cgroup", str(group), "--url", service.base_url + WAITS, "--p99", "30",
            "--concurrency", "2", "--requests", "100", "--profile-seconds", "3",
            "--no-alternatives", "--name", "w", "--json", cwd=tmp_path,
            restored=lambda: quota(group) == ORIGINAL)
        after = [(group / name).read_bytes() for name in files]
    assert result.returncode == 0, result.stderr[-3000:]
    assert after == before                          # put back byte for byte
    answer = json.loads(result.stdout)
    for run in answer["runs"]:   # the waits are there: every 10th request slept 60 ms
        records = read_run(tmp_path / "raw-data" / f"{run['name']}.csv").records
        assert sum(r.ok and r.latency_ms >= 60 for r in records) >= len(records) // 10
    # without a limit the waits miss the target, with no throttling in them: said as such
    profile = answer["runs"][0]
    assert profile["role"] == "profile" and profile["p99_ms"] > 30
    assert profile["slow_unthrottled"] > 0 and profile["throttled_over_target"] == 0
    assert "p99" in result.stderr and "even unthrottled" in result.stderr
    # the answer agrees with the runs it recorded, the waits counted apart: the runs at the
    # answer met the target, the next lower limit tried missed through requests throttling
    # delayed past it
    rec, at, lower = answer["recommended"], answer["at_recommended"], answer["next_lower"]
    assert rec is not None and at["cpus"] == rec["cpus"] and at["met"] is True
    assert at["judged_p99_ms"] <= 30 and at["slow_unthrottled"] > 0
    if lower is not None:   # else the smallest limit tried already met
        assert lower["met"] is False and lower["cpus"] < rec["cpus"]
        assert lower["throttled_over_target"] > 0
    for run in answer["runs"]:   # no miss of the search was the waits' doing
        if run["role"] in MAIN_ROLES and run["met"] is False:
            assert run["throttled_over_target"] > 0 or run["errors"], run
    check_judged_by_the_groups_counters(tmp_path, answer["runs"])
    tables = (tmp_path / "pictures" / "w-advise.md").read_text()
    assert (f"Slow without throttling: {at['slow_unthrottled']} of {at['requests']} requests "
            "at the answer") in tables
    assert "The service misses the target even without a limit" in tables
    assert "no limit makes them faster" in tables
