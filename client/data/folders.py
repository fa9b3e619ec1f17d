"""The folders the commands write in, made only where a folder is a folder.

In a cgroup file system (``/sys/fs/cgroup/...``) a ``mkdir`` makes a cgroup, not a folder,
and no file can be written there: ``--data-dir /sys/fs/cgroup/cpu/x`` would leave a cgroup
behind and then fail. :func:`make_folder` refuses such a place in one line before it makes
anything; every writer makes its folder through it (``client.data.files.writing`` too), and
``folder_problem`` checks the same before a run.
"""

from __future__ import annotations

import os
from pathlib import Path

from client.data.record import RawDataError
from cpuquota.cgroupfs import cgroup_mount_holding

__all__ = ["FileWriteError", "cgroup_fs_problem", "folder_problem", "make_folder"]


class FileWriteError(RawDataError):
    """A file that cannot be written: one line naming it and why (``cannot write PATH: ...``)."""


def cgroup_fs_problem(folder: Path) -> str | None:
    """Why ``folder`` is no place for files (None: it is): it is, or would be made, in a
    cgroup file system, found from ``/proc/self/mountinfo`` for it or its nearest existing
    parent."""
    mount = cgroup_mount_holding(folder)
    if mount is None:
        return None
    return (f"{mount.mount_point} is a cgroup file system, where a folder made is a cgroup "
            "(give a folder on a disk)")


def folder_problem(folder: Path) -> str | None:
    """Why no file can be written in ``folder`` (None: it can, or it can be made), checked
    without making it: before a run, so that no request is sent for files that cannot be kept."""
    if (problem := cgroup_fs_problem(folder)) is not None:
        return problem
    for place in (folder, *folder.parents):
        if place.exists():
            shown = place if str(place) != "." else Path.cwd()   # "." says nothing
            if not place.is_dir():
                return f"{shown} is a file, not a directory"
            if not os.access(place, os.W_OK | os.X_OK):
                return f"{shown} is not writable here"
            return None
    return None


def make_folder(folder: Path) -> None:
    """``mkdir -p folder``, unless it is in a cgroup file system: then a one-line
    :class:`FileWriteError` and nothing made. Other ``OSError`` s are the caller's."""
    if (problem := cgroup_fs_problem(folder)) is not None:
        raise FileWriteError(f"cannot write in {folder}: {problem}")
    folder.mkdir(parents=True, exist_ok=True)
