"""``http-timing import`` with the real tools: burn-service under a kernel quota, ``http-timing
record`` on its group, the tool's own sequential run, the import, and the marks checked
against the group's ``cpu.stat`` throttled time (tests/import_support.py). vegeta, hey, oha,
Locust and nginx run here (scripts/install-load-tools.sh, the ``test`` extra, Debian); k6
(AGPL, not installed), JMeter and Envoy (not runnable here) get files written exactly as their
documentation shows, from real requests to the same service timed by the test."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.import_support import (ITERATIONS, REQUESTS, check_marks, import_file,
                                  recorded_service, run_tool, timed_requests, tool,
                                  write_documented)
from tests.support import free_port, http_timing, require, stop_by_pid

pytestmark = pytest.mark.root


def test_vegeta_csv_and_json(tmp_path: Path) -> None:
    vegeta = tool("vegeta")
    with recorded_service(tmp_path) as rec:
        targets = tmp_path / "targets.txt"
        targets.write_text(f"GET {rec.url}\n")
        run_tool([vegeta, "attack", "-targets", str(targets), "-rate", "0", "-workers", "1",
                  "-max-workers", "1", "-duration", "3s"], tmp_path, tmp_path / "r.bin")
    for to in ("csv", "json"):
        with open(tmp_path / "r.bin", "rb") as results:
            encoded = subprocess.run([vegeta, "encode", "--to", to], stdin=results,
                                     capture_output=True, check=True).stdout
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


LOCUSTFILE = """
from locust import HttpUser, constant, events, task
from locust.contrib.csv_request_logger import CsvRequestLogger

logger = CsvRequestLogger("requests.csv")


@events.init.add_listener
def on_locust_init(environment, **kwargs):
    logger.register(environment)


class One(HttpUser):
    wait_time = constant(0)

    @task
    def burn(self):
        self.client.get("/cpuBurnFlow?iterations=%d")
"""


def test_locust_csv_request_logger(tmp_path: Path) -> None:
    locust = Path(sys.executable).parent / "locust"
    require(locust.exists(), "locust is not installed (pip install -e '.[test]')")
    (tmp_path / "locustfile.py").write_text(LOCUSTFILE % ITERATIONS)
    with recorded_service(tmp_path) as rec:
        run_tool([str(locust), "-f", "locustfile.py", "--headless", "-u", "1", "-r", "1",
                  "-t", "3s", "-H", rec.base_url, "--only-summary", "--loglevel", "WARNING"],
                 tmp_path)
    import_file(tmp_path, tmp_path / "requests.csv", "locust")
    check_marks(tmp_path, "locust", "locust-csv", requests=5)


NGINX_CONF = """
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    {log_format}
    access_log {dir}/access.log timing;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass {upstream}; }}
    }}
}}
"""


def test_nginx_access_log(tmp_path: Path) -> None:
    from client.data.imports.nginx import LOG_FORMAT

    nginx = "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else tool("nginx")
    port = free_port()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    with recorded_service(tmp_path) as rec:
        (prefix / "nginx.conf").write_text(NGINX_CONF.format(
            dir=prefix, log_format=LOG_FORMAT, port=port, upstream=rec.base_url))
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


@pytest.mark.parametrize("fmt", ["k6-json", "k6-csv", "jmeter-csv", "envoy", "envoy-json"])
def test_files_written_as_documented(fmt: str, tmp_path: Path) -> None:
    """k6 (AGPL: not installed), JMeter and Envoy (cannot run here): real requests to the
    quota'd service, timed by the test and written as each tool's documentation shows."""
    with recorded_service(tmp_path) as rec:
        requests = timed_requests(rec.url)
    source = tmp_path / f"results.{fmt}"
    write_documented(fmt, requests, rec.url, source)
    out = import_file(tmp_path, source, "imported")
    assert f"({fmt})" in out
    check_marks(tmp_path, "imported", fmt)
