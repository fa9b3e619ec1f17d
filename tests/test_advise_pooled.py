"""A workload's recorded pods pooled for the HPA replay (``client.advise.pooled``): the CPU each
pod used, summed on a 1 s grid of the wall clock, each pod from its first row; a pod that
appears mid-window adds from there; a throttled pod adds the CPU it got, and its hidden part
(the single-pod rule, ``demand_of``) is said, not added. Synthetic windows of known rates."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.advise import AdviseError
from client.advise.hpa import HpaAsked, hpa_answer
from client.advise.pooled import pooled_load, summed_rates
from client.advise.replay import load_replay
from client.analysis.goal import LatencyGoal
from client.analysis.hpa import HpaRule
from client.data.timeline_meta import TimelineClock, TimelineMetadata, write_timeline_metadata
from tests.test_commands_import import GROUP, MS, ZERO

ROW_MS = 100


def window(folder: Path, pod: str, seconds: int, cpus: float, start_s: float = 0.0,
           throttled_ms: int = 0, limit: float = 1.0) -> Path:
    """A pod's window as fetched (``shop_POD.cgroup.csv``): ``cpus`` used steadily for
    ``seconds`` from the wall-clock ``start_s`` after ZERO, rows every 100 ms, periods of
    100 ms; ``throttled_ms`` of throttled time in every period (each period throttled)."""
    rows = ["t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns"]
    for k in range(seconds * 1000 // ROW_MS + 1):
        t = k * ROW_MS
        rows.append(f"{t * MS},{round(t * cpus * MS)},{k},{k if throttled_ms else 0},"
                    f"{k * throttled_ms * MS}")
    path = folder / f"shop_{pod}.cgroup.csv"
    path.write_text("\n".join(rows) + "\n")
    write_timeline_metadata(folder / f"shop_{pod}.json", TimelineMetadata(
        pod, TimelineClock(ZERO + round(start_s * 1e9), 100),
        cgroup={**GROUP, "quota_us": round(limit * 100000), "cpus": limit}, host="here"))
    return path


def test_three_pods_used_cpu_sums_each_from_its_first_row(tmp_path: Path) -> None:
    """a: 0.2 CPU over 0-120 s; b: 0.3 CPU from 40 s (it appeared then); c: at its limit,
    0.1 CPU, throttled 50 ms in every period. Pooled: 0.3 CPU a second before 40 s, 0.6 after;
    c's hidden demand is said (the single-pod rule's figure), not added."""
    a = window(tmp_path, "a", 120, 0.2)
    b = window(tmp_path, "b", 80, 0.3, start_s=40)
    c = window(tmp_path, "c", 120, 0.1, throttled_ms=50, limit=0.1)
    pooled = pooled_load([a, b, c])
    assert pooled.pods == ("a", "b", "c")
    assert pooled.start_epoch_s == ZERO / 1e9
    demand = pooled.replayed.demand
    assert len(demand.starts_ns) == 120 and demand.window_ns == 120 * 10**9
    rates = [w / 1e9 for w in demand.wanted_ns]
    assert [round(r, 3) for r in rates[:40]] == [0.3] * 40
    assert [round(r, 3) for r in rates[40:]] == [0.6] * 80
    assert demand.used_ns == demand.wanted_ns and demand.hidden_ns == 0
    single = load_replay(c, None, None).demand
    assert single.hidden_ns > 0
    assert pooled.hidden_ms == {"c": single.hidden_ns / MS}
    assert "pooled from 3 pods (a, b, c)" in pooled.says
    assert "the CPU it got plus its hidden part" in pooled.says
    # the same sum on the wall clock as the benchmark takes it, from 10 s in
    rows = summed_rates([a, b, c], ZERO / 1e9 + 10, ZERO / 1e9 + 60)
    assert [round(x, 3) for _s, _e, x in rows] == [0.3] * 30 + [0.6] * 20


def test_two_pods_pool_to_twice_one_and_the_hpa_scales_on_the_sum(tmp_path: Path) -> None:
    """Two pods of 0.3 CPU each at a 0.1 request: pooled, 0.6 CPU; the HPA at 60 % of the
    request, from one replica at a 0.2 limit, reads 200 % at 0 s (at most the limit):
    ceil(1 x 200 / 60) = 4; then 0.6 CPU on four ready replicas is 150 %, ceil(4 x 1.5 / 0.6)
    = 10, max 8. One pod's window alone stays at the 4."""
    (tmp_path / "one").mkdir()
    alone = window(tmp_path / "one", "a", 120, 0.3)
    pods = [window(tmp_path, "a", 120, 0.3), window(tmp_path, "b", 120, 0.3)]
    pooled = pooled_load(pods)
    asked = HpaAsked(HpaRule(60, 1, 8), 0.2, 0.1, 30.0)
    goal = LatencyGoal(30.0, None, None)
    both = hpa_answer(pooled.replayed, goal, asked, pooled=pooled).to_dict()
    one = hpa_answer(load_replay(alone, None, None), goal, asked).to_dict()
    assert [m["replicas"] for m in both["per_minute"]] == [8, 8]
    assert max(m["replicas"] for m in one["per_minute"]) < 8
    assert both["pooled"]["count"] == 2 and both["pooled"]["hidden_ms"] == {}
    assert both["timeline"].startswith("2 pods' windows pooled")


def test_nothing_to_pool_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(AdviseError, match="no recorded pod's window to pool"):
        pooled_load([])
