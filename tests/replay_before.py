"""The replay as it was before :class:`client.analysis.replay.Replays` (every limit stepped
through the quota's account): what the old-against-new tests compare with."""

from __future__ import annotations

import math

from client.analysis.replay import Demand, Replayed
from cpuquota.account import CpuStat, QuotaAccount

__all__ = ["bunched_before", "replay_before"]


def replay_before(demand: Demand, cpus: float | None, burst_ns: int = 0,
           period_ns: int | None = None) -> Replayed:
    """The demand served under ``cpus`` (None: no limit) per ``period_ns`` (default: the
    record's), on the record's period grid."""
    window = (demand.start_ns, demand.end_ns)
    if cpus is None:
        return Replayed(None, (), CpuStat(), window)
    period = period_ns or demand.period_ns
    origin = demand.origin_ns if period == demand.period_ns else demand.start_ns
    account = QuotaAccount(max(1, round(cpus * period)), period, burst_ns, origin)
    before = account.stats(demand.start_ns)
    stretches: list[tuple[int, int]] = []
    backlog, held_until, cores = 0.0, demand.start_ns, demand.cores
    ends = (*demand.starts_ns[1:], demand.end_ns)
    for t0, t1, wanted in zip(demand.starts_ns, ends, demand.wanted_ns):
        if t1 <= t0:
            backlog += wanted
            continue
        arriving = wanted / (t1 - t0)
        t = t0
        while t < t1:
            if t < held_until:   # throttled: the demand queues
                step = min(held_until, t1)
                backlog += arriving * (step - t)
                t = step
                continue
            resume = account.throttled_until(t)
            if resume > t:
                stretches.append((t, resume))
                held_until = resume
                continue
            if backlog <= 0 and 0 < arriving <= cores:   # whole periods at once where none
                step = account.serve_steady(arriving, t, t1)   # can run out
                if step > t:
                    t = step
                    continue
            rate = float(cores) if backlog > 0 else min(arriving, float(cores))
            if rate <= 0:
                t = t1
                continue
            events = [t1, account.next_boundary(t),
                      t + math.ceil(max(1, account.remaining(t)) / rate)]
            if backlog > 0 and cores > arriving:
                events.append(t + math.ceil(backlog / (cores - arriving)))
            step = max(t + 1, min(events))
            used = rate * (step - t)
            backlog = max(0.0, backlog + arriving * (step - t) - used)
            account.charge(round(used), step)
            t = step
    after = account.stats(demand.end_ns)
    clipped = tuple((s, min(e, demand.end_ns)) for s, e in stretches if s < demand.end_ns)
    return Replayed(cpus, clipped, after - before, window)



def bunched_before(demand: Demand) -> Demand:
    """:func:`client.analysis.replay.bunched` a row at a time, as it was before its rows were
    worked out at once."""
    from dataclasses import replace

    starts: list[int] = []
    wanted: list[float] = []
    used: list[float] = []
    ends = (*demand.starts_ns[1:], demand.end_ns)
    for s, e, w, u in zip(demand.starts_ns, ends, demand.wanted_ns,
                          demand.used_ns or demand.wanted_ns):
        burst = math.ceil(max(w, u) / demand.cores)
        if 0 < burst < e - s:
            starts += [s, s + burst]
            wanted += [w, 0.0]
            used += [u, 0.0]
        else:
            starts.append(s)
            wanted.append(w)
            used.append(u)
    return replace(demand, starts_ns=tuple(starts), wanted_ns=tuple(wanted),
                   used_ns=tuple(used))
