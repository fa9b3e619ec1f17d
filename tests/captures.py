"""Synthetic captures with known truth, for the analysis tests.

They come from the kernel accounting core (cpuquota.account) driven on a fake clock: requests of a
few ms CPU plus network time, sent back to back, optionally with the runtime's own CPU bursts (a
garbage collector) spending quota between requests, as in the original's 0.1 CPU run. The truth
is whether the core paused a request. The original's own lines (its README) are here as printed.
"""

from __future__ import annotations

import random

from client.data.record import RequestRecord
from cpuquota.account import QuotaAccount

__all__ = ["MS", "ORIGINAL_0_1", "ORIGINAL_0_3", "capture"]

MS = 1_000_000

# The original's lines (ace-container-cpu README), at 0.3 and 0.1 CPU.
ORIGINAL_0_3 = """26 Status code 200 time 5207306
31 Status code 200 time 5064695
36 Status code 200 time 4997000
41 Status code 200 time 4951787
154 Status code 200 time 69835568
257 Status code 200 time 69930524
""".splitlines()
ORIGINAL_0_1 = """0 Status code 200 time 5789193
5 Status code 200 time 5422345
2255 Status code 200 time 98318129
2353 Status code 200 time 196952396
2550 Status code 200 time 199268113
2749 Status code 200 time 99944350
2849 Status code 200 time 100614267
""".splitlines()


def capture(cpus: float, service_ms: float, *, n: int = 100, seed: int = 1,
            net_ms: float = 0.8, period_ms: float = 100, gc_ms: float = 0.0,
            gc_chance: float = 0.0, server_cpu: bool = False,
            legacy: bool = True) -> tuple[list[RequestRecord], list[bool]]:
    """A sequential run under a quota, and which requests the quota paused."""
    rng = random.Random(seed)
    period = round(period_ms * MS)
    account = QuotaAccount(round(cpus * period), period)
    t = 0
    records, truth = [], []
    for i in range(n):
        if gc_chance and rng.random() < gc_chance:  # the runtime's own CPU spends quota
            account.charge(round(gc_ms * MS * rng.uniform(0.5, 1.5)), t)
        cpu = round(service_ms * MS * rng.uniform(0.95, 1.08))
        r = account.run(cpu, t + round(net_ms / 2 * MS * rng.uniform(0.7, 1.3)))
        end = r.end_ns + round(net_ms / 2 * MS * rng.uniform(0.7, 1.3))
        start = t // MS * MS if legacy else t  # the original printed whole ms
        records.append(RequestRecord(i, start, end - t, 200,
                                     server_cpu_ns=cpu if server_cpu else None))
        truth.append(r.paused_ns > 0)
        t = end + rng.randint(50_000, 300_000)
    return records, truth
