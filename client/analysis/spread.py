"""N replicas of L CPU: the recorded load spread over N replicas as a Service spreads it, and
the least total CPU that meets the goal (pure: the replays are ``client.analysis.replay``'s,
the searches the caller's, ``client.advise.replicas``).

How a Service spreads the requests (:data:`SPREADS`):

- **random** (the default): each one goes to a replica picked at random, as kube-proxy's
  iptables mode picks an endpoint for each new connection (``--probability`` rules); the
  picks are a fixed seed's (:data:`SEED`), so the same record gives the same answer;
- **round-robin**: the first to replica 0, the next to replica 1..., as its IPVS mode's
  default ``rr`` scheduler does.

What goes to a replica is a connection, not a request: a closed loop's lane (a client that
sends its next request when its last one ended, on its one connection) goes to one replica
whole (:func:`spread_load`); an open loop's requests (an access log, a rate) each on their own.
Each replica runs the group's own work (its runtime, probes: the load's background) in full,
and its share of the requests; each is replayed at L alone, and the requests' predicted
latencies are pooled (:func:`pooled_rows`).

Without the requests there is nothing to place: the demand is split evenly, N ways
(:func:`split_demand`), the group's own work with it (so a replica's own work is
undercounted by ``1 - 1/N`` of it): what both spreads give on average.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from client.analysis.cluster import pooled_replays
from client.analysis.passive import PassiveAdvice
from client.analysis.replay import Demand, Job, LimitRow, Load

__all__ = ["RANDOM", "ROUND_ROBIN", "SEED", "SPREADS", "Sizing", "assign", "least",
           "pooled_rows", "split_demand", "spread_load", "spread_says"]

RANDOM, ROUND_ROBIN = "random", "round-robin"
SPREADS = (RANDOM, ROUND_ROBIN)
SEED = 1   # the random spread's picks, unless told


def assign(count: int, replicas: int, spread: str = RANDOM, seed: int = SEED) -> list[int]:
    """The replica (0 to ``replicas - 1``) each of ``count`` connections goes to, in order."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1 (got {replicas})")
    if spread == ROUND_ROBIN:
        return [i % replicas for i in range(count)]
    if spread != RANDOM:
        raise ValueError(f"spread must be one of {', '.join(SPREADS)} (got {spread!r})")
    picks = random.Random(seed)
    return [picks.randrange(replicas) for _ in range(count)]


def _lane_of(jobs: Sequence[Job]) -> list[int]:
    """Each job's lane: a job that follows another is in its lane; one that follows none
    starts a lane (numbered in the order they start)."""
    lanes: list[int] = []
    count = 0
    for job in jobs:
        if job.follows is None:
            lanes.append(count)
            count += 1
        else:
            lanes.append(lanes[job.follows])
    return lanes


def spread_load(load: Load, replicas: int, spread: str = RANDOM,
                seed: int = SEED) -> list[Load]:
    """``load`` spread over ``replicas`` (see the module docstring): each replica's jobs (a
    closed loop's lanes whole, an open loop's jobs one by one, in the order they start),
    each with the whole background."""
    jobs = load.jobs
    if load.closed:
        lane = _lane_of(jobs)
        where = assign(max(lane, default=-1) + 1, replicas, spread, seed)
        replica = [where[k] for k in lane]
    else:
        replica = assign(len(jobs), replicas, spread, seed)
    out = []
    for r in range(replicas):
        mine = [i for i, at in enumerate(replica) if at == r]
        index = {old: new for new, old in enumerate(mine)}
        part = tuple(replace(jobs[i], follows=_moved(jobs[i].follows, index)) for i in mine)
        lanes = sum(1 for j in part if j.follows is None) if load.closed else 0
        out.append(Load(part, lanes, load.background_ns))
    return out


def _moved(follows: int | None, index: dict[int, int]) -> int | None:
    return None if follows is None else index[follows]


def split_demand(demand: Demand, share: float) -> Demand:
    """``demand`` times ``share`` in every interval: one replica's part of a demand split
    evenly (``share`` 1/N), or of several pods' (M/N)."""
    return replace(demand, wanted_ns=tuple(w * share for w in demand.wanted_ns),
                   used_ns=tuple(u * share for u in demand.used_ns),
                   usage_ns=round(demand.usage_ns * share), hidden_ns=demand.hidden_ns * share)


