"""``http-timing import`` with the real tools: burn-service under a kernel quota, ``http-timing
record`` on its group, the tool's own sequential run, the import, and the marks checked
against the group's ``cpu.stat`` throttled time (tests/import_support.py). vegeta, hey, oha,
Locust and nginx run here (scripts/install-load-tools.sh, the ``test`` extra, Debian); k6
(AGPL, not installed), JMeter, Envoy and Traefik (not runnable here; the Kubernetes node's
tests run the real Traefik) get files written exactly as their documentation and source show,
from real requests to the same service timed by the test."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.import_support import (ITERATIONS, REQUESTS, check_marks, import_file,
                                  load_until_throttled, recorded_service, run_tool,
                                  timed_requests, tool, write_documented)
from tests.nginx_conf import nginx_binary, nginx_conf
from tests.support import free_port, http_timing, require, stop_by_pid

pytestmark = pytest.mark.root


def test_vegeta_csv_and_json(tmp_path: Path) -> None:
    vegeta = tool("vegeta")
    with recorded_service(tmp_path) as rec:
        targets = tmp_path / "targets.txt"
        targets.write_text(f"GET {rec.url}\n")

        def attack(round_: int) -> None:   # by time only (-lazy ends on a "no targets" error)
            run_tool([vegeta, "attack", "-targets", str(targets), "-rate", "0", "-workers", "1",
                      "-max-workers", "1", "-duration", "3s"], tmp_path,
                     tmp_path / f"r{round_}.bin")

        # 15 periods throttled: at least 150 ms of CPU burnt, five requests' worth
        rounds = load_until_throttled(rec, attack, periods=15)
    bins = [str(tmp_path / f"r{i}.bin") for i in range(1, rounds + 1)]
    for to in ("csv", "json"):
        encoded = subprocess.run([vegeta, "encode", "--to", to, *bins], capture_output=True,
                                 check=True).stdout
        (tmp_path / f"vegeta.{to}").write_bytes(encoded)
        out = import_file(tmp_path, tmp_path / f"vegeta.{to}", f"vegeta-{to}")
        assert f"(vegeta-{to})" in out and "clock check" in out
        check_marks(tmp_path, f"vegeta-{to}", f"vegeta-{to}", requests=5)


def test_hey_csv_needs_its_start(tmp_path: Path) -> None:
    hey = tool("hey")
    with recorded_service(tmp_path) as rec:
        start = time.time()
        run_tool([hey, "-n", str(REQUESTS), "-c", "1", "-o", "csv", rec.url], tmp_path,
                 tmp_path / "hey.csv")
    no_start = http_timing("import", "hey.csv", "--timeline", "raw-data/t.cgroup.csv",
                           cwd=tmp_path)
    assert no_start.returncode == 2 and "--start" in no_start.stderr
    assert len(no_start.stderr.strip().splitlines()) == 1
    import_file(tmp_path, tmp_path / "hey.csv", "hey", "--start", f"{start:.6f}")
    check_marks(tmp_path, "hey", "hey-csv")


def test_oha_csv_and_sqlite(tmp_path: Path) -> None:
    oha = tool("oha")
    with recorded_service(tmp_path) as rec:
        start_csv = time.time()
        run_tool([oha, "-n", str(REQUESTS), "-c", "1", "--no-tui", "--output-format", "csv",
                  rec.url], tmp_path, tmp_path / "oha.csv")
        start_db = time.time()
        run_tool([oha, "-n", str(REQUESTS), "-c", "1", "--no-tui", "--db-url",
                  str(tmp_path / "oha.db"), rec.url], tmp_path)
    import_file(tmp_path, tmp_path / "oha.csv", "oha-csv", "--start", f"{start_csv:.6f}")
    check_marks(tmp_path, "oha-csv", "oha-csv")
    with sqlite3.connect(tmp_path / "oha.db") as db:
        assert db.execute("SELECT count(*) FROM oha").fetchone()[0] == REQUESTS
    db.close()
    import_file(tmp_path, tmp_path / "oha.db", "oha-db", "--start", f"{start_db:.6f}")
    check_marks(tmp_path, "oha-db", "oha-sqlite")


LOCUST_REQUESTS = 6
LOCUSTFILE = """
from locust import HttpUser, constant, events, task
from locust.contrib.csv_request_logger import CsvRequestLogger

logger = CsvRequestLogger("requests.csv")


@events.init.add_listener
def on_locust_init(environment, **kwargs):
    logger.register(environment)


class One(HttpUser):
    wait_time = constant(0)
    done = 0

    @task
    def burn(self):
        self.client.get("/cpuBurnFlow?iterations=%d")
        One.done += 1
        if One.done >= %d:   # a count, not a time: what a request costs here varies
            self.environment.runner.quit()
