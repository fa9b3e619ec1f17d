"""client.data.formats: the registry picks a run file's reader by what the file holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.data import formats
from client.data.files import read_run
from client.data.formats import HEAD_BYTES, READERS, RUN, reader_for
from client.data.formats.http_timing_csv import HttpTimingCsvReader
from client.data.formats.legacy import LegacyReader
from client.data.record import RawDataError, RequestRecord

ROOT = Path(__file__).resolve().parent.parent
CSV = "seq,start_ns,latency_ns,status\n0,1000000,5000000,200\n1,7000000,6000000,503\n"
CAPTURE = ("$ http-timing.py --requests 2\n26 Status code 200 time 5207306\n"
           "31 Status code 200 time 5064695\n2 requests in 36ms avg 18ms\n")


def test_every_registered_reader_is_named_for_its_key() -> None:
    assert list(READERS) == ["http-timing-csv", "legacy"]
    assert all(reader.name == key and reader.expected for key, reader in READERS.items())


@pytest.mark.parametrize(("content", "reader"), [
    (CSV, HttpTimingCsvReader), ("\n\n" + CSV, HttpTimingCsvReader),
    ("latency_ns,seq,start_ns,status\n5,0,0,200\n", HttpTimingCsvReader),
    (CAPTURE, LegacyReader), ("26 Status code 200 time 5207306", LegacyReader),
])
def test_the_content_decides_not_the_name(tmp_path: Path, content: str, reader: type) -> None:
    assert isinstance(reader_for(tmp_path / "x", content.encode()), reader)
    for name in ("run.csv", "run.txt", "run"):   # any name: the same reader, the same records
        path = tmp_path / name
        path.write_text(content)
        assert isinstance(reader_for(path, path.read_bytes()), reader)
        assert read_run(path).records == reader().read(path)


def test_csv_and_capture_give_the_records(tmp_path: Path) -> None:
    (tmp_path / "a").write_text(CSV)
    (tmp_path / "b").write_text(CAPTURE)
    assert [(r.seq, r.start_ns, r.latency_ns, r.status, r.error) for r in
            HttpTimingCsvReader().read(tmp_path / "a")] == [(0, 1_000_000, 5_000_000, 200, ""),
                                                            (1, 7_000_000, 6_000_000, 503, "")]
    assert [(r.start_ns, r.latency_ns) for r in LegacyReader().read(tmp_path / "b")] == \
        [(26_000_000, 5_207_306), (31_000_000, 5_064_695)]


def test_a_csv_error_names_the_file_line(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("\n" + CSV + "2,x,5,200\n")
    with pytest.raises(RawDataError, match=r"r.csv: line 5: could not convert"):
        HttpTimingCsvReader().read(path)


def test_committed_runs_are_read_by_the_csv_reader() -> None:
    for path in sorted((ROOT / "raw-data").glob("*.csv")):
        if path.name.endswith(".cgroup.csv"):
            continue
        with path.open("rb") as file:
            assert isinstance(reader_for(path, file.read(HEAD_BYTES)), HttpTimingCsvReader), path


@pytest.mark.parametrize(("content", "what"), [
    (b"hello\nworld\n", "not a run file"), (b'{"name": "x"}\n', "not a run file"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not a text file"),
    ("é".encode() * (HEAD_BYTES // 2) + b"\xc3", "not a run file"),  # a character cut at the end
])
def test_a_file_no_reader_recognises_is_one_line_naming_it_and_every_format(
        tmp_path: Path, content: bytes, what: str) -> None:
    path = tmp_path / "mystery.csv"
    path.write_bytes(content)
    with pytest.raises(RawDataError) as info:
        reader_for(path, content[:HEAD_BYTES])
    message = str(info.value)
    assert message.startswith(f"{path}: {what} (expected ") and "\n" not in message
    assert all(reader.expected in message for reader in READERS.values())


class _Tabs:
    """A format of tab-separated ``start_ms latency_ms status`` lines, for the registry test."""

    name = "tabs"
    use = RUN
    expected = "tab-separated 'start_ms<TAB>latency_ms<TAB>status' lines"

    def recognises(self, head: bytes) -> bool:
        return head.startswith(b"#tabs\n")

    def read(self, path: Path) -> list[RequestRecord]:
        rows = [line.split("\t") for line in path.read_text().splitlines()[1:]]
        return [RequestRecord(i, int(s) * 1_000_000, int(ms) * 1_000_000, int(status))
                for i, (s, ms, status) in enumerate(rows)]


def test_a_new_format_is_one_reader_and_one_registry_line(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "other-tool.out"
    path.write_text("#tabs\n0\t5\t200\n9\t70\t200\n")
    with pytest.raises(RawDataError, match="not a run file"):
        read_run(path)
    monkeypatch.setitem(formats.FORMATS, "tabs", _Tabs())
    assert [r.latency_ns for r in read_run(path).records] == [5_000_000, 70_000_000]
    path.write_text("nothing\n")
    with pytest.raises(RawDataError, match="or tab-separated 'start_ms"):
        read_run(path)

