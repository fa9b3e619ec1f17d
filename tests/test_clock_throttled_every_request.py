"""A load throttled in every request: the clock check never moves the throttling off the
requests (``client.analysis.clock.HOLD_KEPT``). On the kernel's capture in
tests/data/ingress (an Ingress's log of Unix times on the host's own clock), the stalls line
up best 0.843 s off, between the requests; the stated clock is kept, said with the reason,
and the marks add up to the group's own throttled time across the requests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from client.data.files import read_run
from tests.test_commands_import_tools import UPSTREAMINFO_MSEC

DATA = Path(__file__).parent / "data" / "ingress"
POD = "127.0.0.1:29866"


def test_a_line_up_that_moves_the_throttling_off_the_requests_is_not_applied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from client.commands import main

    for name in ("access.log", "t.cgroup.csv", "t.json"):
        shutil.copy(DATA / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    assert main(["import", "access.log", "--timeline", "t.cgroup.csv", "--log-format",
                 UPSTREAMINFO_MSEC, "--upstream", POD, "--name", "ingress"]) == 0
    out = capsys.readouterr().out
    check = next(line for line in out.splitlines() if line.startswith("clock check"))
    assert "at a shift of +0.843 s (confidence high" in check, check
    assert ("; the line-up at +0.843 s is not applied: it holds the requests 62% as long as"
            in check), check
    meta = json.loads((tmp_path / "raw-data" / "ingress.json").read_text())
    assert meta["imported"]["aligned_s"] == 0, meta["imported"]
    run = read_run(tmp_path / "raw-data" / "ingress.csv")
    assert run.timeline is not None
    records = run.records
    first, last = min(r.start_ns for r in records), max(r.end_ns for r in records)
    before = max((s for s in run.timeline if s.t_ns <= first), key=lambda s: s.t_ns)
    after = min((s for s in run.timeline if s.t_ns >= last), key=lambda s: s.t_ns)
    group_ns = after.throttled_ns - before.throttled_ns
    marks = sum(r.cgroup_throttled_ns or 0 for r in records)
    # one request at a time, the group idle between its requests: its throttled time is theirs
    assert marks == pytest.approx(group_ns, rel=0.1), (marks, group_ns)
