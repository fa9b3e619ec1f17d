from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from client.data.record import RequestRecord
from client.data.summary import percentile, summarize


def _records(latencies_ms: list[float], statuses: list[int] | None = None) -> list[RequestRecord]:
    statuses = statuses or [200] * len(latencies_ms)
    out, t = [], 0
    for i, (ms, status) in enumerate(zip(latencies_ms, statuses)):
        ns = int(ms * 1e6)
        out.append(RequestRecord(i, t, ns, status, "" if status == 200 else "x"))
        t += ns
    return out


def test_summary_matches_numpy_default_percentiles_over_successes() -> None:
    lat = [5.0, 5.2, 5.1, 70.0, 5.3, 5.0, 75.0, 5.2, 5.1, 5.4]
    s = summarize(_records(lat + [1.0], [200] * 10 + [0]))
    assert s.count == 11 and s.errors == 1
    assert math.isclose(s.p50_ms, float(np.percentile(lat, 50)))
    assert math.isclose(s.p90_ms, float(np.percentile(lat, 90)))
    assert math.isclose(s.max_ms, 75.0)
    assert math.isclose(s.mean_ms, sum(lat) / 10)


def test_summary_of_no_success_is_nan_not_crash() -> None:
    s = summarize(_records([1.0, 2.0], [0, 503]))
    assert s.errors == 2 and math.isnan(s.p50_ms)
    assert s.to_dict()["p50_ms"] is None
    assert summarize([]).count == 0


@given(st.lists(st.floats(min_value=0.001, max_value=1e5), min_size=1, max_size=200))
def test_percentiles_are_ordered_and_bounded(values: list[float]) -> None:
    s = summarize(_records(values))
    lo, hi = min(int(v * 1e6) for v in values) / 1e6, max(int(v * 1e6) for v in values) / 1e6
    assert lo - 1e-9 <= s.p50_ms <= s.p90_ms + 1e-9 <= s.p99_ms + 2e-9 <= s.max_ms + 3e-9
    assert s.max_ms <= hi + 1e-9
    assert math.isnan(percentile([], 50))
