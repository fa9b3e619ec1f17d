"""client.run.recorder: one recorder and one way to stop, for every load mode."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from client.data.record import RequestRecord
from client.run.recorder import (Recorder, RunOutcome, Terminated, Tickets, files_first,
                                 stop_on_terminate)


def record(seq: int, status: int = 200) -> RequestRecord:
    return RequestRecord(seq, seq, 1, status, error="" if status else "ConnectError")


def test_a_record_is_kept_exactly_when_on_record_saw_it() -> None:
    seen: list[int] = []
    outcome = RunOutcome()
    recorder = Recorder(lambda r: seen.append(r.seq), outcome, max_consecutive_failures=0)
    recorder.add(record(0))
    recorder.add(record(1))
    recorder.freeze()
    recorder.add(record(2))  # after the freeze: neither kept nor handed over
    assert seen == [0, 1] and [r.seq for r in outcome.records] == [0, 1]
    assert recorder.stop.is_set() and outcome.reached and outcome.stop_reason is None


def test_failures_in_a_row_stop_the_run_once() -> None:
    outcome = RunOutcome()
    recorder = Recorder(lambda r: None, outcome, max_consecutive_failures=3)
    for seq, status in enumerate([0, 0, 200, 0, 0, 0, 0]):
        recorder.add(record(seq, status))
    assert [r.seq for r in outcome.records] == [0, 1, 2, 3, 4, 5]
    assert outcome.stop_reason == "stopped after 3 consecutive connection failures"
    assert recorder.stop.is_set()


def test_freeze_waits_for_the_record_being_handed_over() -> None:
    entered, release = threading.Event(), threading.Event()
    done: list[int] = []

    def slow(r: RequestRecord) -> None:
        entered.set()
        release.wait(5)
        done.append(r.seq)

    recorder = Recorder(slow, RunOutcome(), 0)
    worker = threading.Thread(target=recorder.add, args=(record(0),))
    worker.start()
    entered.wait(5)
    freezer = threading.Thread(target=recorder.freeze)
    freezer.start()
    freezer.join(0.2)
    assert freezer.is_alive()  # still waiting for the row being written
    release.set()
    freezer.join(5)
    worker.join(5)
    assert done == [0]


def test_tickets_are_handed_out_once_each() -> None:
    tickets = Tickets(50)
    taken: list[int] = []

    def take() -> None:
        while (seq := tickets.take()) is not None:
            taken.append(seq)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert sorted(taken) == list(range(50))
    unlimited = Tickets(None)
    assert [unlimited.take() for _ in range(3)] == [0, 1, 2]


def test_sigterm_is_a_keyboard_interrupt_inside_only() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), stop_on_terminate():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes
            pass
    assert signal.getsignal(signal.SIGTERM) is before
    assert issubclass(Terminated, KeyboardInterrupt)


def test_files_first_holds_off_ctrl_c() -> None:
    previous = signal.getsignal(signal.SIGINT)
    with files_first():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # ignored: no KeyboardInterrupt
    assert signal.getsignal(signal.SIGINT) is previous
