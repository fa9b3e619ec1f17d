"""For the import tests: burn-service under a kernel quota with ``http-timing record`` on its
group (a subprocess, ended by SIGTERM), a sequential client that notes each request's wall
clock (for the formats whose tools cannot run here), and the check of an imported run's marks
against the group's own ``cpu.stat`` counters."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from client.data.files import read_run
from cpuquota.account import CpuStat
from cpuquota.cgroupfs import locate_cpu_controller, read_cpu_stat
from tests.support import (BIN, favour_group, http_timing, one_cpu, require,
                           require_kernel_quota, service_process, stop_by_pid)

CPUS = "0.1"
ITERATIONS = 30_000     # ~30 ms of CPU (calibrated): each request spans three 10 ms quotas
REQUESTS = 10
TOOL_DIRS = (Path.home() / "go" / "bin", Path.home() / ".cargo" / "bin")


def tool(name: str) -> str:
    """The tool's path (PATH, ~/go/bin, ~/.cargo/bin); skip (fail under CI) when absent."""
    found = shutil.which(name) or next(
        (str(d / name) for d in TOOL_DIRS if (d / name).exists()), None)
    require(found is not None, f"{name} is not installed (scripts/install-load-tools.sh)")
    assert found is not None
    return found


@dataclass
class Recording:
    base_url: str
    group: Path
    data: Path          # where the timeline is (raw-data/t.cgroup.csv)

    @property
    def url(self) -> str:
        return f"{self.base_url}/cpuBurnFlow?iterations={ITERATIONS}"

    @property
    def timeline(self) -> Path:
        return self.data / "t.cgroup.csv"

    def counted(self) -> CpuStat:
        """The group's ``cpu.stat`` now, read by the test itself (the kernel's count)."""
        stat = read_cpu_stat(self.group, locate_cpu_controller().version)
        assert stat is not None, f"{self.group}: cpu.stat has no bandwidth counters"
        return stat


@contextmanager
def recorded_service(tmp_path: Path) -> Iterator[Recording]:
    """burn-service --cpus 0.1 (its group's weight raised: ``favour_group``; its threads on
    one CPU: ``one_cpu``), and
    ``http-timing record`` on its group from before the load until after it (SIGTERM); both
    stopped by pid."""
    require_kernel_quota()
    with service_process(["--cpus", CPUS]) as (base, _proc):
        group = Path(httpx.get(base + "/limits", timeout=5).json()["cgroup"]["path"])
        favour_group(group)   # a busy machine must not starve it below its quota
        one_cpu(group)        # its throttled time is then its wall time (summed over CPUs)
        proc = subprocess.Popen([str(BIN / "http-timing"), "record", str(group), "--name", "t"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        recording = Recording(base, group, tmp_path / "raw-data")
        try:
            deadline = time.monotonic() + 20
            while not (recording.timeline.exists() and
                       recording.timeline.read_text().count("\n") > 20):
                assert time.monotonic() < deadline and proc.poll() is None, "record did not start"
                time.sleep(0.05)
            yield recording
            time.sleep(0.3)   # the last request's throttle ends at the next boundary
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=20)
            finally:
                stop_by_pid(proc)
        assert proc.returncode == 0, proc.stderr


def load_until_throttled(rec: Recording, run_once: Callable[[int], None],
                         periods: int, rounds: int = 8) -> int:
    """Run ``run_once(round)`` until the kernel has throttled the group in at least ``periods``
    periods since the first round began (at most ``rounds``); how many rounds ran.

    For a tool that stops by time, not by count: a round on a machine busy enough that the
    service gets less CPU than its quota may end before the quota bites even once."""
    before = rec.counted()
    for done in range(1, rounds + 1):
        run_once(done)
        if (rec.counted() - before).nr_throttled >= periods:
            return done
    raise AssertionError(f"the kernel throttled {rec.group} in "
                         f"{(rec.counted() - before).nr_throttled} periods across {rounds} "
                         f"rounds of load (want {periods}): the quota never bit")


def timed_requests(url: str, count: int = REQUESTS) -> list[tuple[int, int, int]]:
    """``count`` real requests one after another: (start Unix ns, end Unix ns, status)."""
    out = []
    with httpx.Client(timeout=30) as client:
        for _ in range(count):
            start = time.time_ns()
            status = client.get(url).status_code
            out.append((start, time.time_ns(), status))
    return out


def run_tool(argv: list[str], cwd: Path, stdout: Path | None = None,
             timeout: float = 120) -> None:
    with open(stdout, "wb") if stdout else open(os.devnull, "wb") as out:
        result = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.PIPE,
                                timeout=timeout)
    assert result.returncode == 0, (argv, result.stderr[-2000:])


