"""Synthetic cgroup timelines for the attribution and analysis tests (times in ms)."""

from __future__ import annotations

from client.data.timeline import CgroupSample

__all__ = ["MS", "P", "S", "TWO_THROTTLES"]

MS = 1_000_000
P = 100 * MS


def S(t_ms: float, usage_ms: float = 0, periods: int = 0, throttled: int = 0,
      throttled_ms: float = 0) -> CgroupSample:
    return CgroupSample(round(t_ms * MS), round(usage_ms * MS), periods, throttled,
                        round(throttled_ms * MS))


# One busy thread under 0.2 CPU: runs 0-20 ms, throttled 20-100 ms, boundary at 100 ms ends
# the throttle (80 ms counted then), runs 100-120, throttled 120-200, boundary at 200.
TWO_THROTTLES = [S(0), S(10, 10), S(20, 20), S(50, 20), S(92, 20),
                 S(104, 24, 1, 1, 80), S(150, 40, 1, 1, 80), S(198, 40, 1, 1, 80),
                 S(202, 42, 2, 2, 160), S(260, 42, 2, 2, 160)]
