"""The guest runner's choices (tests/guest.py), without booting it: which files run inside and
the command that runs them. Apart from tests/test_guest_cgroup2.py, so that the guest test run
alone is the only test of its session (tests/guest.py's start_early leaves it be then)."""

from __future__ import annotations

import pytest

from tests.guest import guest_test_files


def test_the_guest_runs_only_the_files_named() -> None:
    """THROTTLE_LAB_GUEST_FILES: those files' cgroup2 tests alone (one file in minutes); a
    name that is not a file with a cgroup2 test is an error that lists those that are."""
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
    assert command.count("tests/test_") == 1 and "-k 'usage and fork'" in command
