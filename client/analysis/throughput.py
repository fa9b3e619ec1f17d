"""Throughput: one definition, and the scaling table of a load sweep (pure: records in).

**Throughput** is successful requests per second of run time: from the first send (the
intended send, in an open loop) to the end of the last answer, over all requests (as vegeta's
"throughput"; failed requests are counted in the error rate, not here). Reports, detection,
the model's predictions and the sweep tables all use :func:`throughput_rps`.

The seeds' throughput-scaling test (the CpuThrottler's ops/s at 1/2/4/8 %, the Yatagarasu
report's ``docker --cpus`` sweep) is one :class:`ThroughputRow` per limit: requests per second,
average, p95 and p99 latency, error rate and the throttled share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from client.data.record import RequestRecord
from client.data.summary import percentile, summarize

__all__ = ["ThroughputRow", "throughput_row", "throughput_rps"]


def throughput_rps(records: Sequence[RequestRecord]) -> float | None:
    """Successful requests per second of the run's span; None when the span is empty."""
    if not records:
        return None
    span_ns = max(r.end_ns for r in records) - min(r.origin_ns for r in records)
    if span_ns <= 0:
        return None
    return sum(1 for r in records if r.ok) / (span_ns / 1e9)


@dataclass(frozen=True)
class ThroughputRow:
    """One run of a load sweep; latencies over the successful requests."""

    requests: int
    errors: int
    duration_s: float
    rps: float
    mean_ms: float
    p95_ms: float
    p99_ms: float
    error_rate: float
    throttled_fraction: float | None  # the run's throttled share (client.analysis.detect)

    def to_dict(self) -> dict[str, float | int | None]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(self).items()}


def throughput_row(records: Sequence[RequestRecord],
                   throttled_fraction: float | None) -> ThroughputRow:
    summary = summarize(records)
    ok = [r.latency_ms for r in records if r.ok]
    nan = float("nan")
    rps = throughput_rps(records)
    return ThroughputRow(
        requests=len(records),
        errors=summary.errors,
        duration_s=summary.total_ms / 1e3,
        rps=nan if rps is None else rps,
        mean_ms=summary.mean_ms,
        p95_ms=percentile(ok, 95),
        p99_ms=percentile(ok, 99),
        error_rate=summary.errors / len(records) if records else nan,
        throttled_fraction=throttled_fraction,
    )
