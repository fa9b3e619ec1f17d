"""``advise --cgroup`` and ``sweep --cgroup`` on a running service that is not burn-service
(benchmarks/burner_server.py, a stdlib server burning CPU per request) in a cgroup with a real
quota: the answer agrees with its own runs, each judged by the requests the quota delayed (the
group's cpu.stat says which; those slow without throttling are counted apart); the group's quota
is back to what it was afterwards, also after Ctrl-C and SIGTERM (real signals to a real
process); bad input is one line. Every figure is judged against what the same run measured
(the group's own cpu.stat), not against a speed.

On a shared, busy machine a 3 ms request can wait 30 ms for a CPU with no quota at all, and
advise then refuses after its profile (one line, the quota put back): that is a correct answer
too. Whichever outcome a run reaches, the test checks what holds for it
(tests/advise_support.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from client.data.files import read_run
from tests.advise_support import advice, check_counted_by_the_group
from tests.support import (BIN, HIERARCHIES, http_timing, require, require_kernel_quota,
                           stop_by_pid, usage_error, wait_for_rows)

BURN = "/burn?ms=3"     # 3 ms of CPU per request
ORIGINAL = "50000"      # the group's quota when each test starts: 0.5 CPU


QUOTA_FILES = ("cpu.cfs_quota_us", "cpu.cfs_period_us")


def quota_files(group: Path) -> list[bytes]:
    """The group's quota files as the kernel shows them (v1)."""
    return [(group / name).read_bytes() for name in QUOTA_FILES]


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
        before = quota_files(service.group)
        result = http_timing(*advise_args(service.group, service.base_url), "--json",
                             cwd=tmp_path, timeout=900)
        after = quota_files(service.group)
    assert after == before                      # put back byte for byte
    # put back, or, when its last run was at the original 0.5 CPU, already as it was
    assert ("in place: restored: 0.5 CPU" in result.stderr
            or "in place: the limit is as it was: 0.5 CPU" in result.stderr), result.stderr[-3000:]
    answer = advice(result, tmp_path, "a")
    if answer is None:
        return      # refused after the profile (checked): the machine missed 30 ms unlimited
    inplace = answer["inplace"]
    assert inplace["original"]["quota_us"] == inplace["left_at"]["quota_us"] == int(ORIGINAL)
    # each run (and 25 % less) carries what the group's cpu.stat counted in it
    check_counted_by_the_group(answer, tmp_path, "a")
    check_judged_by_the_groups_counters(tmp_path, answer["runs"])
    profile = answer["runs"][0]
    assert inplace["cgroup"][profile["name"]]["quota_cpus"] is None     # no limit
    rec = answer["recommended"]
    if rec is None:
        return      # none met up to the ceiling (exit 3): checked against its runs
    assert 0 < rec["cpus"] <= answer["search"]["ceiling_cpus"]
    # the runs' own files: each run's metadata names the limit that was in force
    at = [r for r in answer["runs"] if r["cpus"] == rec["cpus"] and r["role"] != "less"]
    run = read_run(tmp_path / "raw-data" / f"{at[0]['name']}.csv")
    assert run.metadata.limit is not None
    assert run.metadata.limit.cpus == pytest.approx(rec["cpus"])
    assert run.timeline and all(r.cgroup_nr_throttled is not None for r in run.records)
    assert any("cpu.cfs_quota_us" in line for line in inplace["permanent"])
    tables = (tmp_path / "pictures" / "a-advise.md").read_text()
    assert "Verification: the runs at" in tables and "25 % less" in tables
    assert (f"Slow without throttling: {answer['at_recommended']['slow_unthrottled']} of "
            f"{answer['at_recommended']['requests']} requests at the answer") in tables


@pytest.mark.root
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_advice_puts_the_limit_back(tmp_path: Path, signum: int) -> None:
    """Ctrl-C (SIGINT) or SIGTERM while a limit other than the group's own is in force (the
    profile's none: it lasts at least 3 s, so the signal comes mid-run on any machine): exit
    130, the group's quota files as they were, the requests completed so far saved."""
    require_kernel_quota(1)
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(0.5) as service:
        before = quota_files(service.group)
        argv = [str(BIN / "http-timing"), *advise_args(service.group, service.base_url)]
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            seen = quota(service.group)
            while seen == ORIGINAL and proc.poll() is None:
                assert time.monotonic() < deadline, "the limit was never changed"
                time.sleep(0.02)
                seen = quota(service.group)
            wait_for_rows(tmp_path / "raw-data" / "a-advise-none.csv", 1, timeout=120)
            proc.send_signal(signum)
            out, err = proc.communicate(timeout=120)
        finally:
            stop_by_pid(proc)   # SIGTERM: advise puts the quota back, then SIGKILL
        after = quota_files(service.group)
    assert proc.returncode == 130, err[-2000:]
    assert seen == "-1"                          # the profile's: no limit
    assert after == before, out[-2000:]
    assert "in place: restored: 0.5 CPU" in out and "interrupted" in err
    assert "Traceback" not in err
    assert read_run(tmp_path / "raw-data" / "a-advise-none.csv").records