"""


def test_locust_csv_request_logger(tmp_path: Path) -> None:
    locust = Path(sys.executable).parent / "locust"
    require(locust.exists(), "locust is not installed (pip install -e '.[test]')")
    # LOCUST_REQUESTS requests, then the runner quits (-t only bounds it): a fixed time gets as
    # few requests as a busy machine allows
    (tmp_path / "locustfile.py").write_text(LOCUSTFILE % (ITERATIONS, LOCUST_REQUESTS))
    with recorded_service(tmp_path) as rec:
        run_tool([str(locust), "-f", "locustfile.py", "--headless", "-u", "1", "-r", "1",
                  "-t", "100s", "-H", rec.base_url, "--only-summary", "--loglevel", "WARNING"],
                 tmp_path)
    import_file(tmp_path, tmp_path / "requests.csv", "locust")
    check_marks(tmp_path, "locust", "locust-csv", requests=LOCUST_REQUESTS)


NGINX_HTTP = """
    {log_format}
    access_log {dir}/access.log timing;
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass {upstream}; }}
    }}
"""


def test_nginx_access_log(tmp_path: Path) -> None:
    from client.data.formats.nginx import LOG_FORMAT

    nginx = nginx_binary() or tool("nginx")
    port = free_port()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    with recorded_service(tmp_path) as rec:
        nginx_conf(prefix, NGINX_HTTP.format(dir=prefix, log_format=LOG_FORMAT, port=port,
                                             upstream=rec.base_url))
        proc = subprocess.Popen([nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            result = http_timing("--url", f"http://127.0.0.1:{port}/cpuBurnFlow",
                                 "--iterations", str(ITERATIONS), "--requests", str(REQUESTS),
                                 "--warmup", "0", "--quiet", "--no-plot", "--name", "through",
                                 cwd=tmp_path)
            assert result.returncode == 0, (result.stderr, (prefix / "error.log").read_text())
        finally:
            proc.send_signal(signal.SIGQUIT)   # graceful: the log is written
            try:
                proc.communicate(timeout=15)
            finally:
                stop_by_pid(proc)
    log = prefix / "access.log"
    assert len(log.read_text().splitlines()) >= REQUESTS
    import_file(tmp_path, log, "nginx")
    check_marks(tmp_path, "nginx", "nginx")


UPSTREAMINFO_MSEC = (   # ingress-nginx's log-format-upstream (upstreaminfo), + $msec at the end
    "log_format upstreaminfo '$remote_addr - $remote_user [$time_local] \"$request\" '\n"
    "    '$status $body_bytes_sent \"$http_referer\" \"$http_user_agent\" '\n"
    "    '$request_length $request_time [$proxy_upstream_name] "
    "[$proxy_alternative_upstream_name] '\n"
    "    '$upstream_addr $upstream_response_length $upstream_response_time $upstream_status '\n"
    "    '$req_id $msec';")
INGRESS_HTTP = """
    map $http_x_request_id $req_id {{ default $http_x_request_id; "" $request_id; }}
    {log_format}
    access_log {dir}/access.log upstreaminfo;
    upstream pods {{ server {pod_a}; server {pod_b}; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            set $proxy_upstream_name "throttle-lab-limited-7800";
            set $proxy_alternative_upstream_name "";
            proxy_pass http://pods;
        }}
    }}
