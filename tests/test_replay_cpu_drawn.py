"""A request's CPU under throttling keeps its distribution (``client.analysis.replay``'s
``CpuDrawn``): where a throttled record hid the CPU of requests that shared their rows, and
they carry no Server-Timing, each is given a CPU drawn from the requests the record showed
unthrottled, rank for rank, so the heavy stay heavy and the tail is not the mean's."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from client.analysis.replay import (BY_WALL, MEAN, MIN_DONORS, ROWS, Request, demand_of,
                                    draw_cpu, load_of, placed_shift, replay_load)
from client.data.attribution import held
from client.data.summary import percentile
from client.data.timeline import CgroupSample

MS = 1_000_000
PERIOD = 100 * MS
ROW = 10 * MS


def heavy(i: int) -> bool:
    return i % 5 == 4   # one in five


def record() -> tuple[list[CgroupSample], list[Request], list[int]]:
    """3 s at 0.3 CPU, rows every 10 ms. For 1.5 s, one request every 50 ms, alone, never
    throttled: four of 2 ms of CPU, then one of 20 ms (bimodal). Then, each period, two
    requests sent together share the CPU, 30 ms of it, and sit throttled for the rest of
    the period: one answered after 40 ms, the other after 90 ms. And which requests those
    are (their indices, by start)."""
    spans = [(i * 50 * MS, i * 50 * MS + (20 if heavy(i) else 2) * MS) for i in range(30)]
    busy = list(spans)
    throttled = []
    for p in range(15, 30):
        start = p * PERIOD
        busy.append((start, start + 30 * MS))
        throttled += [len(spans), len(spans) + 1]
        spans += [(start, start + 40 * MS), (start, start + 90 * MS)]
    samples = []
    for t in range(0, 3 * 1000 * MS + 1, ROW):
        usage = sum(max(0, min(t, e) - s) for s, e in busy)
        periods = t // PERIOD
        nr = max(0, min(periods, 30) - 15)
        samples.append(CgroupSample(t, usage, periods, nr, nr * 70 * MS))
    holds = held(spans, [samples], [PERIOD])
    return samples, [Request(s, e - s, h) for (s, e), h in zip(spans, holds)], throttled


def write_record(directory: Path, first: int = 0) -> None:
    """:func:`record` as files: the group's timeline at 0.3 CPU (t.cgroup.csv, t.json) and
    its requests from the ``first``-th on in the run format (r.csv), on the clock of
    tests.test_commands_import."""
    from client.data.timeline_meta import (TimelineClock, TimelineMetadata,
                                           write_timeline_metadata)
    from tests.test_commands_import import GROUP, ZERO

    samples, requests, _throttled = record()
    (directory / "t.cgroup.csv").write_text(
        "t_ns,usage_ns,nr_periods,nr_throttled,throttled_ns\n" + "".join(
            f"{s.t_ns},{s.usage_ns},{s.nr_periods},{s.nr_throttled},{s.throttled_ns}\n"
            for s in samples))
    write_timeline_metadata(directory / "t.json", TimelineMetadata(
        "t", TimelineClock(ZERO, 100), cgroup={**GROUP, "quota_us": 30000, "cpus": 0.3},
        host="here"))
    (directory / "r.csv").write_text("".join(
        f"{ZERO + r.start_ns},200,{r.latency_ns},0,78,,,,{i},GET,http://x/y,\n"
        for i, r in enumerate(requests) if i >= first))



def test_drawing_keeps_the_donors_distribution_and_the_keys_order() -> None:
    donors = [2.0] * 8 + [20.0] * 2
    drawn = draw_cpu([5, 1, 9, 3, 7, 2, 8, 4, 6, 10], donors)
    assert sorted(drawn) == sorted(donors)          # the distribution, not its mean
    assert drawn[9] == drawn[2] == 20.0             # the two largest keys are the heavy ones
    assert draw_cpu([1, 2], donors, shift=1.0) == [20.0, 20.0]   # ranks moved to the top


def test_a_throttled_records_hidden_cpu_is_drawn_so_heavy_requests_stay_heavy() -> None:
    samples, requests, throttled = record()
    demand = demand_of(samples, PERIOD)
    assert demand.throttled_wall_ns > 0 and demand.cores == 1
    load = load_of(demand, requests, closed=False)
    drawn = load.drawn
    assert drawn is not None and drawn.donors == 30 >= MIN_DONORS
    assert drawn.unknown == drawn.drawn == len(throttled) == 30
    assert "rank for rank" in drawn.says() and "heavy ones stay heavy" in drawn.says()
    cpu = {i: load.jobs[i].cpu_ns for i in throttled}
    # the unthrottled requests' values (a fifth of 20 ms, the rest 2 ms), as far up their
    # distribution as the 30 ms each period's rows show for its two puts them (15 ms each on
    # average: the held were mostly heavy ones), not every value scaled up to that total
    values = sorted(cpu.values())
    assert sum(values) == pytest.approx(15 * 30 * MS)
    heavier = [v for v in values if v > 10 * MS]
    assert len(heavier) in (21, 22)   # 20 k + 2 (30 - k) = 450 ms: k = 21.7
    assert heavier == pytest.approx([20.0 * MS] * len(heavier), rel=0.05)
    assert values[:30 - len(heavier)] == pytest.approx([2.0 * MS] * (30 - len(heavier)),
                                                       rel=0.05)
    assert sum(j.cpu_ns for j in load.jobs) + sum(load.background_ns) == pytest.approx(
        demand.usage_ns)   # every ns of the rows' CPU is a request's or the background's
    slow = [i for i in throttled if requests[i].latency_ns == 90 * MS]
    fast = [i for i in throttled if requests[i].latency_ns == 40 * MS]
    assert min(cpu[i] for i in slow) >= max(cpu[i] for i in fast)   # heavy stay heavy
    assert all(load.jobs[i].wall_ns >= cpu[i] for i in throttled)

    # the same requests each at their mean CPU: the tail the mean predicts is lower
    mean = sum(cpu.values()) / len(cpu)
    assert math.isclose(mean, 15 * MS)
    flat = replace(load, jobs=tuple(
        replace(j, cpu_ns=mean, wall_ns=max(j.wall_ns, math.ceil(mean))) if i in cpu else j
        for i, j in enumerate(load.jobs)))
    _r, kept, _s = replay_load(demand, load, 0.35)
    _r, meaned, _s = replay_load(demand, flat, 0.35)

    def p99(latencies: tuple[int, ...]) -> float:
        return percentile([latencies[i] / MS for i in throttled], 99)

    assert p99(kept) > p99(meaned) + 50   # 0.35 CPU runs the mean pair in a period, not a heavy one
    assert percentile([v / MS for v in kept], 99) >= percentile([v / MS for v in meaned], 99)


def test_the_draw_is_placed_where_the_rows_total_puts_it_in_the_distribution() -> None:
    # donors: 8 of 2 ms, 2 of 20 ms (mean 5.6); four requests drawn for whose rows show 80
    # ms: at the donors' own ranks they would get 2, 2, 2, 20 ms, scaled x2.8 to 80 ms (one
    # of 57 ms, where no request used more than 20); placed, they are the heavy ones
    donors = [2.0] * 8 + [20.0] * 2
    keys = [1.0, 2.0, 3.0, 4.0]
    assert sum(draw_cpu(keys, donors)) == 26.0
    shift = placed_shift(keys, donors, 80.0)
    assert draw_cpu(keys, donors, shift) == [20.0] * 4
    assert placed_shift(keys, donors, 26.0) == pytest.approx(0.0, abs=0.1)   # a fair sample
    lighter = draw_cpu(keys, donors, placed_shift(keys, donors, 8.0))
    assert lighter == [2.0] * 4


def test_requests_with_their_own_cpu_or_too_few_donors_are_not_drawn() -> None:
    samples, requests, throttled = record()
    demand = demand_of(samples, PERIOD)
    timed = [replace(r, cpu_ns=5 * MS) for r in requests]
    assert load_of(demand, timed, closed=False).drawn is None   # Server-Timing says
    few = [r for i, r in enumerate(requests) if i >= 30 - (MIN_DONORS - 1)]
    drawn = load_of(demand, few, closed=False).drawn
    assert drawn is not None and drawn.drawn == 0 and drawn.unknown == len(throttled)
    assert f"fewer than {MIN_DONORS} requests ran unthrottled" in drawn.says()


def test_advise_passive_says_what_it_assumed_of_the_cpu_the_record_hid(tmp_path: Path) -> None:
    from tests.support import http_timing

    write_record(tmp_path)
    args = ("advise", "--passive", "--timeline", "t.cgroup.csv", "--requests-from", "r.csv",
            "--p99", "200")
    result = http_timing(*args, "--json", cwd=tmp_path)
    assert result.returncode in (0, 3), result.stderr
    cpu = json.loads(result.stdout)["requests"]["cpu"]
    assert (cpu["not_known"], cpu["drawn"], cpu["from_unthrottled"]) == (30, 30, 30)
    text = http_timing(*args, cwd=tmp_path)
    assert [line for line in text.stdout.splitlines() if line.startswith("requests' CPU: ")
            ] == [f"requests' CPU: {cpu['says']}"]


def test_too_few_donors_give_each_hidden_request_the_cpu_per_request_the_kernel_counted(
        ) -> None:
    samples, requests, throttled = record()
    demand = demand_of(samples, PERIOD)
    cut = 30 - (MIN_DONORS - 1)    # too few of the unthrottled requests left to draw from
    few = requests[cut:]
    hidden = [i - cut for i in throttled]
    loads = {unseen: load_of(demand, few, closed=False, unseen=unseen)
             for unseen in (MEAN, ROWS, BY_WALL)}
    load = load_of(demand, few, closed=False)   # the answer's: the mean
    drawn = load.drawn
    assert drawn is not None and drawn.unseen == MEAN and not drawn.shape_seen
    assert drawn.to_dict()["shape_seen"] is False
    assert "CPU per request the kernel counted" in drawn.says()
    assert "shape of its distribution was not seen" in drawn.says()
    # each period's rows show 30 ms for its two requests: 15 ms each, whatever their latency
    assert [load.jobs[i].cpu_ns for i in hidden] == pytest.approx([15.0 * MS] * len(hidden))
    for unseen, each in loads.items():   # every way gives out the same CPU the rows show
        assert sum(each.jobs[i].cpu_ns for i in hidden) == pytest.approx(15 * 30 * MS), unseen
        assert sum(j.cpu_ns for j in each.jobs) + sum(each.background_ns) == pytest.approx(
            demand.usage_ns)
        assert all(each.jobs[i].wall_ns >= each.jobs[i].cpu_ns for i in hidden)
    # by latency less hold: in proportion to it, the slowest the heaviest (the slow one of
    # each pair taken as held 10 ms less: it ran 10 ms longer than its partner)
    longer = [replace(r, held_ns=r.held_ns - 10 * MS) if i in hidden and r.latency_ns == 90 * MS
              else r for i, r in enumerate(few)]
    by_wall = load_of(demand, longer, closed=False, unseen=BY_WALL).jobs
    per_ns = [by_wall[i].cpu_ns / (longer[i].latency_ns - longer[i].held_ns) for i in hidden]
    assert per_ns == pytest.approx([per_ns[0]] * len(hidden))
    slow = [i for i in hidden if few[i].latency_ns == 90 * MS]
    fast = [i for i in hidden if few[i].latency_ns == 40 * MS]
    assert min(by_wall[i].cpu_ns for i in slow) > max(by_wall[i].cpu_ns for i in fast)
    assert sum(by_wall[i].cpu_ns for i in hidden) == pytest.approx(15 * 30 * MS)


def test_advise_passive_widens_the_range_where_the_shape_of_the_cpu_was_not_seen(
        tmp_path: Path) -> None:
    from tests.support import http_timing

    write_record(tmp_path, first=30 - (MIN_DONORS - 1))
    result = http_timing("advise", "--passive", "--timeline", "t.cgroup.csv",
                         "--requests-from", "r.csv", "--p99", "200", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["requests"]["cpu"]["shape_seen"] is False
    widened = " ".join(data["recommended"]["widened_by"])
    assert "the shape of its distribution was not seen" in widened
