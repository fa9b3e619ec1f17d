"""A CPU limit of 0 means one thing everywhere: nothing. Every option that takes a limit
refuses 0 in one line that says what to give instead (the option left out, ``none`` in a
list), exit 2, before anything starts or is written; no limit stays the option left out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from service.config import Settings, SettingsError
from tests.support import BIN, ROOT, http_timing
from tests.test_commands_import import make_timeline

ABOVE = "a limit must be above 0 CPU"
RUN = str(ROOT / "raw-data" / "kernel-0.3.csv")   # a committed run with its metadata


@pytest.mark.parametrize(("argv", "env", "line"), [
    (["--cpus", "0"], {}, f"--cpus 0: {ABOVE}; omit --cpus for no limit"),
    (["--cpus", "0.0", "--period-ms", "50"], {}, f"--cpus 0: {ABOVE}; omit --cpus for no limit"),
    ([], {"BURN_SERVICE_CPUS": "0"},
     f"BURN_SERVICE_CPUS=0: {ABOVE}; unset BURN_SERVICE_CPUS for no limit"),
    (["--cpu-limit", "0"], {},
     "--cpu-limit 0: a limit must be above 0 %; omit --cpu-limit for no limit"),
    ([], {"BURN_SERVICE_CPU_LIMIT": "0.0"}, "BURN_SERVICE_CPU_LIMIT=0.0: a limit must be above "
     "0 %; unset BURN_SERVICE_CPU_LIMIT for no limit"),
])
def test_burn_service_refuses_a_limit_of_0(tmp_path: Path, argv: list[str],
                                           env: dict[str, str], line: str) -> None:
    result = subprocess.run([str(BIN / "burn-service"), *argv], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path, env={**os.environ, **env})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == f"burn-service: error: {line}"   # after its usage
    assert "Traceback" not in result.stderr and not any(tmp_path.iterdir())


def test_cpu_quota_refuses_a_limit_of_0(tmp_path: Path) -> None:
    result = subprocess.run([str(BIN / "cpu-quota"), "--cpus", "0", "--", "touch", "ran"],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (f"cpu-quota: error: --cpus 0: {ABOVE}; run the "
                                              "command without cpu-quota for no limit")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize(("argv", "line"), [
    (["report", RUN, "--predict", "--cpus", "0"],
     f"http-timing report: --cpus 0: {ABOVE}; omit --cpus for the run's own limit "
     "(see http-timing report --help)"),
    (["predict", "--service-ms", "5", "--cpus", "0"],
     f"http-timing predict: --cpus 0: {ABOVE}; predict models a limit (with --timeline, none "
     "in the list is no limit) (see http-timing predict --help)"),
    (["predict", "--timeline", "t.cgroup.csv", "--cpus", "0.5,0"],
     f"http-timing: --cpus 0: {ABOVE}; write none for no limit (e.g. --cpus none,1,0.3)"),
    (["sweep", "--backend", "inprocess", "--cpus", "1,0,0.1", "--requests", "1"],
     f"http-timing: --cpus 0: {ABOVE}; write none for no limit (e.g. --cpus none,1,0.3)"),
    (["sweep", "--backend", "inprocess", "--cpus", "0.0", "--requests", "1"],
     f"http-timing: --cpus 0.0: {ABOVE}; write none for no limit (e.g. --cpus none,1,0.3)"),
])
def test_http_timing_refuses_a_limit_of_0(tmp_path: Path, argv: list[str], line: str) -> None:
    make_timeline(tmp_path)
    before = sorted(tmp_path.iterdir())
    result = http_timing(*argv, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", line + "\n")
    assert sorted(tmp_path.iterdir()) == before   # nothing started, nothing written


def test_none_is_no_limit_in_a_list(tmp_path: Path) -> None:
    make_timeline(tmp_path)
    result = http_timing("predict", "--timeline", "t.cgroup.csv", "--cpus", "none,0.5",
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_no_limit_is_the_option_left_out() -> None:
    """The settings' 0 is the default's "no limit", never given: it does not travel to the
    worker processes either (their environment would refuse it)."""
    default = Settings.from_env({})
    assert (default.cpus, default.cpu_limit) == (0, 0)
    assert not {"BURN_SERVICE_CPUS", "BURN_SERVICE_CPU_LIMIT"} & set(default.to_env())
    assert Settings.from_env(default.to_env()) == default
    limited = Settings.from_env({"BURN_SERVICE_CPU_LIMIT": "30"}, cpus=0.5)
    assert Settings.from_env(limited.to_env()) == limited
    with pytest.raises(SettingsError, match=r"^--cpus 0: a limit must be above 0 CPU; omit"):
        Settings.from_env({}, cpus=0.0)
    with pytest.raises(SettingsError, match=r"^--cpus must be in \(0, 1024\] \(got -1\)"):
        Settings.from_env({}, cpus=-1)
