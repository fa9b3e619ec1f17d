"""The timed request: method, URL, headers, body, built once and taken by both senders.

:class:`HttpRequest` is what ``-X/--method``, ``-H/--header``, ``-d/--data`` (and each target
of a ``--targets`` file, ``client.run.targets_file``) make; ``client.run.wire`` encodes it on a
socket, ``client.run.http`` hands it to httpx. The run's metadata keeps it without its secrets
(:meth:`HttpRequest.to_metadata`): the values of ``Authorization``, ``Proxy-Authorization``,
``Cookie`` and any header named with ``--redact`` are written as ``<redacted>``, a body as its
size and sha256, never its text; :func:`redact_command` does the same to the command line kept
beside them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["BURN_PATH", "DEFAULT_ITERATIONS", "HttpRequest", "REDACTED", "RequestError",
           "SECRET_HEADERS", "body_metadata", "is_burn_service_url", "parse_header",
           "redact_command", "redacted_names"]

REDACTED = "<redacted>"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
BURN_PATH = "/cpuBurnFlow"    # burn-service's endpoint: the only URL that gets ?iterations=N
DEFAULT_ITERATIONS = 5000
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                         "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


class RequestError(ValueError):
    """A request that cannot be sent as given (a one-line message naming what is wrong)."""


def _token(text: str) -> bool:
    return bool(text) and all(c in _TOKEN_CHARS for c in text)


@dataclass(frozen=True)
class HttpRequest:
    """One request as it goes on the wire. ``body`` None: none (no ``Content-Length``); bytes,
    even empty: sent with its ``Content-Length``. ``headers`` are the user's, in order; they
    replace the client's own of the same name (``User-Agent``, ``Accept``, ``Host``)."""

    url: str
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None

    def __post_init__(self) -> None:
        if not _token(self.method):
            raise RequestError(f"not an HTTP method: {self.method!r}")
        if not self.url.startswith(("http://", "https://")) or not urlsplit(self.url).hostname:
            raise RequestError(f"the URL must start with http:// or https:// and name a host "
                               f"(got {self.url!r})")
        for name, value in self.headers:
            if not _token(name):
                raise RequestError(f"not a header name: {name!r}")
            if "\r" in value or "\n" in value:
                raise RequestError(f"header {name}: a value cannot span lines")

    @property
    def origin(self) -> tuple[str, str, int]:
        """(scheme, host, port): requests with the same origin can share a connection."""
        parts = urlsplit(self.url)
        return (parts.scheme, parts.hostname or "",
                parts.port or (443 if parts.scheme == "https" else 80))

    @property
    def head(self) -> bool:
        """A HEAD request: its answer has no body whatever its Content-Length says."""
        return self.method.upper() == "HEAD"

    def header_names(self) -> frozenset[str]:
        return frozenset(name.lower() for name, _ in self.headers)

    def describe(self) -> str:
        """``POST http://host/api`` (the method and URL; nothing secret)."""
        return f"{self.method} {self.url}"

    def to_metadata(self, redact: Collection[str] = ()) -> dict[str, Any]:
        """The request as the metadata keeps it: secret header values ``<redacted>``, the body
        as its size and sha256."""
        hidden = redacted_names(redact)
        return {"method": self.method, "url": self.url,
                "headers": [[name, REDACTED if name.lower() in hidden else value]
                            for name, value in self.headers],
                "body": body_metadata(self.body)}


def redacted_names(extra: Iterable[str] = ()) -> frozenset[str]:
    """The header names whose values never reach a file: the usual secrets and ``extra``."""
    return SECRET_HEADERS | {name.strip().lower() for name in extra}


def body_metadata(body: bytes | None) -> dict[str, Any] | None:
    """A body as the metadata keeps it: its size and sha256 (never its text)."""
    if body is None:
        return None
    return {"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` (as curl ``-H``) -> (name, value); ``RequestError`` when it is not."""
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise RequestError(f"-H/--header takes 'Name: value' (got {text!r}: no colon)"
                           if not colon else f"-H/--header: no header name in {text!r}")
    name = name.strip()
    if not _token(name):
        raise RequestError(f"-H/--header: {name!r} is not a header name")
    return name, value.strip()


def is_burn_service_url(url: str) -> bool:
    """Whether ``url`` is burn-service's ``/cpuBurnFlow`` (it gets ``?iterations=N`` and its
    service is asked for ``/limits``); any other URL is sent exactly as given."""
    return urlsplit(url).path == BURN_PATH


_VALUE_FLAGS = frozenset({"-H", "--header", "-d", "--data"})


def redact_command(argv: Sequence[str], redact: Collection[str] = ()) -> list[str]:
    """The command line as the metadata keeps it: the value of a secret ``-H`` header and a
    ``-d`` text are ``<redacted>`` (``-d @FILE`` names a file, and stays)."""
    hidden = redacted_names(redact)
    out: list[str] = []
    pending: str | None = None  # the flag whose value is the next argument
    for arg in argv:
        if pending is not None:
            out.append(_redact_value(pending, arg, hidden))
            pending = None
            continue
        flag, eq, value = arg.partition("=")
        if arg in _VALUE_FLAGS:
            pending = arg
            out.append(arg)
        elif eq and flag in ("--header", "--data"):
            out.append(f"{flag}={_redact_value(flag, value, hidden)}")
        elif arg[:2] in ("-H", "-d") and len(arg) > 2:  # -HName:v, -dTEXT
            out.append(arg[:2] + _redact_value(arg[:2], arg[2:], hidden))
        else:
            out.append(arg)
    return out


def _redact_value(flag: str, value: str, hidden: frozenset[str]) -> str:
    if flag in ("-d", "--data"):
        return value if value.startswith("@") else REDACTED
    name, colon, _ = value.partition(":")
    return f"{name}: {REDACTED}" if colon and name.strip().lower() in hidden else value
