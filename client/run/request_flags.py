"""The request a run sends, from curl's flags: ``-X/--method``, ``-H/--header 'Name: value'``
(repeatable), ``-d/--data TEXT|@FILE|@-``, or the targets of a ``--targets`` file
(``client.run.targets_file``), and the URL: sent exactly as given unless it is burn-service's
``/cpuBurnFlow`` or ``--iterations`` is given (``client.run.http.timed_url``).

As curl: ``-d`` makes the method POST unless ``-X`` says otherwise, and its body is sent as
given with its ``Content-Length`` (no ``Content-Type`` is added: say it with ``-H``).
A mistake is a one-line :class:`client.data.request.RequestError`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from client.data.request import (DEFAULT_ITERATIONS, HttpRequest, RequestError,
                                 is_burn_service_url, parse_header)
from client.run.http import timed_url, url_iterations
from client.run.targets_file import read_targets_file

__all__ = ["AskedRequests", "read_body", "requests_from_flags"]


@dataclass(frozen=True)
class AskedRequests:
    """What the flags ask to send: one request, or a targets file's (round-robin)."""

    request: HttpRequest
    targets: tuple[HttpRequest, ...] = ()
    iterations: int = 0           # the ``?iterations=N`` appended (0: none)
    burn_service: bool = False    # the URL is burn-service's: ask it for /limits

    @property
    def custom(self) -> bool:
        """Whether anything but a plain GET of the URL is sent (kept in the metadata)."""
        r = self.request
        return bool(self.targets) or r.method != "GET" or bool(r.headers) or r.body is not None


def read_body(data: str, stdin: BinaryIO | None = None) -> bytes:
    """``-d``'s body: the text itself, ``@FILE``'s bytes, or stdin's for ``@-``."""
    if not data.startswith("@"):
        return data.encode("utf-8")
    path = data[1:]
    if path == "-":
        return (stdin or sys.stdin.buffer).read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise RequestError(f"-d/--data @{path}: cannot read {path}: "
                           f"{exc.strerror or exc}") from None


def requests_from_flags(url: str | None, *, default_url: str, method: str | None = None,
                        headers: Sequence[str] = (), data: str | None = None,
                        targets: Path | None = None, iterations: int | None = None,
                        stdin: BinaryIO | None = None) -> AskedRequests:
    """The requests ``--url``, ``-X``, ``-H``, ``-d``, ``--targets`` and ``--iterations`` ask
    for (``RequestError`` naming the mistake)."""
    extra = tuple(parse_header(text) for text in headers)
    if targets is not None:
        for flag, given in (("--url", url), ("-X/--method", method), ("-d/--data", data),
                            ("--iterations", iterations)):
            if given is not None:
                raise RequestError(f"--targets FILE says what to send: {flag} cannot be added "
                                   "(-H headers can: they go with every target)")
        listed = read_targets_file(targets, extra)
        return AskedRequests(listed[0], listed)
    url = url if url is not None else default_url
    if not url.startswith(("http://", "https://")):
        raise RequestError(f"--url must start with http:// or https:// (got {url!r})")
    body = read_body(data, stdin) if data is not None else None
    burn = is_burn_service_url(url)
    if method is None:
        method = "POST" if data is not None else "GET"
    request = HttpRequest(timed_url(url, iterations), method, extra, body)
    if iterations is not None:
        applied = iterations
    elif (own := url_iterations(url)) is not None:   # the URL's own, sent as given
        applied = int(own) if own.lstrip("-").isdigit() else 0
    else:
        applied = DEFAULT_ITERATIONS if burn else 0
    return AskedRequests(request, (), applied, burn)
