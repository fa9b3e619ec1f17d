"""client.analysis.explain: why a measured run differs from the model, on known captures."""

from __future__ import annotations

from pathlib import Path

from client.analysis.explain import explain
from client.analysis.model import Scenario, predict
from client.analysis.report import Report, build_report
from client.data.files import Run
from client.data.formats.legacy import parse_legacy_text
from client.data.record import RequestRecord
from cpuquota.limit import Limit
from tests.captures import ORIGINAL_0_3, capture


def report_of(records: list[RequestRecord]) -> Report:
    return build_report(Run(Path("capture.txt"), records))


def test_explain_the_0_1_cpu_gap() -> None:
    records, _ = capture(0.1, 4.5, gc_ms=10, gc_chance=0.5)
    report = report_of(records)
    d = report.detection
    assert d.service_ms is not None
    prediction = predict(Scenario(service_ms=d.service_ms, cpus=0.1))
    lines = explain(report, prediction, Limit(0.1))
    text = " ".join(lines)
    assert lines[0].startswith("The run did worse than the model")
    charged = 100 / (d.throughput_rps or 1)
    assert f"charged about {charged:.1f} ms of quota" in text
    assert 8 < charged < 12  # ~4.5 ms of work + ~5 ms of the runtime's CPU per request
    assert "no server-side CPU per request" in text


def test_explain_agreement_and_gaps() -> None:
    records, _ = capture(0.3, 4.3)
    prediction = predict(Scenario(service_ms=4.3, cpus=0.3, overhead_ms=0.8 + 0.175))
    assert explain(report_of(records), prediction, Limit(0.3))[0].startswith("The run agrees")
    excerpt = report_of(parse_legacy_text(ORIGINAL_0_3))
    lines = explain(excerpt, predict(Scenario(service_ms=5, cpus=0.3, requests=6)), Limit(0.3))
    assert any("not sent back to back" in line for line in lines)
    assert explain(report_of([]), prediction, Limit(0.3)) == [
        "not enough successful requests to compare with the model"]
