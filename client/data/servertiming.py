"""Parse the ``Server-Timing`` header into the raw data's server-side columns.

The service sends ``burn;dur=<wall ms>, cpu;dur=<CPU ms>, throttle;dur=<ms paused>`` and, when
it can read its cgroup's cpu.stat, ``kernel-throttled;dur=<ms>;desc="periods=<n>"``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SERVER_FIELDS", "ServerMetric", "parse_server_timing", "server_fields"]

# Server-Timing metric name -> raw-data column (durations become integer ns)
_DURATION_COLUMNS = {
    "burn": "server_wall_ns",
    "pi": "server_wall_ns",
    "cpu": "server_cpu_ns",
    "throttle": "server_throttle_ns",
    "kernel-throttled": "kernel_throttled_ns",
}
SERVER_FIELDS = ("server_wall_ns", "server_cpu_ns", "server_throttle_ns",
                 "kernel_throttled_ns", "kernel_nr_throttled")


@dataclass(frozen=True)
class ServerMetric:
    name: str
    dur_ms: float | None
    desc: str | None


def parse_server_timing(header: str) -> list[ServerMetric]:
    """``a;dur=1.5, b;desc="x";dur=2`` -> metrics; malformed parts are skipped, never raised."""
    metrics: list[ServerMetric] = []
    for part in header.split(","):
        pieces = [p.strip() for p in part.split(";")]
        name = pieces[0]
        if not name:
            continue
        dur: float | None = None
        desc: str | None = None
        for param in pieces[1:]:
            key, _, value = param.partition("=")
            key, value = key.strip().lower(), value.strip().strip('"')
            if key == "dur":
                try:
                    dur = float(value)
                except ValueError:
                    dur = None
            elif key == "desc":
                desc = value
        metrics.append(ServerMetric(name, dur, desc))
    return metrics


def server_fields(header: str | None) -> dict[str, int]:
    """The raw-data columns this header fills (absent ones are left out)."""
    if not header:
        return {}
    out: dict[str, int] = {}
    for metric in parse_server_timing(header):
        column = _DURATION_COLUMNS.get(metric.name)
        if column is not None and metric.dur_ms is not None and metric.dur_ms >= 0:
            out[column] = round(metric.dur_ms * 1e6)
        if metric.name == "kernel-throttled" and metric.desc:
            for item in metric.desc.split():
                key, _, value = item.partition("=")
                if key == "periods" and value.isdigit():
                    out["kernel_nr_throttled"] = int(value)
    return out
