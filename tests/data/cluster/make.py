"""Writes the timelines beside it, in the node agent's format (agent/internal/timeline:
``<ns>_<pod>.cgroup.csv``, rows every 10 ms, and the ``.json`` with the clock and the
cgroup's quota): a group that wants CPU in bursts, run through a 1 ms simulation of the CFS
quota (a period's quota spent: nothing runs until the next period; the throttled time and
period are counted at the refill). Run: python tests/data/cluster/make.py"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
MS = 1_000_000
ZERO = 1_790_000_000_000_000_000   # the first timeline's zero on the wall clock (Unix ns)


def write(name: str, seconds: int, burst_ms: int, every_ms: int, cpus: float | None,
          start_s: float = 0.0) -> None:
    """``burst_ms`` of CPU wanted every ``every_ms``, under ``cpus`` (None: no quota)."""
    quota = None if cpus is None else round(cpus * 100)   # ms per 100 ms period
    usage = periods = throttled = throttled_ns = 0
    backlog, used, held = 0, 0, 0
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns"]
    for t in range(seconds * 1000 + 1):
        if t % 10 == 0:
            rows.append(f"{t * MS},{usage * MS},{periods},{throttled},{throttled_ns}")
        if t % 100 == 0 and t:
            periods += 1 if quota is not None else 0
            if held:
                throttled, throttled_ns = throttled + 1, throttled_ns + held * MS
            used, held = 0, 0
        if t % every_ms == 0:
            backlog += burst_ms
        if backlog and (quota is None or used < quota):
            backlog, used, usage = backlog - 1, used + 1, usage + 1
        elif backlog:
            held += 1
    (HERE / f"{name}.cgroup.csv").write_text("\n".join(rows) + "\n")
    cgroup = {"path": f"/kubepods/{name}", "quota_us": None if quota is None else quota * 1000,
              "period_us": 100000, "cpus": cpus, "levels": []}
    meta = {"name": name, "clock": {"zero_epoch_ns": ZERO + round(start_s * 1e9),
                                    "zero_uncertainty_ns": 1000, "timeline": "CLOCK_MONOTONIC",
                                    "unit": "ns since zero"},
            "cgroup": cgroup, "tool": "throttle-lab-agent", "version": "", "interval_s": 0.01}
    (HERE / f"{name}.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    write("shop_web-a", 10, 70, 100, 0.5)            # 70 ms per 100 ms at 0.5 CPU: throttled
    write("shop_web-b", 10, 60, 100, 0.5)
    write("shop_web-c", 10, 120, 300, 0.5)           # bursts: throttled 2 periods in 3
    write("shop_worker-a", 10, 20, 100, 1.0)         # well under its limit: never throttled
    write("shop_cache-0", 10, 30, 100, None)         # no limit
    write("shop_api-a", 10, 40, 100, 0.3)            # one replica all along...
    write("shop_api-b", 5, 40, 100, 0.3, start_s=5)  # ... a second from 5 s (an HPA)
