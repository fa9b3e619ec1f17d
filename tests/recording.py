"""A real server that keeps what it received: a bare ASGI app (served by uvicorn through
``tests.support.running_service``) recording each request's method, raw path and query,
headers and body, and answering 200 ``ok``. For testing that the client sends a foreign API
exactly what the user asked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.support import running_service

__all__ = ["Received", "Recording", "recording_server"]


@dataclass(frozen=True)
class Received:
    method: str
    target: str                      # the raw path and query, as they came
    headers: list[tuple[str, str]]   # names lower-cased, in order
    body: bytes

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k == name.lower()]
        return ", ".join(values) if values else None


@dataclass
class Recording:
    """The requests received (the ``/healthz`` probes of the test helper left out)."""

    received: list[Received] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        if target != "/healthz":
            self.received.append(Received(
                scope["method"], target,
                [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
                body))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain"), (b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


@contextmanager
def recording_server() -> Iterator[tuple[str, Recording]]:
    """A uvicorn server of a :class:`Recording` app: (its base URL, what it received)."""
    app = Recording()
    with running_service(app=app) as base:  # type: ignore[arg-type]
        yield base, app
