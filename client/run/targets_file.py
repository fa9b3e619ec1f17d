"""``--targets FILE``: the requests of a run in vegeta's ``http`` format, sent round-robin.

(Not ``client.run.targets``, which are the backends that start a service for a sweep: these are
the requests a run sends.) The format, as ``vegeta attack -targets``::

    # a comment
    GET http://127.0.0.1:8080/api/items?page=2
    Accept-Encoding: gzip
    Authorization: Bearer ...

    POST http://127.0.0.1:8080/api/items
    Content-Type: application/json
    @body.json

A ``METHOD URL`` line, its header lines (``Name: value``), an optional ``@path`` body line (the
file's bytes; a relative path is from the current directory, as vegeta's), and a blank line
before the next target. A mistake is a one-line :class:`client.data.request.RequestError`
naming the file and line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from client.data.request import HttpRequest, RequestError, parse_header

__all__ = ["parse_targets", "read_targets_file"]


def read_targets_file(path: Path, headers: Sequence[tuple[str, str]] = ()
                      ) -> tuple[HttpRequest, ...]:
    """The targets in ``path``; ``headers`` (``-H``) go with each, its own replacing them."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not a UTF-8 text file"
        raise RequestError(f"--targets {path}: cannot read it: {reason or exc}") from None
    return parse_targets(text.splitlines(), str(path), headers)


def _read_body(ref: str, where: str) -> bytes:
    try:
        return Path(ref).read_bytes()
    except OSError as exc:
        raise RequestError(f"{where}: cannot read the body @{ref}: "
                           f"{exc.strerror or exc}") from None


def parse_targets(lines: Iterable[str], source: str = "targets",
                  headers: Sequence[tuple[str, str]] = ()) -> tuple[HttpRequest, ...]:
    """The targets of the file's ``lines`` (``source`` names it in errors)."""
    targets: list[HttpRequest] = []
    current: tuple[str, str] | None = None   # method and URL of the target being read
    own: list[tuple[str, str]] = []
    body: bytes | None = None
    start = 0

    def close() -> None:
        nonlocal current, own, body
        if current is not None:
            names = {name.lower() for name, _ in own}
            merged = tuple(h for h in headers if h[0].lower() not in names) + tuple(own)
            try:
                targets.append(HttpRequest(current[1], current[0], merged, body))
            except RequestError as exc:
                raise RequestError(f"{source}:{start}: {exc}") from None
        current, own, body = None, [], None

    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        where = f"{source}:{number}"
        if not line or line.startswith("#"):
            if not line:
                close()
            continue
        if current is None:
            method, _, url = line.partition(" ")
            url = url.strip()
            if not method.isalpha() or not url.startswith(("http://", "https://")) \
                    or " " in url:
                raise RequestError(f"{where}: expected a target 'METHOD URL' (like GET "
                                   f"http://127.0.0.1:8080/), got {line!r}")
            current, start = (method, url), number
        elif body is not None:
            raise RequestError(f"{where}: the body line @FILE ends a target: a blank line "
                               f"comes before the next one (got {line!r})")
        elif line.startswith("@"):
            body = _read_body(line[1:], where)
        else:
            try:
                own.append(parse_header(line))
            except RequestError:
                raise RequestError(f"{where}: expected a header 'Name: value', a body "
                                   f"@FILE or a blank line, got {line!r}") from None
    close()
    if not targets:
        raise RequestError(f"{source}: no target in it (a line 'METHOD URL', like GET "
                           "http://127.0.0.1:8080/)")
    return tuple(targets)