@pytest.mark.root
@HIERARCHIES
def test_sweep_a_running_service_in_place(tmp_path: Path, cgroup_version: int) -> None:
    """A group without a limit (--allow-new-limit): each limit in force in its run, no limit
    again at the end; on cgroup v1 and v2 (cpu.max)."""
    require_kernel_quota(cgroup_version)
    from tests.cgroup_fixtures import burner_in_group

    # the v2 guest runs ~15x slower (TCG): fewer limits and requests say as much there, and
    # no pictures (seconds each there; they are the same on either hierarchy)
    # the tight limit, 0.1 CPU on the host, is far below the share even a busy machine leaves
    # a service: its quota is what holds it back
    cpus, requests = (("none", "1", "0.1"), 60) if cgroup_version == 1 else (("none", "0.3"), 20)
    plot = [] if cgroup_version == 1 else ["--no-plot"]
    with burner_in_group(0.5) as service:
        no_quota(service.group)
        result = http_timing("sweep", "--cgroup", f"pid:{service.pid}", "--url",
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
    tight = runs[cpus[-1]].timeline
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
    require(shutil.which("setpriv") is not None, "no setpriv (util-linux)")
    from tests.cgroup_fixtures import burner_in_group

    with burner_in_group(0.5) as service:
        group, url = service.group, service.base_url + BURN
        (group / "cpu.cfs_quota_us").write_text("-1")
        line = usage_error(["advise", "--cgroup", str(group), "--url", url, "--p99", "30"],
                           tmp_path, monkeypatch, capsys)
        assert "has no CPU limit now: no CPU quota: throttling cannot happen here" in line
        assert "--allow-new-limit" in line
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
            # nobody keeps one capability, CAP_DAC_READ_SEARCH: it reads the checkout and the
            # venv wherever they are (a clone under a 0700 folder too), and writes only what
            # nobody may write (not the group's quota)
            nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                                     "--clear-groups", "--inh-caps=+dac_read_search",
                                     "--ambient-caps=+dac_read_search",
                                     str(BIN / "http-timing"), "advise",
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
        name = f"throttle-lab-live-{os.getpid()}"   # not a name an earlier run left
        container = docker("run", "--detach", "--name", name, "--cpus", "0.5",
                           "--network", "host", "--volume",
                           f"{BURNER}:/burner.py:ro", str(base), "python3", "/burner.py",
                           "--port", "0").stdout.strip()
        try:
            port = _container_port(container)
            result = http_timing(
                "advise", "--cgroup", f"docker:{name}", "--url",
                f"http://127.0.0.1:{port}{BURN}", "--p99", "30", "--requests", "100",
                "--profile-seconds", "3", "--name", "d", "--json", cwd=tmp_path, timeout=900)
            nano = _nano_cpus(container)
        finally:
            docker("rm", "--force", container)
    assert nano == "500000000"          # back at --cpus 0.5, whichever the outcome
    answer = advice(result, tmp_path, "d")
    if answer is None:
        return      # refused after the profile (checked): the machine missed 30 ms at 2 CPUs
    assert answer["inplace"]["kind"] == "docker"
    check_counted_by_the_group(answer, tmp_path, "d")
    # docker cannot take a limit away: the profile ran at all the machine's CPUs
    profile = answer["inplace"]["cgroup"][answer["runs"][0]["name"]]
    assert profile["quota_cpus"] == pytest.approx(answer["search"]["ceiling_cpus"])
    if answer["recommended"] is not None:
        assert any("docker update --cpus" in line for line in answer["inplace"]["permanent"])


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

    with burner_in_group(0.5) as service:
        group = service.group
        before = quota_files(group)
        result = http_timing(
            "advise", "--cgroup", str(group), "--url", service.base_url + WAITS, "--p99", "30",
            "--concurrency", "2", "--requests", "100", "--profile-seconds", "3",
            "--no-alternatives", "--name", "w", "--json", cwd=tmp_path, timeout=900)
        after = quota_files(group)
    assert after == before                          # put back byte for byte
    answer = advice(result, tmp_path, "w")
    if answer is None:
        return      # refused after the profile (checked): the machine missed 30 ms unlimited
    for run in answer["runs"]:   # the waits are there: every 10th request slept 60 ms
        records = read_run(tmp_path / "raw-data" / f"{run['name']}.csv").records
        assert sum(r.ok and r.latency_ms >= 60 for r in records) >= len(records) // 10
    # without a limit the waits miss the target, with no throttling in them: said as such
    profile = answer["runs"][0]
    assert profile["role"] == "profile" and profile["p99_ms"] > 30
    assert profile["slow_unthrottled"] > 0 and profile["throttled_over_target"] == 0
    assert "p99" in result.stderr and "even unthrottled" in result.stderr
    # the waits counted apart in every run, by the group's counters
    check_judged_by_the_groups_counters(tmp_path, answer["runs"])
    at = answer["at_recommended"]
    if at is None:
        return      # none met up to the ceiling (exit 3): checked against its runs
    # met: at most 1 % of its requests were over 30 ms through throttling, so most of the
    # 60 ms waits were counted apart
    assert at["slow_unthrottled"] > 0
    tables = (tmp_path / "pictures" / "w-advise.md").read_text()
    assert (f"Slow without throttling: {at['slow_unthrottled']} of {at['requests']} requests "
            "at the answer") in tables
    assert "The service misses the target even without a limit" in tables
    assert "no limit makes them faster" in tables
