"""The quota model for an open loop (``--rate R``): requests arrive on a schedule, whatever the
answers, and queue at the server while it is throttled.

``client.analysis.model.predict`` simulates closed loops (each client sends its next request
when the last one is answered). An open loop sends request ``i`` at ``i / R`` seconds and
counts its latency from then (``scheduled_ns``), so a stall also delays the requests that
arrive during it. :func:`predict_open` simulates that with the same pieces: a
:class:`~client.analysis.model.Scenario` (CPU per request, the limit, ``overhead_ms`` of wall
time outside the quota, half before the work and half after, ``cores``), the same accounting
core (:class:`cpuquota.account.QuotaAccount`) on a simulated clock, and the same
:class:`~client.analysis.model.Prediction` out (``server_throttle_ns`` = the time a request
spent at the server while the group was throttled). ``workload.concurrency`` is not used.
Each request may take its own CPU time (``cpu_ms``, e.g. replayed from a measured run): near
full use of the quota, that spread is what makes a queue grow.

The server shares ``cores`` CPUs among the requests it holds (processor sharing, as
``predict``); the service has been idle before the run and the first request arrives at the
start of a period. Simplifications: the client is never short of connections (the real open
loop keeps ``client.run.plan.open_loop_workers(R)``; a backlog beyond that waits at the client
instead of the server, which costs the same time), and no request is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from client.analysis.model import MS, Prediction, Scenario
from client.data.record import RequestRecord
from cpuquota.account import QuotaAccount

__all__ = ["predict_open"]


def predict_open(workload: Scenario, rate_rps: float,
                 cpu_ms: Sequence[float] = ()) -> Prediction:
    """``workload.requests`` requests arriving at ``rate_rps`` per second (see the module).
    ``cpu_ms``: each request's CPU in ms, used in turn (e.g. a measured run's); empty: every
    request takes ``workload.service_ms``."""
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise ValueError(f"rate_rps must be a number > 0 (got {rate_rps})")
    if any(not (math.isfinite(c) and c > 0) for c in cpu_ms):
        raise ValueError("cpu_ms must hold numbers > 0")
    w, limit = workload, workload.limit
    account = QuotaAccount(limit.quota_ns, limit.period_ns, limit.burst_ns)
    account.charge(1, 0)  # idle before the run (a burst allowance is full), as predict's
    origin = 3 * limit.period_ns
    before = account.stats(origin)
    out_ns = round(w.overhead_ms * MS) // 2
    back_ns = round(w.overhead_ms * MS) - out_ns
    due = [round(i * 1e9 / rate_rps) for i in range(w.requests)]  # since origin
    each = [float(round(c * MS)) for c in cpu_ms] or [float(round(w.service_ms * MS))]
    left: dict[int, float] = {}      # seq -> CPU ns still to run, for requests at the server
    paused: dict[int, int] = {}
    done: list[RequestRecord] = []
    arrived, t = 0, origin + due[0] + out_ns

    def admit(now: int) -> int:
        count = arrived
        while count < len(due) and origin + due[count] + out_ns <= now:
            left[count], paused[count] = each[count % len(each)], 0
            count += 1
        return count

    while arrived < len(due) or left:
        arrived = admit(t)
        next_arrival = origin + due[arrived] + out_ns if arrived < len(due) else None
        if not left:
            t = next_arrival if next_arrival is not None else t
            continue
        resume = account.throttled_until(t)
        if resume > t:  # throttled: nothing at the server runs until the refill
            stop = resume if next_arrival is None else min(resume, next_arrival)
            for seq in left:
                paused[seq] += stop - t
            t = stop
            continue
        k = min(len(left), w.cores)
        steps = [math.ceil(account.remaining(t) / k),
                 math.ceil(min(left.values()) * len(left) / k),
                 account.next_boundary(t) - t]
        if next_arrival is not None:
            steps.append(next_arrival - t)
        dt = max(1, min(steps))
        for seq in left:
            left[seq] -= dt * k / len(left)
        t += dt
        account.charge(dt * k, t)
        for seq in [s for s, cpu in left.items() if cpu <= 0]:
            del left[seq]
            done.append(RequestRecord(
                seq=seq, start_ns=due[seq], scheduled_ns=due[seq],
                latency_ns=t - origin + back_ns - due[seq], status=200,
                server_cpu_ns=round(each[seq % len(each)]),
                server_throttle_ns=paused.pop(seq)))
    done.sort(key=lambda r: r.seq)
    return Prediction(w, tuple(done), account.stats(t) - before)
