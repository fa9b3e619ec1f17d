"""Whether a URL's server can be reached at all, asked once before a run: a TCP connection
(and, for ``https://``, a TLS handshake with the run's own certificate check) to its host and
port. A target nobody answers is then said in one line before anything else, instead of a
run of failed requests followed by a summary of nothing.

Only reaching the server is checked here: what it answers (a reply that cannot be read, an
error status) is the run's to record. Through a proxy (the environment's ``HTTP(S)_PROXY``)
the server is not reached directly, so nothing is checked. A server that takes the connection
and closes it without a byte of an answer was reached: :func:`closed_without_answer` tells
that from a request's recorded error, so that it is never called unreachable.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
import urllib.request
from urllib.parse import urlsplit

from client.run.http import Verify

__all__ = ["BURN_SERVICE_ORIGINS", "closed_without_answer", "is_burn_service_default",
           "unreachable"]

# burn-service's own default address (``burn-service`` with no flags listens on port 7800)
BURN_SERVICE_ORIGINS = {("http", "localhost", 7800), ("http", "127.0.0.1", 7800),
                        ("http", "::1", 7800)}


def is_burn_service_default(url: str) -> bool:
    """Whether ``url`` is on burn-service's own default address (then "start burn-service"
    is advice; for any other URL it is not)."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    return (parts.scheme, (parts.hostname or "").lower(), port) in BURN_SERVICE_ORIGINS


def closed_without_answer(error: str) -> bool:
    """Whether a request's recorded error (``client.run.wire``) says the server took the
    connection and then closed or reset it before a byte of an answer."""
    gone = (os.strerror(errno.ECONNRESET), os.strerror(errno.EPIPE))
    return (error.startswith("RemoteProtocolError: Server disconnected without sending a "
                             "response")
            or error.startswith("ReadError:") and any(words in error for words in gone))


def unreachable(url: str, verify: Verify = True, timeout: float = 5.0) -> str | None:
    """Why ``url``'s server cannot be reached, in one line (None: it can be, or it is not for
    this check to say: another scheme, a proxy in the way)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    proxies = urllib.request.getproxies()
    if parts.scheme in proxies and not urllib.request.proxy_bypass(parts.hostname):
        return None
    where = f"{parts.hostname}:{port}"
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout) as sock:
            if parts.scheme == "https":
                _handshake(sock, parts.hostname, verify, timeout)
    except socket.gaierror as exc:
        return f"name not resolved: {parts.hostname} ({exc.strerror or exc})"
    except ConnectionRefusedError:
        return f"connection refused: nothing listens on {where}"
    except ssl.SSLCertVerificationError as exc:
        return (f"TLS failure with {where}: the server's certificate is not trusted here "
                f"({exc.reason}: {exc.verify_message}): --cacert FILE trusts the CA that "
                "signed it, --insecure skips the check")
    except ssl.SSLError as exc:
        return f"TLS failure with {where}: {exc.reason or exc}"
    except TimeoutError:
        return f"no answer from {where} within {timeout:g} s (connecting)"
    except OSError as exc:
        return f"cannot connect to {where}: {exc.strerror or exc}"
    return None


def _handshake(sock: socket.socket, host: str, verify: Verify, timeout: float) -> None:
    if isinstance(verify, ssl.SSLContext):
        context = verify
    else:
        context = ssl.create_default_context()
        if verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    sock.settimeout(timeout)
    with context.wrap_socket(sock, server_hostname=host):
        pass
