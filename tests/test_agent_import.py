"""The node agent's timeline of a real burn-service under a kernel quota, fetched for a time
window over its HTTP endpoint, imported with ``http-timing import`` unchanged: the requests
are marked in agreement with the group's own cpu.stat (tests/import_support.check_marks, the
same check as for ``http-timing record``'s timelines)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.agent_support import running_agent
from tests.import_support import (CPUS, check_marks, import_file, timed_requests,
                                  write_documented)
from tests.support import require_kernel_quota, service_process

pytestmark = pytest.mark.root


@pytest.mark.parametrize(("interval", "idle"), [("10ms", False), ("50ms", False),
                                                ("100ms", False), ("10ms", True)])
def test_the_agents_timeline_marks_the_throttled_requests(tmp_path: Path, interval: str,
                                                          idle: bool) -> None:
    """At the default 10 ms, at 50 ms (half the kernel's period: five times cheaper) and at
    100 ms (one row a period: per-period resolution, the cheapest that still has it); and
    with the load starting while the group is read at the idle rate (1 s: the first second of
    throttling is seen as one interval, then the agent reads it every 10 ms)."""
    require_kernel_quota(1)
    adaptive = ["--idle-interval", "1s", "--hold", "1s"] if idle else []
    with service_process(["--cpus", CPUS]) as (base, _proc):
        group = Path(httpx.get(base + "/limits", timeout=5).json()["cgroup"]["path"])
        with running_agent(tmp_path, {"burn-service": group}, "--interval",
                           interval, *adaptive) as agent:
            time.sleep(3.0 if idle else 0.5)   # idle: past the new group's hold
            url = f"{base}/cpuBurnFlow?iterations=50000"
            start = time.time()
            requests = timed_requests(url)
            time.sleep(0.3)    # the last request's throttle ends at the next boundary
            end = time.time()
            time.sleep(0.7)    # rows reach the file every 0.5 s
            window = {"from": start - 0.2, "to": end}
            csv = agent.timeline("burn-service", "csv", **window)
            meta = agent.timeline("burn-service", "json", **window)
            assert csv.status_code == 200 and meta.status_code == 200, csv.text
            missing = agent.timeline("nobody", "csv")
            assert missing.status_code == 404 and "no timeline" in missing.text
    data = tmp_path / "raw-data"
    data.mkdir()
    (data / "t.cgroup.csv").write_text(csv.text)
    (data / "t.json").write_text(meta.text)
    doc = json.loads(meta.text)
    assert doc["cgroup"]["path"] == str(group) and doc["cgroup"]["quota_us"] == 10000
    assert doc["samples"] == len(csv.text.splitlines()) - 1
    write_documented("jmeter-csv", requests, url, tmp_path / "r.jtl")
    out = import_file(tmp_path, tmp_path / "r.jtl", "agent")
    assert "clock check" in out
    check_marks(tmp_path, "agent", "jmeter-csv")
    if idle:   # the load did start at the idle rate: rows 1 s apart before it, 10 ms after
        t = [int(line.split(",")[0]) for line in csv.text.splitlines()[1:]]
        gaps = [(b - a) / 1e9 for a, b in zip(t, t[1:])]
        assert max(gaps) >= 0.9 and sorted(gaps)[len(gaps) // 2] < 0.05, gaps
