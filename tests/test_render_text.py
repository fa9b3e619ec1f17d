"""client.render.text: the lines http-timing prints (whole reports are pinned in
tests/test_outputs_pinned.py)."""

from __future__ import annotations


from client.analysis.detect import detect
from client.analysis.throughput import throughput_row
from client.data.record import RequestRecord
from client.data.summary import summarize
from client.render.text import (
    format_detection,
    format_summary,
    format_throughput,
)

MS = 1_000_000


def test_summary_and_throughput_lines() -> None:
    records = [RequestRecord(i, i * 10 * MS, 5 * MS, 200) for i in range(10)]
    assert format_summary(summarize(records)) == (
        "latency ms: p50 5.00  p90 5.00  p99 5.00  max 5.00  mean 5.00  errors 0 of 10")
    assert format_summary(summarize([])) == (
        "latency ms: p50 n/a  p90 n/a  p99 n/a  max n/a  mean n/a  errors 0 of 0")
    row = throughput_row(records, None)
    assert format_throughput(row, 100) == "throughput 105.3 requests/s (intended 100/s), 0.0 % errors"
    assert format_throughput(row, None) == "throughput 105.3 requests/s, 0.0 % errors"


def test_detection_lines() -> None:
    assert format_detection(detect([])) == ["throttled: n/a (no successful request)"]
    records = [RequestRecord(i, i * 10 * MS, (75 if i % 5 == 4 else 5) * MS, 200)
               for i in range(40)]
    lines = format_detection(detect(records))
    assert lines[0] == ("throttled: 8 of 40 requests (20.0 %), from the latency distribution; "
                        "slower than 75.0 ms counts")
    assert lines[1] == "stall: 70.0 ms typical extra delay of a throttled request (unthrottled 5.00 ms)"
