"""tests.support: the helpers stop what a test started by its pid, also when it timed out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import http_timing


def processes_in(folder: Path) -> list[int]:
    """The pids whose working directory is ``folder`` (what http-timing starts inherits it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == folder:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs /proc")
def test_a_timed_out_http_timing_stops_and_so_do_the_services_it_started(
        tmp_path: Path) -> None:
    """A sweep that would run for hours, cut by the helper's timeout: the helper stops
    http-timing by its pid (SIGTERM first), which stops the burn-service it started; nothing
    started in the test's folder is left, and TimeoutExpired says so to the test. The timeout
    leaves even a busy machine the time to start the service and send a first request."""
    with pytest.raises(subprocess.TimeoutExpired):   # at 5 %: the wait costs little CPU
        http_timing("sweep", "--backend", "inprocess", "--cpus", "0.05", "--requests",
                    "10000000", "--iterations", "100", "--name", "cut", cwd=tmp_path,
                    timeout=20)
    assert processes_in(tmp_path.resolve()) == []
    # the run was under way (the service had answered): so there was something to stop
    assert list((tmp_path / "raw-data").glob("cut-*.csv"))


@pytest.mark.parametrize("argv", [
    pytest.param(["report", "RAW/calibrated-kernel-0.3.csv", "--json"], id="report-json"),
    pytest.param(["report", "RAW/calibrated-kernel-0.3.csv", "--predict"], id="report-predict"),
    pytest.param(["report", "RAW/no-such-run.csv"], id="missing-file"),
    pytest.param(["predict", "--service-ms", "5", "--cpus", "0.3"], id="predict"),
    pytest.param(["report", "--bogus"], id="usage"),
])
def test_in_process_http_timing_is_the_console_script(tmp_path: Path, argv: list[str]) -> None:
    """What the v2 guest runs in its own process (``http_timing_here``) says what the console
    script says: the same exit status, stdout and stderr, for a run, an error and a usage
    error."""
    from tests.support import ROOT, http_timing_here

    args = [a.replace("RAW", str(ROOT / "raw-data")) for a in argv]
    script = http_timing(*args, cwd=tmp_path)
    here = http_timing_here(*args, cwd=tmp_path)
    assert (here.returncode, here.stdout, here.stderr) == (
        script.returncode, script.stdout, script.stderr)
    assert os.getcwd() != str(tmp_path)   # put back