"""


def test_nginx_log_format_upstreaminfo_one_pod_of_two(tmp_path: Path) -> None:
    """The real nginx as an Ingress would run it: ingress-nginx's upstreaminfo + $msec, two
    pods behind it (the quota'd burn-service, and an unlimited one) served in turn; the log
    read with ``--log-format`` in nginx's syntax and ``--upstream`` the quota'd pod's
    address: its requests marked, in agreement with its group's cpu.stat."""
    from client.data.files import read_run
    from tests.support import service_process

    nginx = nginx_binary() or tool("nginx")
    port = free_port()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    with recorded_service(tmp_path) as rec, service_process() as (other, _proc):
        pod_a, pod_b = rec.base_url.split("://")[1], other.split("://")[1]
        nginx_conf(prefix, INGRESS_HTTP.format(dir=prefix, log_format=UPSTREAMINFO_MSEC,
                                               port=port, pod_a=pod_a, pod_b=pod_b))
        proc = subprocess.Popen([nginx, "-p", str(prefix), "-c", str(prefix / "nginx.conf")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            result = http_timing("--url", f"http://127.0.0.1:{port}/cpuBurnFlow",
                                 "--iterations", str(ITERATIONS), "--requests",
                                 str(2 * REQUESTS), "--warmup", "0", "--quiet", "--no-plot",
                                 "--name", "through", cwd=tmp_path)
            assert result.returncode == 0, (result.stderr, (prefix / "error.log").read_text())
        finally:
            proc.send_signal(signal.SIGQUIT)   # graceful: the log is written
            try:
                proc.communicate(timeout=15)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    log = prefix / "access.log"
    lines = log.read_text().splitlines()
    # http-timing's own GET /limits first, then the burns, each pod in turn
    assert len(lines) >= 2 * REQUESTS and "[throttle-lab-limited-7800] []" in lines[0]
    served = sum(1 for line in lines if f"] [] {pod_a} " in line)
    assert served >= REQUESTS
    out = import_file(tmp_path, log, "ingress", "--log-format", UPSTREAMINFO_MSEC,
                      "--upstream", pod_a)
    assert f"{served} of {len(lines)} requests served by {pod_a}" in out
    check_marks(tmp_path, "ingress", "nginx")
    assert len(read_run(tmp_path / "raw-data" / "ingress.csv").records) == served
    wrong = http_timing("import", str(log), "--timeline", "raw-data/t.cgroup.csv",
                        "--log-format", "$remote_addr [$time_local] $status", cwd=tmp_path)
    assert wrong.returncode == 2 and "needs $msec" in wrong.stderr


@dataclass(frozen=True)
class Timed:
    """One recorded load for the files written as documented: the directory holding the
    group's timeline (raw-data/t.cgroup.csv), the requests timed by the test, their URL."""
    cwd: Path
    requests: list[tuple[int, int, int]]
    url: str


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> Timed:
    """Real requests to the quota'd service, timed once for every format written as its
    documentation shows (each format's file is its own import into the same directory)."""
    cwd = tmp_path_factory.mktemp("documented")
    with recorded_service(cwd) as rec:
        requests = timed_requests(rec.url)
    return Timed(cwd, requests, rec.url)


@pytest.mark.parametrize("fmt", ["k6-json", "k6-csv", "jmeter-csv", "envoy", "envoy-json",
                                 "traefik-json"])
def test_files_written_as_documented(fmt: str, timed: Timed) -> None:
    """k6 (AGPL: not installed), JMeter, Envoy and Traefik (cannot run here): real requests to
    the quota'd service, timed by the test and written as each tool's documentation shows."""
    source = timed.cwd / f"results.{fmt}"
    write_documented(fmt, timed.requests, timed.url, source)
    out = import_file(timed.cwd, source, f"imported-{fmt}")
    assert f"({fmt})" in out
    check_marks(timed.cwd, f"imported-{fmt}", fmt)


def test_traefik_json_one_pod_of_two(tmp_path: Path) -> None:
    """An Ingress's log (Traefik's JSON) with two pods behind it: real requests alternate
    between the quota'd service and a second, unlimited one, each line names the address that
    answered (ServiceAddr), and ``--upstream`` marks the quota'd one's against its timeline."""
    from client.data.files import read_run
    from tests.import_support import traefik_lines
    from tests.support import service_process

    with recorded_service(tmp_path) as rec, service_process() as (other, _proc):
        addresses = [rec.base_url.split("://")[1], other.split("://")[1]]
        requests: list[tuple[int, int, int, str]] = []
        with httpx.Client(timeout=30) as client:
            for i in range(2 * REQUESTS):
                base = (rec.base_url, other)[i % 2]
                start = time.time_ns()
                status = client.get(f"{base}/cpuBurnFlow?iterations={ITERATIONS}").status_code
                requests.append((start, time.time_ns(), status, addresses[i % 2]))
    source = tmp_path / "traefik.json"
    source.write_text("\n".join(traefik_lines("traefik-json", requests,
                                              f"/cpuBurnFlow?iterations={ITERATIONS}")) + "\n")
    out = import_file(tmp_path, source, "pod", "--upstream", addresses[0])
    assert f"{REQUESTS} of {2 * REQUESTS} requests served by {addresses[0]}" in out
    check_marks(tmp_path, "pod", "traefik-json")
    assert len(read_run(tmp_path / "raw-data" / "pod.csv").records) == REQUESTS


def test_traefik_clf_is_read_not_marked(timed: Timed) -> None:
    """Traefik's default CLF: the requests read (latency to the ms), none marked (the start
    is whole seconds), the reason printed."""
    from client.data.files import read_run

    source = timed.cwd / "access.log"
    write_documented("traefik", timed.requests, timed.url, source)
    out = import_file(timed.cwd, source, "clf")
    assert "not marked: their starts are whole seconds" in out
    run = read_run(timed.cwd / "raw-data" / "clf.csv")
    assert run.metadata.extra["imported"]["format"] == "traefik"
    assert all(r.cgroup_throttled_ns is None for r in run.records)
    assert sorted(r.latency_ns // 1_000_000 for r in run.records) == sorted(
        (end - start) // 1_000_000 for start, end, _ in timed.requests)
    report = http_timing("report", str(timed.cwd / "raw-data" / "clf.csv"), cwd=timed.cwd)
    assert report.returncode == 0, report.stderr
