"""The tests marked ``cgroup2``, on a real cgroup v2 kernel: one guest booted under qemu
(tests/guest.py) runs them all; this host test fails listing the ones that failed inside.

The host mounts the cpu controller on cgroup v1, so the marked tests are deselected here
(tests/conftest.py) and only they run in the guest. On a laptop without qemu, a kernel or
root this skips with the reason; under CI=true a guest that cannot boot fails.
Marked ``guest``: ``pytest -m guest`` runs it alone (``make test`` does, beside the host's
tests: scripts/test.sh); only some files in the guest:
``THROTTLE_LAB_GUEST_FILES="tests/test_usage_any_shape.py"`` (and pytest's ``-k`` in the guest:
``THROTTLE_LAB_GUEST_K``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.guest import (SUMMARY, guest_test_files, missing_for_guest, run_guest_pytest,
                         summary_lines)
from tests.support import require

# the whole guest step (boot + tests), a hang guard: under qemu's emulation beside the host's
# tests it took 1,150-1,755 s on a 2-core Xeon VM (docs/benchmarks.md, CI time); CI has 90 min
BOOT_AND_RUN_S = float(os.environ.get("THROTTLE_LAB_GUEST_TIMEOUT", "2700"))


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@pytest.mark.guest
@pytest.mark.timeout(BOOT_AND_RUN_S + 60)
def test_cgroup2_tests_pass_in_a_v2_guest(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    require(sys.platform.startswith("linux"), "the cgroup v2 guest needs Linux and qemu")
    require(os.geteuid() == 0, "booting the guest's kernel from /boot needs root here")
    missing = missing_for_guest()
    require(missing is None, f"cannot boot the cgroup v2 guest: {missing}")
    files = guest_test_files()
    assert files, "no test is marked cgroup2"
    run = run_guest_pytest(tmp_path / "share", files, timeout=BOOT_AND_RUN_S)
    request.config.stash[SUMMARY] = summary_lines(run)
    print(f"guest: {run.seconds:.0f} s, {len(run.passed)} passed, {len(run.failed)} failed, "
          f"{len(run.skipped)} skipped in {len(files)} files")
    # what the guest's tests printed (their figures): shown by pytest -rA, or with a failure
    print(f"--- the guest's pytest:\n{run.pytest_output}")
    if run.pytest_status is None:
        why = ("killed after the time limit" if run.exit_code is None
               else f"vng exited with {run.exit_code}")
        require(bool(run.pytest_output),
                f"the cgroup v2 guest did not start pytest ({why}): {_tail(run.output, 15)}")
        # the stacks a slow test left (faulthandler_timeout), then the guest's console
        pytest.fail(f"the guest's pytest did not finish ({why}) after {run.seconds:.0f} s; "
                    f"its output:\n{_tail(run.pytest_output, 150)}\n--- the guest's console:\n"
                    f"{_tail(run.output, 20)}")
    assert not run.failed, (f"failed in the cgroup v2 guest: {', '.join(run.failed)}\n"
                            f"{_tail(run.pytest_output, 80)}")
    assert run.pytest_status == 0, f"guest pytest exited {run.pytest_status}:\n" \
                                   f"{_tail(run.pytest_output)}"
    assert run.passed, f"nothing ran in the guest:\n{_tail(run.pytest_output)}"
    if os.environ.get("CI", "").lower() == "true":
        assert not run.skipped, f"skipped in the guest under CI=true: {', '.join(run.skipped)}"

