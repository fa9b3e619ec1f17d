"""Run-file readers: one module per format, picked by what a file holds, never by its name.

A reader (:class:`RunReader`) says whether a file's first bytes are its format
(``recognises(head)``) and reads the file's requests (``read(path)``); ``name`` is how the
format is called and ``expected`` what its files look like (said when no reader recognises a
file; a file of another tool's format, e.g. JMeter's, is pointed to ``http-timing import``).
``READERS`` is the registry, asked in order (the strictest first): a new format is one
module and one line here, and ``read_run`` (:mod:`client.data.files`) reads it.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from client.data.readers.base import HEAD_BYTES, RunReader
from client.data.readers.http_timing_csv import HttpTimingCsvReader
from client.data.readers.legacy import LegacyReader
from client.data.record import RawDataError

__all__ = ["HEAD_BYTES", "READERS", "RunReader", "reader_for"]

READERS: dict[str, RunReader] = {
    "http-timing-csv": HttpTimingCsvReader(),
    "legacy": LegacyReader(),
}


def reader_for(path: Path, head: bytes) -> RunReader:
    """The first reader that recognises ``head`` (``path``'s first bytes); a one-line
    ``RawDataError`` naming the file and every format expected when none does."""
    for reader in READERS.values():
        if reader.recognises(head):
            return reader
    if (imported := _imported_format(head)) is not None:
        raise RawDataError(f"{path}: {imported} results, not a run file: make it one with "
                           f"http-timing import {path} --timeline NAME.cgroup.csv (the "
                           "service's timeline, from http-timing record)")
    formats = [reader.expected for reader in READERS.values()]
    expected = (", ".join(formats[:-1]) + " or " if len(formats) > 1 else "") + formats[-1]
    what = "not a run file" if _is_text(head) else "not a text file"
    raise RawDataError(f"{path}: {what} (expected {expected})")


def _imported_format(head: bytes) -> str | None:
    """The name of the other tool's format ``head`` is in (``client.data.imports``: vegeta,
    k6, JMeter, an access log...), gzip or not; None when it is none of them."""
    from client.data.imports import HEAD_BYTES as IMPORT_HEAD, IMPORTERS

    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, IMPORT_HEAD)
        except zlib.error:
            return None
    head = head[:IMPORT_HEAD]
    return next((name for name, importer in IMPORTERS.items() if importer.recognises(head)),
                None)


def _is_text(head: bytes) -> bool:
    """Whether ``head`` is UTF-8 (but for a character cut short at the end of ``HEAD_BYTES``)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return len(head) == HEAD_BYTES and exc.start >= len(head) - 3
    return True