def pooled_rows(rows: Sequence[LimitRow]) -> LimitRow:
    """The replicas' replays as one: their requests' latencies together (None: no requests),
    their counters summed, their stretches end to end (a random instant at a random
    replica), each one's send times moved with its stretches."""
    replayed = pooled_replays([row.replayed for row in rows])
    if any(row.latencies_ns is None for row in rows):
        return LimitRow(replayed, None)
    sent: list[int] = []
    offset = 0   # each replica's send times moved as pooled_replays moves its stretches
    for row in rows:
        lo, hi = row.replayed.window
        sent += [v - lo + offset for v in row.sent_ns or ()]
        offset += hi - lo
    return LimitRow(replayed, tuple(v for row in rows for v in row.latencies_ns or ()),
                    tuple(sent) if all(row.sent_ns is not None for row in rows) else None)


def spread_says(spread: str, seed: int, by_requests: bool, closed: bool | None) -> str:
    """How the load was spread, in one line."""
    if not by_requests:
        return ("split evenly: no requests were given, so each replica has 1/N of the "
                "recorded CPU in every interval, the group's own work included")
    unit = ("each client's connection (a closed loop's lane) to one replica" if closed else
            "each request on its own (an open loop)")
    how = (f"picked at random (seed {seed}), as kube-proxy's iptables mode picks an endpoint"
           if spread == RANDOM else "in turn, as kube-proxy's IPVS mode's rr scheduler does")
    return f"{unit}, {how}; each replica runs the group's own work in full"


@dataclass(frozen=True)
class Sizing:
    """N replicas: the smallest per-replica limit whose replay meets the goal (``advice``,
    its range included) and the load as each replica had it."""

    replicas: int
    advice: PassiveAdvice
    requests: tuple[int, ...] = ()   # the requests each replica served (none given: empty)

    @property
    def millicores(self) -> int | None:
        at = self.advice.at
        return None if at is None else at.millicores

    @property
    def met(self) -> bool:
        return self.millicores is not None

    @property
    def total(self) -> int | None:
        """N × L, millicores (None: no limit met)."""
        return None if self.millicores is None else self.replicas * self.millicores

    def to_dict(self, least: bool) -> dict[str, Any]:
        at, span = self.advice.at, self.advice.range
        row = None if at is None else at.row
        figures: dict[str, Any] = {}
        if row is not None and row.latencies_ns is not None:
            figures = {"p99_ms": row.latency_ms(99), "p90_ms": row.latency_ms(90)}
        elif row is not None:
            figures = {"added_delay_p99_ms": row.delay_ms(99),
                       "added_delay_p90_ms": row.delay_ms(90)}
        n = self.replicas
        return {
            "replicas": n, "met": self.met, "least": least,
            "cpus": None if self.millicores is None else self.millicores / 1000,
            "total_cpus": None if self.total is None else self.total / 1000,
            **figures,
            "periods_throttled": None if row is None else row.replayed.stats.nr_throttled,
            "periods": None if row is None else row.replayed.stats.nr_periods,
            "range": None if span is None else {
                "low_cpus": span.low / 1000,
                "high_cpus": None if span.high is None else span.high / 1000,
                "total_low_cpus": n * span.low / 1000,
                "total_high_cpus": None if span.high is None else n * span.high / 1000},
            "sure": None if span is None else span.sure,
            "range_says": None if span is None else span.words(),
            "requests_per_replica": list(self.requests) or None,
            "reason": self.advice.reason,
            "replays": [{k: v for k, v in judged.to_dict().items() if k != "throttled"}
                        for judged in self.advice.tried]}


def least(sizings: Sequence[Sizing]) -> Sizing | None:
    """The sizing of the least total CPU among those that met (the fewer replicas on a tie:
    fewer of them cost less beside the limit, each its runtime and memory); None: none met."""
    met = [s for s in sizings if s.total is not None]
    return min(met, key=lambda s: (s.total, s.replicas)) if met else None
