"""Latency statistics of a run: count, errors, mean and percentiles (numpy's default method).

The summary is part of a run's metadata (``summary`` in ``<name>.json``), so it lives with the
data; every table and report takes its percentiles from here."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from client.data.record import RequestRecord

__all__ = ["Summary", "error_kinds", "percentile", "summarize"]


def percentile(values_ms: Sequence[float], q: float) -> float:
    """The q-th percentile, linear interpolation as numpy.percentile's default; NaN if empty."""
    if len(values_ms) == 0:
        return float("nan")
    return float(np.percentile(np.asarray(values_ms, dtype=float), q))


@dataclass(frozen=True)
class Summary:
    """Latency statistics over the successful requests (as the run's status rule judged them:
    ``client.data.status``); ``errors`` counts the rest."""

    count: int
    errors: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    total_ms: float  # from the first send to the end of the last response

    def to_dict(self) -> dict[str, float | int | None]:
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Summary | None:
        """The summary saved in metadata (None for null); None when it is not one."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = raw.get(f.name)
            if value is None and f.name not in ("count", "errors"):
                value = math.nan
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None
            values[f.name] = value
        return cls(**values)


def summarize(records: Sequence[RequestRecord]) -> Summary:
    ok = np.asarray([r.latency_ns for r in records if r.ok], dtype=float) / 1e6
    errors = sum(1 for r in records if not r.ok)
    if records:
        # open-loop latency runs from the intended send time (scheduled_ns), not start_ns
        first = min(r.origin_ns for r in records)
        last = max(r.origin_ns + r.latency_ns for r in records)
        total_ms = (last - first) / 1e6
    else:
        total_ms = 0.0
    if ok.size == 0:
        nan = float("nan")
        return Summary(len(records), errors, nan, nan, nan, nan, nan, total_ms)
    p50, p90, p99 = np.percentile(ok, [50, 90, 99])
    return Summary(len(records), errors, float(ok.mean()), float(p50), float(p90), float(p99),
                   float(ok.max()), total_ms)


_ERRNO = re.compile(r"\[Errno -?\d+\] ")


def _error_kind(record: RequestRecord) -> str:
    """``answered 404`` (an answer the run's status rule counts as an error) or ``failed:
    ConnectError: Connection refused`` (no answer: what the transport said, no errno)."""
    if record.status > 0:
        return f"answered {record.status}"
    return "failed: " + (_ERRNO.sub("", record.error).strip() or "no answer")


def error_kinds(records: Sequence[RequestRecord]) -> list[tuple[str, int]]:
    """What the failed requests met, counted, the most frequent first (ties by the words)."""
    counts = Counter(_error_kind(r) for r in records if not r.ok)
    return sorted(counts.items(), key=lambda kind: (-kind[1], kind[0]))
