"""The load modes behind one interface: workers that send, one recorder that keeps.

Every mode (``client.run.plan``) runs the same way: W worker threads, each with its own
connection (a :class:`client.run.http.Sender`, the request built before the clock starts), take
request numbers from one :class:`Tickets` and hand each completed request to one
:class:`Recorder`; the calling thread waits for them, so Ctrl-C/SIGTERM stop every mode alike
(what completed is kept, nothing reaches ``on_record`` afterwards). A mode only says how many
workers it needs and what each does:

- **sequential**: one worker, one request after another (the original).
- **closed loop**: C workers, each sending its next request as soon as the previous one is
  answered (until ``requests``, or ``duration_s`` has passed). When the server stalls the
  workers wait with it: a closed loop shows what the server gives, not what users see.
- **open loop**: request ``i`` is due ``i / R`` s after the start; a pool of connections
  (``open_loop_workers``) sends each when it is due and a connection is free. Its latency runs
  from the **intended** send time (``scheduled_ns``), so a request held back because a stall
  kept every connection busy counts that wait: no coordinated omission (as wrk2).

A new mode is one class with ``workers`` and ``work`` and one line in ``MODES``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast


from client.data.metadata import LoadMode
from client.data.record import DEFAULT_RULE, RequestRecord
from client.data.status import StatusRule
from client.data.request import HttpRequest
from client.run.eventloop import ConnectionPool, eligible, run_open_loop
from client.run.http import Requests, Sender, Verify, as_requests, make_senders, request_headers
from client.run.plan import LoadPlan, intended_send_ns, open_loop_workers
from client.run.recorder import Recorder, RunOutcome, Tickets

__all__ = ["MODES", "Mode", "Shift", "time_plan"]

_JOIN_POLL_S = 0.1  # the main thread wakes this often, so Ctrl-C/SIGTERM are handled promptly


@dataclass(frozen=True)
class Shift:
    """What one worker needs: its sender, the shared tickets and recorder, the start."""

    sender: Sender
    tickets: Tickets
    recorder: Recorder
    run_start_ns: int


class Mode(Protocol):
    def workers(self, plan: LoadPlan) -> int:
        """How many connections (threads) the plan needs."""

    def work(self, plan: LoadPlan, shift: Shift) -> None:
        """One worker's loop: take tickets, send, hand records to the recorder."""


class ClosedLoop:
    """Each worker sends its next request when the previous one is answered."""

    def workers(self, plan: LoadPlan) -> int:
        return plan.concurrency

    def work(self, plan: LoadPlan, shift: Shift) -> None:
        deadline = (None if plan.duration_s is None
                    else shift.run_start_ns + round(plan.duration_s * 1e9))
        stop = shift.recorder.stop
        began, waited, sent = time.perf_counter_ns(), 0, 0
        try:
            while not stop.is_set():
                if deadline is not None and time.perf_counter_ns() >= deadline:
                    return
                seq = shift.tickets.take()
                if seq is None:
                    return
                record = shift.sender.send(seq, shift.run_start_ns)
                waited += record.latency_ns
                sent += 1
                shift.recorder.add(record)
        finally:  # the client's own time: all of this worker's but the waits for answers
            shift.recorder.note_own_time(time.perf_counter_ns() - began - waited, sent)


class Sequential(ClosedLoop):
    """The original: one worker, one request after another."""

    def workers(self, plan: LoadPlan) -> int:
        return 1


class OpenLoop:
    """Request ``i`` due at ``i / rate``, latency from then."""

    def workers(self, plan: LoadPlan) -> int:
        assert plan.rate_rps is not None and plan.requests is not None
        return min(open_loop_workers(plan.rate_rps), plan.requests)

    def work(self, plan: LoadPlan, shift: Shift) -> None:
        assert plan.rate_rps is not None
        stop = shift.recorder.stop
        while not stop.is_set():
            seq = shift.tickets.take()
            if seq is None:
                return
            scheduled = intended_send_ns(seq, plan.rate_rps)
            wait_ns = shift.run_start_ns + scheduled - time.perf_counter_ns()
            if wait_ns > 0 and stop.wait(wait_ns / 1e9):
                return  # stopped while waiting: this request was never sent
            shift.recorder.add(shift.sender.send(seq, shift.run_start_ns, scheduled))


