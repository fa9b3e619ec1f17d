"""No folder in a cgroup file system: there a ``mkdir`` makes a cgroup. Every command that
writes files refuses such a ``--data-dir`` (or another output folder) in one line, exit 2,
before it makes anything; the place is found from ``/proc/self/mountinfo`` for the folder or
its nearest existing parent. On the host's real cgroup file system: the test asserts that no
group was made there (and removes one if it was)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.data.files import FileWriteError, writing
from client.data.folders import make_folder
from cpuquota.cgroupfs import cgroup_mount_holding, mount_holding, parse_mountinfo
from tests.support import ROOT, require, usage_error

RUN = str(ROOT / "raw-data" / "kernel-0.3.csv")   # a committed run with its metadata

MOUNTINFO = """\
23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
41 1 0:40 / /data rw - ext4 /dev/vdb rw
42 41 0:41 / /data/cg rw - cgroup2 cgroup2 rw
43 41 0:42 / /data/cg rw - tmpfs tmpfs rw
"""


def test_the_mount_that_holds_a_path() -> None:
    def fstype(path: str) -> str | None:
        mount = mount_holding(path, MOUNTINFO)
        return None if mount is None else mount.fstype
    assert fstype("/sys/fs/cgroup/cpu,cpuacct/x/y") == "cgroup"
    assert fstype("/sys/fs/cgroup/cpu,cpuacct") == "cgroup"
    assert fstype("/sys/fs/cgroup/unified") == "cgroup2"
    assert fstype("/sys/fs/cgroup/cpu,cpuacctx") == "tmpfs"   # a name that only begins alike
    assert fstype("/sys/fs/cgroup") == "tmpfs" and fstype("/sys/kernel") == "sysfs"
    assert fstype("/data/cg/x") == "tmpfs"     # the last mounted on a point hides the others
    assert fstype("/data/run") == "ext4" and fstype("/home") is None
    assert [m.mount_point for m in parse_mountinfo(MOUNTINFO)] == [  # still the cgroup ones
        "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/unified", "/data/cg"]


def test_no_mountinfo_no_refusal(tmp_path: Path) -> None:
    """Where /proc cannot tell (not Linux), a folder is a folder."""
    assert cgroup_mount_holding("/sys/fs/cgroup/x", proc=tmp_path / "nothing") is None
    assert cgroup_mount_holding(tmp_path / "runs") is None   # a disk's folder, on this host


@pytest.fixture
def in_cgroup_fs() -> Iterator[Path]:
    """A folder that does not exist yet, inside the host's first cgroup mount (where a mkdir
    would make a group); removed at the end if the test made it after all."""
    try:
        mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    except OSError:
        mounts = []
    require(bool(mounts), "no cgroup file system mounted (/proc/self/mountinfo)")
    group = Path(mounts[0].mount_point) / f"throttle-lab-folder-{uuid.uuid4().hex[:8]}"
    try:
        yield group / "runs"
    finally:
        made = group.exists()
        for folder in (group / "runs", group):
            if folder.exists():
                os.rmdir(folder)   # an empty group goes with rmdir
        assert not made, f"{group} was made in the cgroup file system"


def test_no_folder_is_made_there(in_cgroup_fs: Path) -> None:
    mount = cgroup_mount_holding(in_cgroup_fs)
    assert mount is not None and in_cgroup_fs.is_relative_to(mount.mount_point)
    for attempt in (lambda: make_folder(in_cgroup_fs),
                    lambda: writing(in_cgroup_fs / "x.csv").__enter__()):
        with pytest.raises(FileWriteError) as error:
            attempt()
        assert str(error.value) == (f"cannot write in {in_cgroup_fs}: {mount.mount_point} is a "
                                    "cgroup file system, where a folder made is a cgroup (give "
                                    "a folder on a disk)")
    assert not in_cgroup_fs.parent.exists()


@pytest.mark.parametrize("argv", [
    ["run", "--url", "http://127.0.0.1:9/", "--requests", "1", "--data-dir", "{dir}"],
    ["run", "--url", "http://127.0.0.1:9/", "--requests", "1", "--pictures-dir", "{dir}"],
    ["sweep", "--backend", "inprocess", "--cpus", "1", "--requests", "1", "--data-dir", "{dir}"],
    ["advise", "--p99", "30", "--pictures-dir", "{dir}"],
    ["record", "/sys/fs/cgroup/cpu", "--duration", "1", "--data-dir", "{dir}"],
    ["import", RUN, "--timeline", "t.cgroup.csv", "--data-dir", "{dir}"],
    ["cluster", "-A", "--data-dir", "{dir}"],
    ["cluster", "-A", "--picture", "{dir}"],
    ["plot", RUN, "--pictures-dir", "{dir}"],
    ["plot", RUN, "-o", "{dir}/a.png"],
    ["compare", RUN, RUN, "-o", "{dir}/c.png"],
    ["report", RUN, "--predict", "-o", "{dir}/r.png"],
], ids=lambda argv: "-".join(w.lstrip("-") for w in argv if w.startswith("-") or w.isalpha())
    if isinstance(argv, list) else None)
def test_every_command_refuses_it_in_one_line(in_cgroup_fs: Path, tmp_path: Path,
                                              argv: list[str],
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error([word.replace("{dir}", str(in_cgroup_fs)) for word in argv], tmp_path,
                       monkeypatch, capsys)
    assert f"{in_cgroup_fs}: " in line and "is a cgroup file system" in line, line
    assert not in_cgroup_fs.parent.exists() and not any(tmp_path.iterdir())
