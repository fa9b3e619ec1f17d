"""A run that spans a change of quota, on a real cgroup: burn-service in its group at 0.2 CPU,
``cpu.cfs_quota_us`` (v1; ``cpu.max`` on v2) raised to 0.5 CPU mid-run (what an in-place pod
resize does to the pod's and the container's groups), and ``http-timing --cgroup`` timing it.
The timeline holds both quotas, ``report`` names both with the requests sent under each,
``report --predict`` models each part under its own quota, the marks still add up to the
group's ``cpu.stat``, and ``watch`` shows the change live. On cgroup v1: the quota is read by
the same sampler on v2 (``cpu.max``, tests/test_commands_run_cgroup.py's v2 case in the guest),
and a quota written in place on v2 is ``sweep --cgroup``'s (tests/test_commands_advise_live.py)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from client.data.files import read_run
from client.data.timeline import read_timeline, timeline_path
from tests.support import (BIN, check_split_by_quota, http_timing, require_kernel_quota,
                           service_process)

pytestmark = pytest.mark.root

ITERATIONS = 50_000    # ~27 ms of CPU here: throttled at 0.2 CPU (20 ms a period), less at 0.5
PERIOD_US = 100_000


def _set_quota(group: Path, quota_us: int) -> None:
    (group / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")


def test_a_quota_raised_mid_run(tmp_path: Path) -> None:
    require_kernel_quota(1)
    requests = 60
    # burn-service starts in its group at 1 CPU, then the group gets 0.2
    with service_process(["--cpus", "1"], timeout=60) as (base, _proc):
        group = Path(httpx.get(base + "/limits", timeout=60).json()["cgroup"]["path"])
        _set_quota(group, 20_000)
        watch = subprocess.Popen([str(BIN / "http-timing"), "watch", str(group), "--json",
                                  "--interval", "0.5"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        csv_path = tmp_path / "raw-data" / "resize.csv"
        raised = threading.Event()
        ended = threading.Event()

        def raise_at_half() -> None:
            """The quota raised once half the requests are done (a row each)."""
            while not ended.is_set():
                done = (len(csv_path.read_text().splitlines()) - 1 if csv_path.exists() else 0)
                if done >= requests // 2:
                    _set_quota(group, 50_000)
                    raised.set()
                    return
                time.sleep(0.02)

        raiser = threading.Thread(target=raise_at_half, daemon=True)
        raiser.start()
        try:
            result = http_timing("--url", f"{base}/cpuBurnFlow", "--iterations", str(ITERATIONS),
                                 "--requests", str(requests), "--warmup", "0", "--cgroup",
                                 str(group), "--name", "resize", "--quiet", "--no-plot",
                                 cwd=tmp_path, timeout=600)
        finally:
            ended.set()
            raiser.join(timeout=10)
            watch.terminate()
            watched, _ = watch.communicate(timeout=20)
        assert result.returncode == 0, result.stderr
        assert raised.is_set(), "the run ended before half its requests were written"
    timeline = read_timeline(timeline_path(csv_path))
    quotas = [s.quotas[0] for s in timeline]
    assert quotas[0] == (20_000, PERIOD_US) and quotas[-1] == (50_000, PERIOD_US)
    changes = sum(1 for a, b in zip(quotas, quotas[1:]) if a != b)
    assert changes == 1, quotas

    recorded = read_run(csv_path)
    marks = sum(r.cgroup_throttled_ns or 0 for r in recorded.records)
    group_ns = timeline[-1].throttled_ns - timeline[0].throttled_ns
    assert group_ns > 100_000_000, (group_ns, timeline[-1].nr_throttled - timeline[0].nr_throttled,
                                    len(recorded.records))   # the quota bit
    assert marks == pytest.approx(group_ns, rel=0.2)   # one at a time: the marks add up

    data = json.loads(http_timing("report", str(csv_path), "--json", cwd=tmp_path).stdout)
    parts = data["quotas"]
    assert [(p["quota_us"], p["cpus"]) for p in parts] == [(20_000, 0.2), (50_000, 0.5)]
    assert sum(p["requests"] for p in parts) == data["count"] == requests
    assert all(p["requests"] >= requests // 3 for p in parts), parts
    check_split_by_quota(parts, 0.2, 0.5)
    text = http_timing("report", str(csv_path), cwd=tmp_path).stdout
    assert "quota changed during the run" in text
    assert "0.2 CPU (20000 µs per 100000 µs)" in text
    assert "0.5 CPU (50000 µs per 100000 µs)" in text

    predicted = http_timing("report", str(csv_path), "--predict", "--json", cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr
    by_quota = json.loads(predicted.stdout)["by_quota"]
    assert [p["span"]["cpus"] for p in by_quota] == [0.2, 0.5]
    assert ["0.2" in p["model_limit"] for p in by_quota] == [True, False]
    assert "0.5" in by_quota[1]["model_limit"]
    assert [p["count"] for p in by_quota] == [p["requests"] for p in parts]
    # each part's requests were sent while its quota was in force
    for part, (start_s, end_s) in zip(by_quota, [(p["from_s"], p["to_s"]) for p in parts]):
        assert part["span"]["from_s"] == start_s and part["span"]["to_s"] == end_s

    seen = [json.loads(line)["quota_cpus"] for line in watched.splitlines() if line.strip()]
    assert seen[0] == 0.2 and seen[-1] == 0.5 and set(seen) == {0.2, 0.5}, seen
