"""client.data.files: a run's and a timeline's files written whole, one way (``replacing``):
a reader sees the old file or the new one, a failed write leaves the old one and no
temporary file, and a file that cannot be written is one line naming it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from client.data.files import (FileWriteError, RunWriter, replacing, write_metadata, write_rows,
                               write_whole)
from client.data.formats import read_run
from client.data.metadata import RunMetadata
from client.data.record import RequestRecord
from client.data.timeline_meta import (TimelineClock, TimelineMetadata, read_timeline_metadata,
                                       write_timeline_metadata)

RECORDS = [RequestRecord(0, 0, 5_000_000, 200, server_cpu_ns=4_900_000),
           RequestRecord(1, 5_000_000, 1_000, 0, error="ConnectError: refused\nline2")]
CLOCK = TimelineClock(1_732_420_000_000_000_000, 100)


def test_the_old_file_stays_until_the_new_one_is_whole(tmp_path: Path) -> None:
    path = tmp_path / "t.cgroup.csv"
    path.write_text("old\n")
    with replacing(path) as tmp:
        tmp.write_text("new, half")
        assert path.read_text() == "old\n"      # a reader now still reads the old file
        tmp.write_text("new\n")
    assert path.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.cgroup.csv"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_text("new, half")
        raise RuntimeError("interrupted")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.parametrize("write", [
    lambda path: write_whole(path, "x\n"),
    lambda path: write_rows(path, RECORDS),
    lambda path: write_metadata(path, RunMetadata(name="r")),
    lambda path: write_timeline_metadata(path, TimelineMetadata("t", CLOCK)),
])
def test_a_file_that_cannot_be_written_is_one_line_naming_it(
        tmp_path: Path, write: Callable[[Path], None]) -> None:
    (tmp_path / "taken").write_text("a file where the folder belongs")
    path = tmp_path / "taken" / "deeper" / "r.csv"
    with pytest.raises(FileWriteError) as info:
        write(path)
    assert str(info.value) == (f"cannot write {path}: {tmp_path / 'taken'} is a file, "
                               "not a directory")
    folder = tmp_path / "r.csv"
    folder.mkdir()
    with pytest.raises(FileWriteError) as info:
        write(folder)
    assert str(info.value) == f"cannot write {folder}: it is a directory, not a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "taken"]


def test_rows_written_whole_are_the_rows_a_run_streams(tmp_path: Path) -> None:
    streamed, whole = tmp_path / "streamed.csv", tmp_path / "whole.csv"
    with RunWriter(streamed) as writer:
        for record in RECORDS:
            writer.write(record)
    whole.write_text("an older run's rows\n")
    write_rows(whole, RECORDS)
    assert whole.read_bytes() == streamed.read_bytes()
    assert read_run(whole).records[1].error == "ConnectError: refused line2"


def test_metadata_of_a_run_and_a_timeline_read_back(tmp_path: Path) -> None:
    write_metadata(tmp_path / "r.json", RunMetadata(name="r", url="http://x"))
    write_timeline_metadata(tmp_path / "t.json", TimelineMetadata("t", CLOCK, samples=3))
    meta = read_timeline_metadata(tmp_path / "t.json")
    assert meta is not None and (meta.name, meta.clock, meta.samples) == ("t", CLOCK, 3)
    assert '"url": "http://x"' in (tmp_path / "r.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.json"]
