"""What every run-file reader is: :class:`RunReader`, and the reading it shares.

A reader is told a file's first bytes (``head``: at most :data:`HEAD_BYTES`, so a format is
recognised by what the file holds, never by its name) and, once it said yes, reads the whole
file into request records. Its errors are :class:`client.data.record.RawDataError`: one line
naming the file (and the line) and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from client.data.record import RawDataError, RequestRecord

__all__ = ["HEAD_BYTES", "RunReader", "head_lines", "read_text"]

HEAD_BYTES = 64 * 1024   # what a reader sees to recognise its format


class RunReader(Protocol):
    name: str       # how the format is called (e.g. ``http-timing-csv``)
    expected: str   # what a file of this format looks like, for a file no reader recognises

    def recognises(self, head: bytes) -> bool:
        """Whether ``head`` (the file's first bytes, possibly cut mid-line) is this format."""

    def read(self, path: Path) -> list[RequestRecord]:
        """Every request of the file; ``RawDataError`` (one line) when it cannot be read."""


def head_lines(head: bytes) -> list[str]:
    """The lines of a file's first bytes as text (undecodable bytes replaced; the last line
    may be cut short)."""
    return head.decode("utf-8", errors="replace").splitlines()


def read_text(path: Path, expected: str) -> str:
    """The whole file as UTF-8 text; ``RawDataError`` naming the file when it is not text."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RawDataError(f"{path}: not a text file (expected {expected})") from None
    except OSError as exc:
        raise RawDataError(f"{path}: cannot read: {exc.strerror or exc}") from None