MODES: dict[LoadMode, Mode] = {
    LoadMode.SEQUENTIAL: Sequential(),
    LoadMode.CLOSED_LOOP: ClosedLoop(),
    LoadMode.OPEN_LOOP: OpenLoop(),
}


def time_plan(
    url: Requests,
    plan: LoadPlan,
    on_record: Callable[[RequestRecord], None],
    *,
    new_connection: bool = False,
    timeout: float = 30.0,
    max_consecutive_failures: int = 5,
    outcome: RunOutcome | None = None,
    connections: int | None = None,
    on_start: Callable[[int], None] | None = None,
    wrap: Callable[[Sender], Sender] | None = None,
    verify: Verify = True,
    label: str = "replica",
    ok_status: StatusRule = DEFAULT_RULE,
) -> RunOutcome:
    """Run ``plan`` against ``url`` (a URL or a ``client.data.request.HttpRequest``; several:
    sent round-robin, one keep-alive connection per origin and worker, each record saying
    which in its ``label`` field: ``replica`` or ``target``); ``on_record`` gets each completed request,
    one at a time, in completion order. Transport failures are recorded (status 0 and the error) and the run
    goes on, until ``max_consecutive_failures`` in a row (0: never stop early). Pass
    ``outcome`` to keep what was collected when the caller interrupts the run
    (``KeyboardInterrupt`` propagates). ``connections`` overrides the mode's worker count;
    ``on_start(run_start_ns)`` is called at the run's first instant, before any request;
    ``wrap`` may wrap each worker's sender (e.g. to read counters around each request);
    ``verify`` checks an ``https://`` server's certificate (see ``client.run.http.tls_verify``);
    ``ok_status``: which statuses are successes (``client.data.status``)."""
    outcome = outcome if outcome is not None else RunOutcome()
    mode = MODES[plan.mode]
    count = connections or mode.workers(plan)
    recorder = Recorder(on_record, outcome, max_consecutive_failures)
    requests = as_requests(url)
    if (plan.mode is LoadMode.OPEN_LOOP and wrap is None and eligible(requests)
            and not ok_status.follow  # following blocks: one thread each (below)
            and (isinstance(url, (str, HttpRequest)) or label == "target")):
        # one thread, one select, a pool of connections (client.run.eventloop)
        pool = ConnectionPool(requests, request_headers(new_connection), count, timeout,
                              ok_status)
        tag = None if isinstance(url, (str, HttpRequest)) else label
        _run_workers([cast(Sender, pool)], lambda shift: run_open_loop(
            pool, plan, shift.tickets, shift.recorder, shift.run_start_ns, tag),
            Tickets(plan.requests), recorder, on_start)
        return outcome
    senders = make_senders(url, count, new_connection=new_connection, timeout=timeout,
                           verify=verify, label=label, ok_status=ok_status)
    if wrap is not None:
        senders = [wrap(sender) for sender in senders]
    _run_workers(senders, lambda shift: mode.work(plan, shift), Tickets(plan.requests),
                 recorder, on_start)
    return outcome


def _run_workers(senders: list[Sender], work: Callable[[Shift], None], tickets: Tickets,
                 recorder: Recorder, on_start: Callable[[int], None] | None = None) -> None:
    """Run ``work`` in one thread per sender and wait for them in a way Ctrl-C/SIGTERM can
    interrupt. The clock starts when every worker is ready, so setting up is never counted
    in a latency nor delays the first due requests of an open loop."""
    errors: list[BaseException] = []
    clock: list[int] = []

    def start() -> None:
        clock.append(time.perf_counter_ns())
        if on_start is not None:
            on_start(clock[0])

    ready = threading.Barrier(len(senders), action=start)

    def body(sender: Sender) -> None:
        try:
            ready.wait()
            work(Shift(sender, tickets, recorder, clock[0]))
        except threading.BrokenBarrierError:
            pass  # another worker failed before the start; its error is reported
        except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
            errors.append(exc)
            recorder.stop.set()
            ready.abort()
        finally:
            sender.close()

    threads = [threading.Thread(target=body, args=(sender,), name=f"http-timing-worker-{i}",
                                daemon=True) for i, sender in enumerate(senders)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(_JOIN_POLL_S)
    finally:
        # Interrupted or done: nothing more reaches on_record. Workers still waiting for an
        # answer are daemons; they end with their request (or with the process).
        recorder.freeze()
        ready.abort()
    if errors:
        raise errors[0]

