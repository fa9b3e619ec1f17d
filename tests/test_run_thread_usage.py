"""client.run.thread_usage on a fake /proc: how many threads it follows at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.run.thread_usage import ThreadUsage
from tests.test_threads import MS, process, task


def test_past_the_cap_a_threads_cpu_is_its_process_s_and_no_file_is_left_open(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group as big as a machine (the root group) would take every file descriptor: past
    MAX_THREADS a new thread is not opened, its CPU goes to its process by name, it says so
    once, and every file it opened is closed at the end."""
    import client.run.thread_usage as module
    monkeypatch.setattr(module, "MAX_THREADS", 2)
    monkeypatch.setattr(module.os, "sysconf", lambda name: 100)
    proc, group = tmp_path / "proc", tmp_path / "group"
    group.mkdir()
    (group / "cgroup.procs").write_text("10\n")
    process(proc, 10, "java", 60 * MS)
    for tid, ns in ((11, 10), (12, 20), (13, 30)):
        task(proc, 10, tid, f"exec-{tid}", ns * MS)
    opened: list[int] = []
    real_open = module.os.open
    monkeypatch.setattr(module.os, "open", lambda *a: opened.append(real_open(*a)) or opened[-1])
    threads = ThreadUsage([group], proc)
    assert threads.read().cpu_ns == {}
    assert len(opened) == 4   # two threads, two files each
    for tid, ns in ((11, 15), (12, 25), (13, 40)):
        task(proc, 10, tid, f"exec-{tid}", ns * MS)
    process(proc, 10, "java", 80 * MS)
    reading = threads.read(5)
    assert reading.cpu_ns == {"exec-N": 10 * MS, "java (ended threads)": 10 * MS}
    assert threads.problem == ("the group has more than 2 threads: the others' CPU is counted "
                               "by process name")
    threads.close()
    with pytest.raises(OSError):
        module.os.fstat(opened[0])
