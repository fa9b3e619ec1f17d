"""The guest runner's choices (tests/guest.py), without booting it: which files run inside, the
command that runs them and the summary of its run."""

from __future__ import annotations


import pytest

from tests.guest import guest_test_files


def test_the_guest_runs_only_the_files_named() -> None:
    """THROTTLE_LAB_GUEST_FILES: those files' cgroup2 tests alone (one file in minutes); a
    name that is not a file with a cgroup2 test is an error that lists those that are."""
    from tests.agent_support import CACHE_HOME
    from tests.guest import _guest_command
    from tests.support import ROOT

    every = guest_test_files(chosen="")
    assert ROOT / "tests" / "test_usage_any_shape.py" in every and len(every) > 3
    one = guest_test_files(chosen="tests/test_usage_any_shape.py")
    assert one == [ROOT / "tests" / "test_usage_any_shape.py"]
    with pytest.raises(ValueError, match="test_docs.py is not a test file with a cgroup2 test"):
        guest_test_files(chosen="tests/test_usage_any_shape.py tests/test_docs.py")
    command = _guest_command(ROOT / "share", one, "true", "usage and fork")
    assert "PYTHONUNBUFFERED=1" in command and "faulthandler_timeout=" in command
    assert f"XDG_CACHE_HOME={CACHE_HOME}" in command   # where the agent was built (precompile)
    assert command.count("tests/test_") == 1 and "-k 'usage and fork'" in command


def test_the_summary_is_the_guests_time_and_its_slowest_tests() -> None:
    from tests.guest import GuestRun, summary_lines

    output = ("tests/test_cgroup.py::test_a PASSED\n"
              "============================= slowest 25 durations ==============================\n"
              "189.83s call     tests/test_commands_quota_change.py::test_a_quota_raised_mid_run[v2]\n"
              "3.10s setup    tests/test_cpu_quota.py::test_b[v2]\n"
              "=========================== short test summary info ============================\n"
              "PASSED tests/test_cgroup.py::test_a\n")
    run = GuestRun(0, 1251.4, "", 0, output, [], ["a", "b"], [])
    assert summary_lines(run) == [
        "the cgroup v2 guest: 1251 s from its boot, 2 passed, 0 failed, 0 skipped",
        "189.83s call     tests/test_commands_quota_change.py::test_a_quota_raised_mid_run[v2]",
        "3.10s setup    tests/test_cpu_quota.py::test_b[v2]"]
    assert summary_lines(GuestRun(None, 900.0, "", None, "", [], [], [])) == [
        "the cgroup v2 guest: 900 s from its boot, 0 passed, 0 failed, 0 skipped"]
    assert summary_lines(GuestRun(0, 700.0, "", 0, "", [], ["a"], [], 61.6))[0] == (
        "the cgroup v2 guest: 700 s from its boot (its tests began 62 s after the boot), "
        "1 passed, 0 failed, 0 skipped")
