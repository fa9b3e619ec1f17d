"""One timed request: the row of a run's CSV.

Columns (times in integer nanoseconds; empty where unknown):

- ``seq``: request number, from 0
- ``start_ns``: when the request was sent, since the run started (monotonic clock)
- ``latency_ns``: time until the whole response was read
- ``status``: HTTP status, 0 when the request failed in transport (refused, timeout, ...)
- ``error``: the transport error, or ``HTTP <status>`` for a status the run's rule counts as
  an error (``client.data.status``: [200, 400) succeed unless ``--ok-status`` says otherwise);
  empty on success
- ``scheduled_ns``: the intended send time of an open loop (latency runs from it)
- ``server_wall_ns``, ``server_cpu_ns``, ``server_throttle_ns``, ``kernel_throttled_ns``,
  ``kernel_nr_throttled``: from the response's ``Server-Timing`` header, when present
- ``replica``: which replica answered (0, 1, ...), when requests were spread over several
- ``target``: which target of a ``--targets`` file was sent (0, 1, ...: its place in the file)
- ``cgroup_throttled_ns``, ``cgroup_nr_throttled``: the throttling of the watched group
  (``--cgroup``) during the request, read by the client: the exact change of the group's
  ``cpu.stat`` across a sequential request, else what its timeline shows inside the request
  (overlapping requests share the blame). The time is the kernel's, summed over the CPUs
  the group was throttled on: on several CPUs it can exceed the latency
- ``cgroup_held_ns``: the wall time the request was held by that throttling, never more than
  its latency (``client.data.attribution.held``); empty in files from before it, and for a
  group with no CPU limit (no throttling columns then at all)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from client.data.servertiming import SERVER_FIELDS
from client.data.status import StatusRule

__all__ = ["COLUMNS", "DEFAULT_RULE", "INT_COLUMNS", "REQUIRED_COLUMNS", "RawDataError", "RequestRecord",
           "status_error"]

REQUIRED_COLUMNS = ("seq", "start_ns", "latency_ns", "status")
COLUMNS = (*REQUIRED_COLUMNS, "error", "scheduled_ns", *SERVER_FIELDS, "replica",
           "cgroup_throttled_ns", "cgroup_nr_throttled", "cgroup_held_ns", "target")
INT_COLUMNS = tuple(c for c in COLUMNS if c != "error")
DEFAULT_RULE = StatusRule()


class RawDataError(ValueError):
    """A file that cannot be read as a run; the message says which file and why, in one line."""


@dataclass
class RequestRecord:
    seq: int
    start_ns: int
    latency_ns: int
    status: int
    error: str = ""
    scheduled_ns: int | None = None  # intended send time (open-loop runs); None when closed loop
    server_wall_ns: int | None = None
    server_cpu_ns: int | None = None
    server_throttle_ns: int | None = None
    kernel_throttled_ns: int | None = None
    kernel_nr_throttled: int | None = None
    replica: int | None = None       # which of several replicas answered
    cgroup_throttled_ns: int | None = None   # the watched group's throttled time meanwhile
    cgroup_nr_throttled: int | None = None   # ... and its throttled periods
    cgroup_held_ns: int | None = None        # the wall time it was held by that throttling
    target: int | None = None        # which target of a --targets file (its place in it)

    @property
    def ok(self) -> bool:
        """Answered, and the run's status rule counted the answer a success (its ``error`` is
        empty: ``client.data.status``)."""
        return self.status > 0 and not self.error

    @property
    def latency_ms(self) -> float:
        return self.latency_ns / 1e6

    @property
    def origin_ns(self) -> int:
        """Where the latency starts: the intended send time in an open loop, else the send."""
        return self.start_ns if self.scheduled_ns is None else self.scheduled_ns

    @property
    def end_ns(self) -> int:
        """When the whole response had been read, since the run started."""
        return self.origin_ns + self.latency_ns

    @property
    def counters_throttled(self) -> bool | None:
        """Whether counters said this request was throttled: the server's (its cgroup's
        ``nr_throttled`` went up, or the in-process throttle paused it) or the watched
        group's read by the client (``--cgroup``); None if none can tell. One of the two
        sources of ``client.analysis.detect``; a run's throttled share is that module's,
        never this alone."""
        known = [v for v in (self.kernel_nr_throttled, self.server_throttle_ns,
                             self.cgroup_nr_throttled) if v is not None]
        if not known:
            return None
        return any(v > 0 for v in known)

    def to_row(self) -> dict[str, Any]:
        return {name: "" if (value := getattr(self, name)) is None else value
                for name in _FIELD_NAMES}


_FIELD_NAMES = tuple(f.name for f in fields(RequestRecord))


def status_error(status: int, location: str | None = None, rule: StatusRule = DEFAULT_RULE
                 ) -> str:
    """The ``error`` of an HTTP answer under ``rule`` (by default [200, 400) are successes,
    as vegeta's): empty on success, else ``HTTP <status>``; see ``client.data.status``."""
    return rule.error(status, location)
