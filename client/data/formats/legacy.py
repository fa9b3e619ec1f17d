"""The original ``http-timing.py``'s text format: ``<ms since start> Status code <code> time
<latency ns>`` per request (``26 Status code 200 time 5207306``).

``format_line`` prints it (``http-timing`` keeps the original's output); ``parse_legacy_text``
reads old captures back as records, so they can be plotted and reported like any run:
:class:`LegacyReader` recognises a capture by any such line in its first bytes (a capture
may begin with other output) and ignores the lines that are not (the total line at the end).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from client.data.formats.base import RUN, head_lines, read_text
from client.data.record import RawDataError, RequestRecord

__all__ = ["LEGACY_LINE", "LegacyReader", "format_line", "parse_legacy_text"]

LEGACY_LINE = re.compile(r"^\s*(\d+)\s+Status code\s+(\d+)\s+time\s+(\d+)\s*$")


def format_line(record: RequestRecord) -> str:
    """The original's line: ``<ms since start> Status code <code> time <latency ns>``."""
    return f"{record.start_ns // 1_000_000} Status code {record.status} time {record.latency_ns}"


def _legacy_error(status: int) -> str:
    if 200 <= status < 400:
        return ""
    return "transport error" if status == 0 else f"HTTP {status}"


def parse_legacy_text(lines: Iterable[str], source: str = "<text>") -> list[RequestRecord]:
    """Records from the original script's lines; ``RawDataError`` when there is none."""
    records: list[RequestRecord] = []
    for line in lines:
        match = LEGACY_LINE.match(line)
        if match:
            ms, status, latency = (int(g) for g in match.groups())
            records.append(RequestRecord(seq=len(records), start_ns=ms * 1_000_000,
                                         latency_ns=latency, status=status,
                                         error=_legacy_error(status)))
    if not records:
        raise RawDataError(f"{source}: no text lines like '26 Status code 200 time 5207306'")
    return records


class LegacyReader:
    name = "legacy"
    use = RUN
    expected = "the original http-timing.py's text lines like '26 Status code 200 time 5207306'"

    def recognises(self, head: bytes) -> bool:
        return any(LEGACY_LINE.match(line) for line in head_lines(head))

    def read(self, path: Path) -> list[RequestRecord]:
        return parse_legacy_text(read_text(path, self.expected).splitlines(), source=str(path))
