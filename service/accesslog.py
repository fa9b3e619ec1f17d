"""Request logs that do not echo raw input.

uvicorn's access log prints each request line as the client sent it, query string included
(``"GET /cpuBurnFlow?iterations=<anything> HTTP/1.1" 200``), so whatever a client puts in a URL
(junk, escape sequences, a secret pasted by mistake) would land in the log. The choice made
here: keep uvicorn's access log (its format, its ``--log-level``, its handlers, also under
``uvicorn service.app:app`` or in the container) and make it safe with a ``logging.Filter`` on
the ``uvicorn.access`` logger that, in each record,

- drops the query string, and
- keeps the path only when it is one of the app's route paths (``/cpuBurnFlow``, ``/pi``,
  ...); any other path (a 404 probe) is logged as ``(other path)``.

So a line reads ``127.0.0.1:50312 - "GET /cpuBurnFlow HTTP/1.1" 200``; the status, method and
client address stay, and ``/metrics`` carries the latency per route. ``install_access_log_filter``
is idempotent: every app built in a process adds its route paths to the one filter.

The line is written for every request, so its cost is part of what a CPU quota charges: right
after a burn, with cold caches, uvicorn's formatter (a copy of each record, an ``HTTPStatus``
lookup) and the thread/process names each record collects cost ~0.1 ms. ``burn-service``
therefore runs uvicorn with :func:`log_config`: the same handlers, levels and text, formatted
by :class:`LeanAccessFormatter`, and records without thread/process names (:func:`lean_records`;
the formats print none of them).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any

from uvicorn.config import LOGGING_CONFIG
from uvicorn.logging import AccessFormatter

__all__ = ["ACCESS_LOGGER", "OTHER_PATH", "AccessLogFilter", "LeanAccessFormatter",
           "install_access_log_filter", "lean_records", "log_config", "safe_path"]

ACCESS_LOGGER = "uvicorn.access"
OTHER_PATH = "(other path)"


def safe_path(path_with_query: str, known_paths: Iterable[str] | frozenset[str]) -> str:
    """``/cpuBurnFlow?iterations=5`` -> ``/cpuBurnFlow``; a path that is no route ->
    ``(other path)``."""
    path = path_with_query.split("?", 1)[0]
    return path if path in known_paths else OTHER_PATH


class AccessLogFilter(logging.Filter):
    """Rewrites the request path in uvicorn's access log records (never drops a record)."""

    def __init__(self, known_paths: Iterable[str] = ()) -> None:
        super().__init__()
        self.known_paths: frozenset[str] = frozenset(known_paths)

    def add_paths(self, paths: Iterable[str]) -> None:
        self.known_paths = self.known_paths | frozenset(paths)

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # uvicorn: '%s - "%s %s HTTP/%s" %d' % (client, method, path?query, version, status)
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], safe_path(args[2], self.known_paths), *args[3:])
        elif isinstance(args, tuple):  # another format: clean anything that looks like a path
            record.args = tuple(safe_path(a, self.known_paths)
                                if isinstance(a, str) and a.startswith("/") else a for a in args)
        return True


def install_access_log_filter(paths: Iterable[str],
                              logger: logging.Logger | None = None) -> AccessLogFilter:
    """Make ``uvicorn.access`` log only known ``paths`` and no query strings."""
    logger = logger if logger is not None else logging.getLogger(ACCESS_LOGGER)
    for existing in logger.filters:
        if isinstance(existing, AccessLogFilter):
            existing.add_paths(paths)
            return existing
    installed = AccessLogFilter(paths)
    logger.addFilter(installed)
    return installed


ACCESS_FORMAT = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
_PHRASES = {status.value: status.phrase for status in HTTPStatus}


class LeanAccessFormatter(AccessFormatter):
    """uvicorn's access line, the same text, without copying the record: for uvicorn's own
    format and no colours; anything else is left to ``AccessFormatter``."""

    def format(self, record: logging.LogRecord) -> str:
        args = record.args
        if self.use_colors or self._fmt != ACCESS_FORMAT or not isinstance(args, tuple) \
                or len(args) != 5 or record.exc_info or record.stack_info:
            return super().format(record)
        client, method, path, version, status = args
        if not isinstance(status, int):
            return super().format(record)
        prefix = f"{record.levelname}:".ljust(9)
        return (f'{prefix} {client} - "{method} {path} HTTP/{version}" '
                f'{status} {_PHRASES.get(status, "")}')


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration, with :class:`LeanAccessFormatter` for access lines."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["access"]["()"] = f"{__name__}.LeanAccessFormatter"
    return config


def lean_records() -> None:
    """Log records without the thread, process and process names, nor where in the source
    they were logged from (``logging``'s switches in the Logging HOWTO's "Optimization"
    section: ``logging._srcfile = None`` skips the walk up the stack every record makes): none
    of the service's formats shows them, and each costs a lookup per line."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # type: ignore[attr-defined]
