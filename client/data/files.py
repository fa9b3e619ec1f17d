"""Raw data on disk: one CSV row per request, flushed as it completes, plus a JSON metadata file.

``<name>.csv`` has the columns of :mod:`client.data.record`; ``<name>.json`` the metadata of
:mod:`client.data.metadata`. ``read_run`` (of :mod:`client.data.formats`, named here too: a
run's files in one place) reads a run from its CSV (the metadata beside it), its JSON, or any
other run format (a text capture of the original ``http-timing.py``, ...). A file that cannot
be read gives a :class:`RawDataError` naming it, in one line; one that cannot be written (raw
data, a picture, a table: every writer goes through :func:`writing`) a
:class:`FileWriteError`, one line too.

A run's files and a timeline's, written whole (the CSV again after the run, the JSON, a
timeline fetched or kept), are written one way: :func:`replacing` (:func:`write_rows`,
:func:`write_metadata`, :func:`write_whole`), so a reader sees the old file or the new one,
never half of one. Only a run's CSV as the run goes (:class:`RunWriter`) is written in place,
a row at a time, so that an interrupted run keeps every completed request.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from client.data.folders import FileWriteError, folder_problem, make_folder
from client.data.formats import Run, read_run
from client.data.metadata import RunMetadata
from client.data.record import COLUMNS, RawDataError, RequestRecord

__all__ = ["FileWriteError", "RawDataError", "Run", "RunWriter", "folder_problem", "read_run",
           "replacing", "write_metadata", "write_rows", "write_whole", "writing"]


def write_problem(path: Path, exc: OSError) -> str:
    """Why ``path`` could not be written, in words: a file where a folder belongs, a folder
    where the file belongs, else the system's reason."""
    for parent in path.parents:   # the nearest that exists decides
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a directory"
            break
    if path.is_dir():
        return "it is a directory, not a file"
    return exc.strerror or str(exc)


@contextmanager
def writing(path: Path, *, folder_made: bool = False) -> Iterator[Path]:
    """Write ``path`` inside this block (its folder made first, unless the caller made it:
    ``folder_made``): an ``OSError`` becomes a one-line :class:`FileWriteError` naming the
    path and the reason."""
    try:
        if not folder_made:
            make_folder(path.parent)
        yield path
    except OSError as exc:
        raise FileWriteError(f"cannot write {path}: {write_problem(path, exc)}") from None


@contextmanager
def replacing(path: Path, *, sync: bool = False, folder_made: bool = False
              ) -> Iterator[Path]:
    """Write ``path`` whole or not at all: the block writes the temporary file it is given
    (``<path>.tmp``, beside it), fsynced after the block when ``sync``, then renamed over
    ``path``. On an error the temporary file is removed and ``path`` left as it was; an
    ``OSError`` is a one-line :class:`FileWriteError` naming ``path`` (:func:`writing`)."""
    tmp = path.with_name(path.name + ".tmp")
    with writing(path, folder_made=folder_made):
        try:
            yield tmp
            if sync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with suppress(OSError):
                tmp.unlink()
            raise


def write_whole(path: Path, text: str, *, sync: bool = False,
                folder_made: bool = False) -> None:
    """Write ``text`` (UTF-8) as ``path``, whole or not at all (:func:`replacing`;
    ``folder_made``: its folder made already, by :func:`make_folder`)."""
    with replacing(path, sync=sync, folder_made=folder_made) as tmp:
        tmp.write_text(text, encoding="utf-8")


class RunWriter:
    """Appends one CSV row per completed request and flushes it, so an interrupted run keeps
    every completed request (a row is written whole or not at all)."""

    def __init__(self, csv_path: Path) -> None:
        self.path = csv_path
        with writing(csv_path):
            self._file: IO[str] = open(csv_path, "w", newline="", encoding="utf-8")
        # rows are formatted in memory first (one writer, made once), then written whole
        self._line = io.StringIO()
        self._writer = csv.DictWriter(self._line, fieldnames=COLUMNS, lineterminator="\n")
        self._writer.writeheader()
        self._file.write(self._line.getvalue())
        self._file.flush()
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        self._line.seek(0)
        self._line.truncate()
        self._writer.writerow(_row(record))
        self._file.write(self._line.getvalue())  # one write per row: never half a row
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def _row(record: RequestRecord) -> dict[str, Any]:
    row = record.to_row()
    row["error"] = " ".join(str(row["error"]).split())  # one line, no stray newlines
    return row


def write_rows(csv_path: Path, records: Iterable[RequestRecord]) -> None:
    """Write the run's CSV whole with ``records`` (a run replayed, or its columns filled in
    after the run), fsynced as :class:`RunWriter` does, by :func:`replacing`."""
    with replacing(csv_path, sync=True) as tmp, \
            open(tmp, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(_row(record) for record in records)


def write_metadata(path: Path, metadata: RunMetadata) -> None:
    """Write the metadata JSON whole (:func:`replacing`: a reader never sees half a file)."""
    write_whole(path, json.dumps(metadata.to_dict(), indent=2, sort_keys=True, default=str)
                + "\n")
