"""An nginx ``log_format`` in nginx's own syntax, turned into a reader of the lines it writes
(``http-timing import --log-format '...'``).

The text given may be the whole directive (``log_format upstreaminfo escape=default '...'
'...';``, as in ``nginx.conf``), its quoted strings, or the bare format. Variables are
``$name`` or ``${name}``; everything else is literal. Each variable matches what nginx writes
for it: numbers for the times and the status, a list (``a, b`` for retries, ``a : b`` across
upstream groups) for the ``$upstream_*`` ones, anything between quotes but an unescaped ``"``
(nginx escapes it as ``\\x22``, or ``\\"`` with ``escape=json``), and otherwise the shortest text
before the next literal.

Times: ``$msec`` is when the line was written (the request's end, Unix seconds with ms),
``$request_time`` the time since the request's first byte was read (s, ms), so the start is
``$msec - $request_time``: a format needs both. ``$upstream_addr`` (its last address: the
server that answered) is each request's upstream, for ``--upstream``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["LogFormat", "LogFormatError", "parse_log_format"]

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_NUMBER = r"\d+(?:\.\d+)?"
_LIST = r"[^\s,]+(?:(?:, | : )[^\s,]+)*"
_PATTERNS = {"msec": r"\d+\.\d+", "request_time": r"\d+\.\d+", "status": r"\d{3}",
             "body_bytes_sent": r"\d+", "bytes_sent": r"\d+", "request_length": r"\d+",
             "connection": r"\d+", "connection_requests": r"\d+", "pipe": r"[p.]",
             "time_local": r"[^\]]+", "time_iso8601": r"\S+"}
NEEDED = ("msec", "request_time")


class LogFormatError(ValueError):
    """A ``--log-format`` that cannot be used (one line)."""


@dataclass(frozen=True)
class LogFormat:
    text: str                    # the format itself (the strings joined)
    names: tuple[str, ...]       # its variables, in order (repeats kept)
    regex: re.Pattern[str]

    def match(self, line: str) -> dict[str, str] | None:
        """The variables' values in ``line`` (the first of repeats), or None."""
        found = self.regex.match(line)
        if not found:
            return None
        values: dict[str, str] = {}
        for index, name in enumerate(self.names):
            values.setdefault(name, found.group(index + 1))
        return values


def _strings(text: str) -> str:
    """The directive's (or the arguments') quoted strings, joined; the bare text otherwise."""
    text = text.strip().rstrip(";").strip()
    if text.startswith("log_format"):
        rest = text[len("log_format"):].split(None, 1)
        if len(rest) < 2:
            raise LogFormatError("--log-format: 'log_format NAME' without a format")
        text = rest[1].strip()
        if text.startswith("escape="):
            text = text.split(None, 1)[1] if len(text.split(None, 1)) > 1 else ""
    if not text or text[0] not in "'\"":
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        quote = text[i]
        if quote.isspace():
            i += 1
            continue
        if quote not in "'\"":
            raise LogFormatError(f"--log-format: text outside the quotes at {text[i:i + 20]!r}")
        i += 1
        piece: list[str] = []
        while i < len(text) and text[i] != quote:
            if text[i] == "\\" and i + 1 < len(text):
                i += 1
            piece.append(text[i])
            i += 1
        if i >= len(text):
            raise LogFormatError(f"--log-format: a string opened with {quote} is not closed")
        out.append("".join(piece))
        i += 1
    return "".join(out)


def _pattern(name: str, before: str, after: str) -> str:
    if name in _PATTERNS:
        return _PATTERNS[name]
    if name.startswith("upstream_"):
        return _LIST
    if before.endswith('"') and after.startswith('"'):
        return r'(?:[^"\\]|\\.)*'
    if before.endswith("[") and after.startswith("]"):
        return r"[^\]]*"
    return r".*?"


def parse_log_format(text: str) -> LogFormat:
    """The reader of the lines ``text`` (a ``log_format``) writes (``LogFormatError`` when it
    has no ``$msec`` or ``$request_time``)."""
    fmt = _strings(text)
    pieces = _VARIABLE.split(fmt)   # literal, ${name}, $name, literal, ...
    literals = pieces[0::3]
    names = [a or b for a, b in zip(pieces[1::3], pieces[2::3])]
    missing = [f"${n}" for n in NEEDED if n not in names]
    if missing:
        raise LogFormatError(
            f"--log-format needs $msec (the request's end) and $request_time (its duration); "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not in {fmt!r}")
    regex = re.escape(literals[0])
    for index, name in enumerate(names):
        regex += f"({_pattern(name, literals[index], literals[index + 1])})"
        regex += re.escape(literals[index + 1])
    return LogFormat(fmt, tuple(names), re.compile(f"^{regex}$"))
