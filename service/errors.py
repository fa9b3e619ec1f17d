"""Every error the service answers: JSON for API clients, the HTML error page for browsers.

- ``404``/``405`` (and any ``HTTPException``): ``{"error": "not found", "message": ...}``;
  405 keeps its ``Allow`` header. Nothing the client sent (path, query) is echoed.
- ``422``: the app's own handler (``service.app``), which names the parameter and its allowed
  range and, for a browser, renders the same ``error.html`` page (``service.pages``).
- ``500``: ``ErrorMiddleware`` catches what a route raised, logs it once with its traceback
  on the ``uvicorn.error`` logger (server side, where uvicorn's own errors go; the log line
  names the route, never the query) and answers a generic body. A last-resort handler on
  Starlette's ``ServerErrorMiddleware`` does the same for errors raised outside it.
- ``503``: ``service.guard`` answers it, with ``Retry-After``, through ``error_page`` here.

Browsers get HTML when they ask for a page (``/``, ``/pi``; see ``pages.wants_page``) or for a
path that does not exist (a 404 outside ``/api/``); everything else gets JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.accesslog import OTHER_PATH
from service.pages import templates, wants_page

__all__ = ["ErrorMiddleware", "error_body", "error_page", "error_response",
           "install_error_handlers", "route_name", "wants_html"]

logger = logging.getLogger("uvicorn.error")

MESSAGES = {
    404: "no such path; the API is described at /docs",
    405: "method not allowed on this path",
    500: "the service failed to answer this request; the error has been logged",
}


def error_body(status: int, message: str, **extra: Any) -> dict[str, Any]:
    """``{"error": "not found", "message": ..., **extra}``: the shape of every JSON error."""
    return {"error": _phrase(status).lower(), "message": message, **extra}


def wants_html(request: Request, status: int | None = None) -> bool:
    """A browser asking for a page, or (for a 404) for a path that is no API route."""
    if wants_page(request):
        return True
    return (status == 404 and "text/html" in request.headers.get("accept", "")
            and not request.url.path.startswith("/api/"))


def error_page(request: Request, status: int, message: str,
               headers: Mapping[str, str] | None = None) -> HTMLResponse:
    """The ``error.html`` page (the one the 422 uses) for any status, with one message."""
    title = _phrase(status)
    return templates.TemplateResponse(
        request, "error.html",
        {"title": title, "heading": f"{title} ({status})", "problems": [{"message": message}],
         "limits": [], "limit_headline": ""},
        status_code=status, headers=dict(headers or {}))


def error_response(request: Request, status: int, message: str,
                   headers: Mapping[str, str] | None = None, **extra: Any) -> Response:
    """HTML for a browser that asked for a page, JSON for everyone else."""
    if wants_html(request, status):
        return error_page(request, status, message, headers)
    return JSONResponse(error_body(status, message, **extra), status_code=status,
                        headers=dict(headers or {}))


def route_name(scope: Scope) -> str:
    """The matched route's template (``/cpuBurnFlow``), or ``(other path)``: safe to log."""
    route = scope.get("route")
    return getattr(route, "path", None) or OTHER_PATH


class ErrorMiddleware:
    """Pure ASGI middleware: an exception from the app is logged once, server side, with its
    traceback, and answered with a generic 500 (if no response has started yet)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_noting_start(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_noting_start)
        except Exception as exc:
            logger.error("unhandled %s in %s %s", type(exc).__name__, scope.get("method", ""),
                         route_name(scope), exc_info=exc)
            if started:  # too late for a clean answer; uvicorn closes the connection
                raise
            response = error_response(Request(scope), 500, MESSAGES[500])
            await response(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    headers = dict(exc.headers or {})
    if status < 200 or status in (204, 304):  # no body allowed
        return Response(status_code=status, headers=headers)
    message = MESSAGES.get(status) or str(exc.detail)
    if status == 405 and "Allow" in headers:
        message += f"; allowed: {headers['Allow']}"
    return error_response(request, status, message, headers)


async def _last_resort(request: Request, exc: Exception) -> Response:
    # Starlette re-raises after this, so uvicorn logs the traceback ("Exception in ASGI app").
    return error_response(request, 500, MESSAGES[500])


def install_error_handlers(app: FastAPI) -> None:
    """JSON/HTML handlers for HTTP errors and 500s. Call it once routes and other middleware
    are set up: ``ErrorMiddleware`` goes innermost of the user middleware (inside
    ``/metrics``' counting), so a 500 is counted with its route."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _last_resort)
    app.user_middleware.append(Middleware(ErrorMiddleware))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
