"""client.data.formats: one table of formats, each saying what it is for; one way to
recognise a file by its content, for report (a run file) and for import (results)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from client.data.formats import (FORMATS, HEAD_BYTES, IMPORTERS, READERS, RESULTS, RUN,
                                 read_results, read_run, recognise)
from client.data.record import RawDataError

CSV = "seq,start_ns,latency_ns,status\n0,1000000,5000000,200\n"
VEGETA = "1732420000123456789,200,5000000,0,78,,Ym9keQ==,,0,GET,http://127.0.0.1:7800/x,\n"


def test_each_format_says_what_it_is_for_and_the_views_split_the_table() -> None:
    assert all(f.name == key and f.use in (RUN, RESULTS) for key, f in FORMATS.items())
    assert list(READERS) == [k for k, f in FORMATS.items() if f.use == RUN]
    assert list(IMPORTERS) == [k for k, f in FORMATS.items() if f.use == RESULTS]
    assert len(READERS) + len(IMPORTERS) == len(FORMATS)
    assert list(IMPORTERS)[-1] == "http-timing"   # a run, imported: after every other tool's


def test_the_views_are_the_tables_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A format added to the table is in its use's view at once (the views copy nothing)."""
    vegeta = FORMATS["vegeta-csv"]
    monkeypatch.setitem(FORMATS, "vegeta-again", vegeta)
    assert "vegeta-again" in IMPORTERS and "vegeta-again" not in READERS
    assert IMPORTERS["vegeta-again"] is vegeta


def test_recognise_answers_for_one_use() -> None:
    run = recognise(CSV.encode(), RUN)
    assert run is not None and run.name == "http-timing-csv"
    imported = recognise(CSV.encode(), RESULTS)   # import reads a run too, whole
    assert imported is not None and imported.name == "http-timing"
    assert recognise(VEGETA.encode(), RUN) is None
    vegeta = recognise(VEGETA.encode(), RESULTS)
    assert vegeta is not None and vegeta.name == "vegeta-csv"
    assert recognise(b"hello\n", RUN) is None and recognise(b"hello\n", RESULTS) is None


@pytest.mark.parametrize("gzipped", [False, True])
def test_report_sends_another_tools_results_to_import(tmp_path: Path, gzipped: bool) -> None:
    path = tmp_path / ("r.csv.gz" if gzipped else "r.csv")
    path.write_bytes(gzip.compress(VEGETA.encode()) if gzipped else VEGETA.encode())
    with pytest.raises(RawDataError) as info:
        read_run(path)
    assert str(info.value) == (f"{path}: vegeta-csv results, not a run file: make it one with "
                               f"http-timing import {path} --timeline NAME.cgroup.csv (the "
                               "service's timeline, from http-timing record)")
    assert read_results(path).format == "vegeta-csv"


def test_import_sees_as_much_of_a_file_as_report(tmp_path: Path) -> None:
    """One HEAD_BYTES: a results file whose first line is longer than 4 KiB (a Traefik line
    with long headers) is recognised, as a run file's 64 KiB header would be."""
    headers = "x" * 10_000
    line = ('{"ClientHost":"10.42.0.1","DownstreamStatus":200,"request_User-Agent":"'
            + headers + '","Duration":27912345,"ServiceAddr":"10.42.0.7:7800",'
            '"StartUTC":"2024-11-24T03:46:40.123456789Z"}\n')
    assert 4096 < len(line) < HEAD_BYTES
    path = tmp_path / "traefik.json"
    path.write_text(line)
    imported = read_results(path)
    assert imported.format == "traefik-json"
    assert [(r.start_ns, r.latency_ns) for r in imported.requests] == [
        (1732420000123456789, 27912345)]
