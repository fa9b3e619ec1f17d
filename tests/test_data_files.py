"""client.data.files: the CSV writer, the metadata file and reading runs back."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.data.files import RawDataError, RunWriter, read_run, write_metadata
from client.data.metadata import RunMetadata
from client.data.record import COLUMNS, RequestRecord

ORIGINAL = """\
26 Status code 200 time 5207306
31 Status code 200 time 5064695
154 Status code 200 time 69835568
257 Status code 500 time 69930524
100 requests in 1460ms avg 14ms
"""


def test_writer_round_trip_with_metadata(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    with RunWriter(path) as w:
        w.write(RequestRecord(0, 0, 5_000_000, 200, server_cpu_ns=4_900_000))
        w.write(RequestRecord(1, 5_000_000, 1_000, 0, error="ConnectError: refused\nline2"))
    write_metadata(path.with_suffix(".json"), RunMetadata(name="r", url="http://x"))
    run = read_run(path)
    assert run.name == "r" and run.metadata.url == "http://x"
    assert [r.status for r in run.records] == [200, 0]
    assert run.records[0].server_cpu_ns == 4_900_000 and run.records[0].kernel_nr_throttled is None
    assert run.records[1].error == "ConnectError: refused line2"
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
    assert read_run(path.with_suffix(".json")).records == run.records  # the JSON finds its CSV


def test_rows_are_on_disk_before_close(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    w = RunWriter(path)
    w.write(RequestRecord(0, 0, 5, 200))
    assert len(read_run(path).records) == 1  # flushed per request, not at the end
    w.close()


def test_reads_original_text_capture(tmp_path: Path) -> None:
    path = tmp_path / "capture.txt"
    path.write_text(ORIGINAL)
    records = read_run(path).records
    assert [r.start_ns for r in records] == [26_000_000, 31_000_000, 154_000_000, 257_000_000]
    assert records[2].latency_ns == 69_835_568
    assert records[3].error == "HTTP 500" and not records[3].ok


@pytest.mark.parametrize("content, message", [
    ("", "empty file"),
    ("hello\nworld\n", "not a run file (expected an http-timing CSV"),
    ("a,b,c\n1,2,3\n", "or the original http-timing.py's text lines like '26 Status code"),
    ("seq,start_ns,status\n0,1,200\n", "missing column(s) latency_ns"),
    ("seq,start_ns,latency_ns,status\n0,1,x,200\n", "line 2"),
    ("seq,start_ns,latency_ns,status\n0,1,,200\n", "line 2: empty latency_ns"),
])
def test_unreadable_files_raise_one_clear_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(RawDataError, match="bad.csv") as info:
        read_run(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_missing_binary_and_directory(tmp_path: Path) -> None:
    with pytest.raises(RawDataError, match="no such file"):
        read_run(tmp_path / "nope.csv")
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(RawDataError, match=r"b.csv: not a text file \(expected an http-timing CSV"):
        read_run(tmp_path / "b.csv")
    with pytest.raises(RawDataError, match="directory"):
        read_run(tmp_path)
