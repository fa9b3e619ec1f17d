"""Following a redirect, when asked (``--follow-redirects N``), as curl ``-L`` does.

A 301, 302, 303, 307 or 308 with a ``Location`` asks for another request (RFC 9110 §15.4):
to the location resolved against the request's URL, with the same method and body, except
that a 303 becomes a GET (a HEAD stays a HEAD) and so does a POST answered 301 or 302 (what
curl and browsers do). A request to another origin drops the headers that carry the user's
credentials or name the first host (``Authorization``, ``Proxy-Authorization``, ``Cookie``,
``Host``), as curl does. The senders follow inside the request's time; the record is the last
answer's.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urldefrag, urljoin

from client.data.request import HttpRequest, RequestError

__all__ = ["REDIRECTS", "redirected"]

REDIRECTS = frozenset({301, 302, 303, 307, 308})
_PRIVATE = frozenset({"authorization", "proxy-authorization", "cookie", "host"})


def redirected(request: HttpRequest, status: int, location: str | None,
               schemes: Sequence[str] = ("http://", "https://")) -> HttpRequest | str | None:
    """The request the answer ``status`` / ``location`` to ``request`` asks for; None when it
    asks for none (not a redirect, or no ``Location``); a string when it cannot be followed
    (the reason: a scheme not in ``schemes``, a location that is no URL)."""
    if status not in REDIRECTS or not location:
        return None
    url = urldefrag(urljoin(request.url, location.strip())).url
    if not url.startswith(tuple(schemes)):
        return (f"HTTP {status}: redirect to {url} not followed (this path follows "
                f"{' and '.join(schemes)} only: time that URL)")
    method, body, headers = request.method, request.body, request.headers
    if (status == 303 and not request.head) or (status in (301, 302) and method == "POST"):
        method, body = "GET", None
        headers = tuple((k, v) for k, v in headers
                        if k.lower() not in ("content-length", "content-type"))
    try:
        following = HttpRequest(url, method, headers, body)
    except RequestError as exc:
        return f"HTTP {status}: redirect to {location!r} not followed ({exc})"
    if following.origin != request.origin:
        following = HttpRequest(url, method,
                                tuple((k, v) for k, v in headers if k.lower() not in _PRIVATE),
                                body)
    return following
