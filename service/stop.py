"""Stopping on Ctrl-C (SIGINT) or SIGTERM at any moment, without a traceback.

``burn-service`` and ``cpu-quota`` call :func:`stop_on_signals` first thing: from then on the
first SIGINT or SIGTERM raises :class:`Stopped` where the program is (an import, the
calibration, making the quota group), the program cleans up on its way out and exits with
``128 + N`` (130 for SIGINT, 143 for SIGTERM), what a shell reports for a command that signal
N ended. Later signals are taken as the same request to stop. While uvicorn serves, its own
handlers take the signals (a graceful shutdown) and hand them back here at its end.

The child that ``burn-service --cpus`` runs inside its quota group starts with SIGINT and
SIGTERM blocked (:data:`STOP_SIGNALS`, see ``service.cpu_quota``); :func:`stop_on_signals`
unblocks them once its handler is in, so a signal forwarded while the interpreter itself
starts waits for it. The one moment this cannot cover is the start of the process a shell
runs, before its first line: the interpreter and the imports of ``service.cli`` or
``service.cpu_quota`` (70-120 ms on this project's 2-core VM), where a SIGINT is Python's
(a ``KeyboardInterrupt``); nothing is made or measured yet then.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

__all__ = ["STOP_SIGNALS", "Stopped", "stop_on_signals", "until_stopped"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """A stop signal arrived; ``exit_code`` is ``128 + N``, as a shell reports signal N.

    A ``BaseException`` (as ``KeyboardInterrupt`` is), so that no ``except Exception`` takes
    it for an error, and not a ``KeyboardInterrupt``, which uvicorn swallows."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def stop_on_signals() -> None:
    """From now on the first SIGINT or SIGTERM raises :class:`Stopped` (later ones do
    nothing: the program is already on its way out); unblock them if they were blocked."""
    stopping: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not stopping:
            stopping.append(signum)
            raise Stopped(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def until_stopped(body: Callable[[], int]) -> int:
    """``body()``'s exit code, or ``128 + N`` when signal N stops it (handlers in first, the
    ones before put back after: a caller in the same process, a test, keeps its own)."""
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    try:
        stop_on_signals()   # first: a Ctrl-C from here on ends it without a traceback
        return body()
    except Stopped as stop:
        return stop.exit_code
    finally:
        for sig, handler in before.items():
            if handler is not None:   # None: not set from Python, nothing to put back
                signal.signal(sig, handler)
