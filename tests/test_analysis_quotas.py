"""client/analysis/quotas: the spans of one quota in force from each sample's quotas (the
tightest level's), a run cut at each change with each request under the quota it was sent
under (and its stretch of the timeline), and ``report``'s parts and text from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.analysis.quotas import QuotaSpan, in_force, quota_spans, split_by_quota
from client.analysis.report import build_report, quota_parts
from client.data.files import Run
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample
from client.render.text import format_report

MS = 1_000_000


def sample(t_ms: int, *quotas: tuple[int | None, int]) -> CgroupSample:
    return CgroupSample(t_ms * MS, t_ms * MS // 5, t_ms // 100, 0, 0, quotas=quotas)


def test_in_force_is_the_tightest_level() -> None:
    assert in_force(()) is None
    assert in_force(((50000, 100000), (20000, 100000))) == (1, (20000, 100000))
    assert in_force(((None, 100000), (None, 100000))) == (0, (None, 100000))
    assert in_force(((None, 100000), (30000, 50000))) == (1, (30000, 50000))


def test_spans_follow_each_change() -> None:
    timeline = [sample(t, (20000, 100000)) for t in range(0, 1000, 10)]
    timeline += [sample(t, (50000, 100000)) for t in range(1000, 2000, 10)]
    timeline += [sample(t, (None, 100000)) for t in range(2000, 2500, 10)]
    spans = quota_spans(timeline)
    assert [(s.start_ns // MS, s.end_ns // MS, s.quota_us, s.cpus) for s in spans] == [
        (0, 990, 20000, 0.2), (1000, 1990, 50000, 0.5), (2000, 2490, None, None)]
    assert spans[1].limit(30.0) is not None and spans[1].limit(30.0).burst_ms == 30.0
    assert spans[0].limit(30.0).burst_ms == 20.0   # at most the quota
    assert spans[2].limit() is None
    assert "0.2 CPU (20000 µs per 100000 µs) from 0.0 s to 1.0 s" == spans[0].describe()
    assert quota_spans([CgroupSample(0, 0, 0, 0, 0)]) == []   # an older timeline: no quotas


def records(starts_ms: list[int], latency_ms: int = 40) -> list[RequestRecord]:
    return [RequestRecord(i, s * MS, latency_ms * MS, 200, "") for i, s in enumerate(starts_ms)]


def test_split_by_the_quota_at_each_start() -> None:
    timeline = ([sample(t, (20000, 100000)) for t in range(0, 1000, 10)] +
                [sample(t, (50000, 100000)) for t in range(1000, 2000, 10)])
    run = Run(Path("r.csv"), records([100, 500, 980, 1200, 1500]), timeline=timeline)
    parts = split_by_quota(run)
    assert [(span.quota_us, [r.seq for r in part.records], straddle)
            for span, part, straddle in parts] == [(20000, [0, 1, 2], 1), (50000, [3, 4], 0)]
    first, second = parts[0][1].timeline, parts[1][1].timeline
    assert first is not None and second is not None
    assert first[0].t_ns == 0 and first[-1].t_ns == 1020 * MS   # the last request's end
    assert second[0].t_ns == 1000 * MS and second[-1].t_ns == 1990 * MS
    assert quota_parts(run) == parts
    one = Run(Path("r.csv"), records([100, 500]), timeline=timeline[:100])
    assert len(split_by_quota(one)) == 1 and quota_parts(one) == []   # never changed


def test_report_judges_each_part_by_its_quota() -> None:
    timeline = ([sample(t, (20000, 100000)) for t in range(0, 1000, 10)] +
                [sample(t, (50000, 100000)) for t in range(1000, 2000, 10)])
    run = Run(Path("r.csv"), records([100, 300, 500, 700, 1100, 1300, 1500, 1700]),
              timeline=timeline)
    report = build_report(run)
    assert [(p.span.quota_us, p.report.summary.count, p.report.limit.cpus)
            for p in report.by_quota] == [(20000, 4, 0.2), (50000, 4, 0.5)]
    data = report.to_dict()
    assert [(q["cpus"], q["requests"]) for q in data["quotas"]] == [(0.2, 4), (0.5, 4)]
    text = "\n".join(format_report(report, "r.csv"))
    assert "quota changed during the run (2 quotas in force" in text
    assert "0.5 CPU (50000 µs per 100000 µs) from 1.0 s to 2.0 s: 4 requests" in text


@pytest.mark.parametrize("quotas", [((30000, 100000),), ()])
def test_no_change_no_parts(quotas: tuple[tuple[int | None, int], ...]) -> None:
    timeline = [CgroupSample(t * MS, 0, 0, 0, 0, quotas=quotas) for t in range(0, 1000, 10)]
    report = build_report(Run(Path("r.csv"), records([100, 300]), timeline=timeline))
    assert report.by_quota == () and "quotas" not in report.to_dict()
    assert QuotaSpan(0, 1, 30000, 100000, 0).cpus == 0.3