def import_file(tmp_path: Path, path: Path, name: str, *extra: str) -> str:
    result = http_timing("import", str(path), "--timeline", "raw-data/t.cgroup.csv",
                         "--name", name, *extra, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return result.stdout


def check_marks(tmp_path: Path, name: str, fmt: str, requests: int = REQUESTS) -> None:
    """The imported run: every request marked, the marks add up to the group's own throttled
    time across the load (sequential: within 30 %), the marked requests are the slow ones,
    and report/plot read it."""
    csv_path = tmp_path / "raw-data" / f"{name}.csv"
    run = read_run(csv_path)
    assert run.timeline is not None and run.metadata.limit is not None
    assert run.metadata.extra["imported"]["format"] == fmt
    records = run.records
    assert len(records) >= requests * 0.8, len(records)
    assert all(r.cgroup_throttled_ns is not None for r in records), "outside the timeline"
    first, last = min(r.start_ns for r in records), max(r.end_ns for r in records)
    before = max((s for s in run.timeline if s.t_ns <= first), key=lambda s: s.t_ns)
    after = min((s for s in run.timeline if s.t_ns >= last), key=lambda s: s.t_ns)
    group_ns = after.throttled_ns - before.throttled_ns
    # the quota bit (the kernel's counters across the requests, and what they were)
    assert group_ns > 100_000_000, (
        f"throttled {group_ns / 1e6:.1f} ms in {after.nr_throttled - before.nr_throttled} of "
        f"{after.nr_periods - before.nr_periods} periods, the group used "
        f"{(after.usage_ns - before.usage_ns) / 1e6:.1f} ms of CPU across {len(records)} "
        f"requests ({(last - first) / 1e9:.2f} s; statuses "
        f"{sorted({r.status for r in records})}, latency "
        f"{min(r.latency_ns for r in records) / 1e6:.1f}-"
        f"{max(r.latency_ns for r in records) / 1e6:.1f} ms); timeline "
        f"{len(run.timeline)} samples over "
        f"{(run.timeline[-1].t_ns - run.timeline[0].t_ns) / 1e9:.2f} s")
    marks = sum(r.cgroup_throttled_ns or 0 for r in records)
    assert marks == pytest.approx(group_ns, rel=0.3), (marks, group_ns)
    marked = [r.latency_ns for r in records if r.cgroup_nr_throttled]
    assert len(marked) >= len(records) // 2
    report = http_timing("report", str(csv_path), "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["count"] == len(records)


# ---- files written exactly as each tool's documentation shows, from timed requests --------

K6_CSV_HEADER = ("metric_name,timestamp,metric_value,check,error,error_code,expected_response,"
                 "group,method,name,proto,scenario,service,status,subproto,tls_version,url,"
                 "extra_tags,metadata")
JTL_HEADER = ("timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,"
              "failureMessage,bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect")


def rfc3339(epoch_ns: int, digits: int = 9, zone_minutes: int = 0) -> str:
    """``2017-05-09T14:34:45.239531499+02:00`` (``Z`` for UTC), ``digits`` of the second."""
    from datetime import datetime, timezone

    local = epoch_ns + zone_minutes * 60_000_000_000
    seconds, fraction = divmod(local, 1_000_000_000)
    main = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    hours, minutes = divmod(abs(zone_minutes), 60)
    zone = (f"{'+' if zone_minutes > 0 else '-'}{hours:02d}:{minutes:02d}" if zone_minutes
            else "Z")
    return f"{main}.{str(fraction).rjust(9, '0')[:digits]}{zone}"


def write_documented(fmt: str, requests: list[tuple[int, int, int]], url: str, path: Path) -> None:
    """Write ``requests`` (start ns, end ns, status) as ``fmt`` writes them (docs' examples)."""
    lines: list[str] = []
    target = url.split("://", 1)[1].split("/", 1)
    path_part = "/" + target[1]
    if fmt == "k6-json":   # time = the END, a local zone as in the docs' example
        lines.append('{"type":"Metric","data":{"type":"trend","contains":"time","tainted":null,'
                     '"thresholds":[],"submetrics":null},"metric":"http_req_duration"}')
        for start, end, status in requests:
            lines.append('{"type":"Point","data":{"time":"%s","value":%f,"tags":{"group":"",'
                         '"method":"GET","status":"%d","url":"%s"}},"metric":"http_req_duration"}'
                         % (rfc3339(end, 9, 120), (end - start) / 1e6, status, url))
            lines.append('{"type":"Point","data":{"time":"%s","value":1,"tags":{"group":"",'
                         '"method":"GET","status":"%d","url":"%s"}},"metric":"http_reqs"}'
                         % (rfc3339(end, 9, 120), status, url))
    elif fmt == "k6-csv":   # K6_CSV_TIME_FORMAT=unix_nano
        lines.append(K6_CSV_HEADER)
        for start, end, status in requests:
            lines.append(f"http_reqs,{end},1.000000,,,,true,,GET,{url},HTTP/1.1,default,,"
                         f"{status},,,{url},,")
            lines.append(f"http_req_duration,{end},{(end - start) / 1e6:f},,,,true,,GET,{url},"
                         f"HTTP/1.1,default,,{status},,,{url},,")
    elif fmt == "jmeter-csv":   # timeStamp = the start (shipped jmeter.properties)
        lines.append(JTL_HEADER)
        for start, end, status in requests:
            elapsed = (end - start) // 1_000_000
            lines.append(f"{start // 1_000_000},{elapsed},HTTP Request,{status},OK,"
                         f"Thread Group 1-1,text,true,,78,118,1,1,{url},{elapsed},0,0")
    elif fmt == "envoy":   # the default format, START_TIME in ms, UTC
        for start, end, status in requests:
            lines.append(f'[{rfc3339(start, 3)}] "GET {path_part} HTTP/1.1" {status} - 0 78 '
                         f'{(end - start) // 1_000_000} {(end - start) // 1_000_000} "-" '
                         f'"python-httpx" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "{target[0]}" '
                         f'"{target[0]}"')
    elif fmt == "envoy-json":   # json_format with %START_TIME(%s.%6f)%
        for start, end, status in requests:
            lines.append(json.dumps({"start_time": f"{start // 1000 / 1e6:.6f}", "method": "GET",
                                     "path": path_part, "protocol": "HTTP/1.1",
                                     "response_code": status,
                                     "duration": (end - start) // 1_000_000}))
    elif fmt in ("traefik", "traefik-json"):
        lines += traefik_lines(fmt, [(start, end, status, target[0]) for start, end, status
                                     in requests], path_part)
    else:
        raise ValueError(fmt)
    path.write_text("\n".join(lines) + "\n")


def traefik_lines(fmt: str, requests: list[tuple[int, int, int, str]], path_part: str
                  ) -> list[str]:
    """(start ns, end ns, status, upstream host:port) as Traefik v3 writes them
    (pkg/middlewares/accesslog): CLF (CommonLogFormatter: StartUTC truncated to the second,
    Duration truncated to ms) or JSON (logrus' JSONFormatter: keys sorted, StartUTC in
    RFC3339Nano, durations in ns, plus level/msg/time)."""
    from datetime import datetime, timezone

    lines = []
    for count, (start, end, status, upstream) in enumerate(requests, start=1):
        duration = end - start
        if fmt == "traefik":
            stamp = datetime.fromtimestamp(start // 10**9, timezone.utc).strftime(
                "%d/%b/%Y:%H:%M:%S +0000")
            lines.append(f'127.0.0.1 - - [{stamp}] "GET {path_part} HTTP/1.1" {status} 21 "-" '
                         f'"python-httpx/0.27.0" {count} "throttle-lab-limited@kubernetes" '
                         f'"http://{upstream}" {duration // 1_000_000}ms')
            continue
        nano = rfc3339(start).replace("Z", "")
        nano = (nano.rstrip("0").rstrip(".") if "." in nano else nano) + "Z"  # RFC3339Nano
        origin = duration   # the test's client times the service directly: no proxy between
        lines.append(json.dumps({
            "ClientAddr": "127.0.0.1:40312", "ClientHost": "127.0.0.1", "ClientPort": "40312",
            "ClientUsername": "-", "DownstreamContentSize": 21, "DownstreamStatus": status,
            "Duration": duration, "OriginContentSize": 21, "OriginDuration": origin,
            "OriginStatus": status, "Overhead": duration - origin, "RequestAddr": "limited",
            "RequestContentSize": 0, "RequestCount": count, "RequestHost": "limited",
            "RequestMethod": "GET", "RequestPath": path_part, "RequestPort": "-",
            "RequestProtocol": "HTTP/1.1", "RequestScheme": "http", "RetryAttempts": 0,
            "RouterName": "throttle-lab-limited@kubernetes", "ServiceAddr": upstream,
            "ServiceName": "throttle-lab-limited-7800@kubernetes",
            "ServiceURL": f"http://{upstream}", "StartLocal": nano, "StartUTC": nano,
            "entryPointName": "web", "level": "info", "msg": "",
            "time": rfc3339(end, 0).replace(".", "")}, sort_keys=True, separators=(",", ":")))
    return lines
