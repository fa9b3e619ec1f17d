"""Putting things back without being cut short: Ctrl-C and SIGTERM held off while a restore
runs (the limits and replica counts a command changed)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ignoring_signals() -> Iterator[None]:
    """SIGINT and SIGTERM ignored inside, the previous handlers back after; a no-op off the
    main thread, where Python cannot set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
