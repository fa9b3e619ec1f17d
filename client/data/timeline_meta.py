"""A recorded timeline's metadata (``<name>.json`` beside ``<name>.cgroup.csv``, written by
``http-timing record``): the group, its quota, the host, and the clock.

The timeline's ``t_ns`` is ``CLOCK_MONOTONIC`` (Python's ``perf_counter_ns`` on Linux) since
the recording's zero; ``clock.zero_epoch_ns`` is the wall-clock time (Unix ns, ``CLOCK_REALTIME``)
of that zero, read around one monotonic reading (``zero_uncertainty_ns``: half the gap between
the two wall-clock readings). So an absolute time from another tool, ``epoch_ns``, lies at
``t_ns = epoch_ns - zero_epoch_ns`` on the timeline (when both clocks are this host's).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from client.data.files import write_whole
from client.data.record import RawDataError

__all__ = ["CLOCK_NAME", "TimelineClock", "TimelineMetadata", "read_timeline_metadata",
           "timeline_meta_path", "write_timeline_metadata"]

CLOCK_NAME = "CLOCK_MONOTONIC"


@dataclass(frozen=True)
class TimelineClock:
    """Where the timeline's zero is on the wall clock."""

    zero_epoch_ns: int          # CLOCK_REALTIME at the timeline's t_ns = 0
    zero_uncertainty_ns: int    # +- this much (the reading's own gap)
    timeline: str = CLOCK_NAME  # the clock t_ns is counted on
    unit: str = "ns since zero"

    @classmethod
    def from_dict(cls, raw: Any) -> TimelineClock | None:
        if not isinstance(raw, dict):
            return None
        zero, spread = raw.get("zero_epoch_ns"), raw.get("zero_uncertainty_ns", 0)
        if not isinstance(zero, int) or isinstance(zero, bool) or not isinstance(spread, int):
            return None
        return cls(zero, spread, str(raw.get("timeline", CLOCK_NAME)),
                   str(raw.get("unit", "ns since zero")))


@dataclass
class TimelineMetadata:
    """What ``http-timing record`` says about its timeline."""

    name: str
    clock: TimelineClock | None
    cgroup: dict[str, Any] | None = None   # ServiceGroup.to_metadata(): spec, path, quota_us...
    tool: str = "http-timing record"
    version: str = ""
    host: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    interval_s: float | None = None
    max_size: int | None = None
    samples: int | None = None
    interrupted: bool = False
    stop_reason: str | None = None
    command: list[str] = field(default_factory=list)

    @property
    def period_ns(self) -> int | None:
        period = (self.cgroup or {}).get("period_us")
        return int(period * 1000) if isinstance(period, (int, float)) and period > 0 else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["clock"] = asdict(self.clock) if self.clock else None
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> TimelineMetadata:
        def typed(key: str, kind: type | tuple[type, ...]) -> Any:
            value = raw.get(key)
            return value if isinstance(value, kind) and not isinstance(value, bool) else None
        return cls(name=str(raw.get("name") or ""), clock=TimelineClock.from_dict(raw.get("clock")),
                   cgroup=typed("cgroup", dict), tool=str(raw.get("tool") or ""),
                   version=str(raw.get("version") or ""), host=typed("host", str),
                   started_at=typed("started_at", str), ended_at=typed("ended_at", str),
                   interval_s=typed("interval_s", (int, float)), max_size=typed("max_size", int),
                   samples=typed("samples", int), interrupted=raw.get("interrupted") is True,
                   stop_reason=typed("stop_reason", str), command=typed("command", list) or [])


def timeline_meta_path(timeline: Path) -> Path:
    """``x.cgroup.csv`` -> ``x.json``."""
    name = timeline.name
    stem = name[:-len(".cgroup.csv")] if name.endswith(".cgroup.csv") else timeline.stem
    return timeline.with_name(stem + ".json")


def write_timeline_metadata(path: Path, meta: TimelineMetadata) -> None:
    """Whole (``client.data.files.replacing``: a reader sees the old file or the new one);
    ``FileWriteError`` naming the path when it cannot be written."""
    write_whole(path, json.dumps(meta.to_dict(), indent=2, sort_keys=True) + "\n")


def read_timeline_metadata(path: Path) -> TimelineMetadata | None:
    """The metadata of a timeline (``path``: its ``.json``); None when there is none;
    ``RawDataError`` (one line) when it is there but not JSON."""
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RawDataError(f"{path}: not the JSON of a timeline ({exc})") from None
    if not isinstance(raw, dict):
        raise RawDataError(f"{path}: not the JSON of a timeline (expected an object)")
    return TimelineMetadata.from_dict(raw)
