"""client.data.formats.legacy: the original http-timing.py's text lines, written and read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.data.formats.legacy import format_line, parse_legacy_text
from client.data.record import RawDataError, RequestRecord


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**12), st.integers(0, 999)),
                max_size=30))
def test_legacy_parser_round_trips_the_original_format(rows: list[tuple[int, int, int]]) -> None:
    lines = [f"{ms} Status code {status} time {ns}" for ms, ns, status in rows]
    if not rows:
        with pytest.raises(RawDataError):
            parse_legacy_text(lines)
        return
    records = parse_legacy_text(["garbage", *lines, "3 requests in 10ms avg 3ms"])
    assert [(r.start_ns // 1_000_000, r.latency_ns, r.status) for r in records] == \
        [(ms, ns, status) for ms, ns, status in rows]


def test_format_line_is_the_originals() -> None:
    assert format_line(RequestRecord(26, 26_400_000, 5_207_306, 200)) == \
        "26 Status code 200 time 5207306"
    assert parse_legacy_text([format_line(RequestRecord(0, 31_000_000, 7, 503))])[0].error == \
        "HTTP 503"
