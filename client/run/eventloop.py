"""An open loop on one thread: a pool of ``http://`` connections and one ``select``.

The threaded open loop (``client.run.modes.OpenLoop``: one thread per connection) pays a thread
switch and a turn of the GIL for every request; past a few thousand requests a second that is
the client's own queue, not the service's. Here one thread does everything a worker did, for
every connection: it sends each request when it is due on an idle connection
(:meth:`client.run.wire.SocketSender.begin`), waits on all the connections at once
(``selectors``) until the next request is due or an answer arrives, and reads that answer with
the same parser (:meth:`~client.run.wire.SocketSender.finish`). A request due while every
connection is busy waits for one, and that wait is in its latency (it counts from the intended
send time), as in the threaded loop.

Used for open loops of plain ``http://`` requests to one origin (``--url``, or a targets file
on one server); replicas and ``https://`` keep the threaded loop.
"""

from __future__ import annotations

import selectors
import time
from collections import deque
from collections.abc import Sequence

from client.data.record import DEFAULT_RULE, RequestRecord
from client.data.status import StatusRule
from client.data.request import HttpRequest
from client.run.plan import LoadPlan, intended_send_ns
from client.run.recorder import Recorder, Tickets
from client.run.wire import SocketSender

__all__ = ["ConnectionPool", "eligible", "run_open_loop"]

_MAX_WAIT_S = 0.05   # wake at least this often, so a stop is seen promptly


def eligible(requests: Sequence[HttpRequest]) -> bool:
    """Whether one thread can send these: plain ``http://``, all to one origin."""
    return bool(requests) and all(r.url.startswith("http://") for r in requests) and \
        len({r.origin for r in requests}) == 1


class ConnectionPool:
    """The connections of the loop (one :class:`SocketSender` each); closed together."""

    def __init__(self, requests: Sequence[HttpRequest], headers: dict[str, str], count: int,
                 timeout: float, ok_status: StatusRule = DEFAULT_RULE) -> None:
        self.senders = [SocketSender(requests, headers, timeout=timeout, ok_status=ok_status)
                        for _ in range(count)]
        self.count = len(requests)   # request ``seq`` is the ``seq % count``-th

    def close(self) -> None:
        for sender in self.senders:
            sender.close()


def run_open_loop(pool: ConnectionPool, plan: LoadPlan, tickets: Tickets, recorder: Recorder,
                  run_start_ns: int, label: str | None = None) -> None:
    """Send ``plan``'s requests on ``pool`` as they fall due; every record to ``recorder``.
    ``label`` (``target``) names the record field that says which of the requests went."""
    assert plan.rate_rps is not None
    rate, stop = plan.rate_rps, recorder.stop
    idle: deque[SocketSender] = deque(pool.senders)
    busy = 0
    # select(2), not epoll: it waits to the microsecond (epoll counts whole milliseconds,
    # too coarse for a send time), and the pool is at most 64 connections
    selector = selectors.SelectSelector()
    clock = time.perf_counter_ns
    seq = tickets.take()
    due = run_start_ns + intended_send_ns(seq, rate) if seq is not None else 0
    try:
        while not stop.is_set():
            while seq is not None and idle and clock() >= due:
                sender = idle.pop()
                which = seq % pool.count
                failed = sender.begin(seq, run_start_ns, due - run_start_ns, which)
                if failed is None:
                    sock = sender.socket
                    assert sock is not None
                    selector.register(sock, selectors.EVENT_READ, (sender, which))
                    busy += 1
                else:
                    _keep(recorder, failed, label, which)
                    idle.append(sender)
                seq = tickets.take()
                if seq is not None:
                    due = run_start_ns + intended_send_ns(seq, rate)
            if seq is None and not busy:
                return
            wait = _MAX_WAIT_S
            if seq is not None and idle:
                wait = min(wait, max(0.0, (due - clock()) / 1e9))
            for key, _ in selector.select(wait):
                sender, which = key.data
                selector.unregister(key.fileobj)
                busy -= 1
                _keep(recorder, sender.finish(), label, which)
                idle.append(sender)
    finally:
        selector.close()


def _keep(recorder: Recorder, record: RequestRecord, label: str | None, which: int) -> None:
    if label is not None:
        setattr(record, label, which)
    recorder.add(record)
