"""Watching a run while it goes (``--live``): what ``record_run`` tells an observer, so that a
watcher needs no change to the load modes (``client.run.modes``) or the recorder.

The calls, in order: :meth:`RunObserver.run_started` once, before the first request;
:meth:`RunObserver.request_done` for each completed request, on the timed path (under the
recorder's lock, right after the CSV row): it must only append to something and return, never
block, never do I/O; :meth:`RunObserver.run_ended` once the records are final (after the
attribution of a concurrent ``--cgroup`` run), before the metadata is written: what it
returns is kept under the metadata's ``live`` key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from client.data.metadata import RunMetadata
from client.data.record import RequestRecord
from client.data.timeline import CgroupSample

__all__ = ["RunObserver"]


class RunObserver(Protocol):
    def run_started(self, metadata: RunMetadata,
                    timeline: Sequence[CgroupSample] | None) -> None:
        """Before the first request: the run's metadata and, with ``--cgroup``, the list the
        sampler appends the group's samples to (to read, never to change)."""

    def request_done(self, record: RequestRecord) -> None:
        """One completed request (the timed path: append and return)."""

    def run_ended(self, records: Sequence[RequestRecord]) -> dict[str, Any] | None:
        """The run is over and ``records`` are final; returns the metadata's ``live`` entry."""
