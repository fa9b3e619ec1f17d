"""How requests are sent: a load mode and its numbers, checked once (``LoadPlan.from_options``).

- **sequential** (the original): one request after another.
- **closed loop** (``--concurrency C``, like ``hey -c``/``oha -c``): C workers, each sending its
  next request as soon as the previous one is answered.
- **open loop** (``--rate R``, like wrk2, vegeta, k6's constant-arrival-rate): request ``i`` is
  due ``i / R`` seconds after the start, whatever happened before; latency counts from then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from client.data.metadata import LoadMode

__all__ = ["DEFAULT_REQUESTS", "LoadPlan", "LoadPlanError", "intended_send_ns",
           "open_loop_workers"]

DEFAULT_REQUESTS = 100
MAX_OPEN_LOOP_WORKERS = 64


class LoadPlanError(ValueError):
    """Options that do not make a load plan; the message is one line naming the options."""


@dataclass(frozen=True)
class LoadPlan:
    """The mode and its numbers. ``requests`` is None only for a closed loop bounded by
    ``duration_s``."""

    mode: LoadMode = LoadMode.SEQUENTIAL
    requests: int | None = DEFAULT_REQUESTS
    concurrency: int = 1
    rate_rps: float | None = None
    duration_s: float | None = None

    @classmethod
    def from_options(cls, *, requests: int | None = None, concurrency: int | None = None,
                     rate: float | None = None, duration: float | None = None) -> LoadPlan:
        """The plan for ``--requests/--concurrency/--rate/--duration`` (None: not given)."""
        if rate is not None and concurrency is not None:
            raise LoadPlanError("--rate and --concurrency cannot be combined: --rate R is an "
                                "open loop (R requests per second, whatever the answers), "
                                "--concurrency C a closed loop (C requests at a time)")
        for flag, value in (("--requests", requests), ("--concurrency", concurrency)):
            if value is not None and value < 1:
                raise LoadPlanError(f"{flag} must be an integer >= 1 (got {value})")
        for flag, number in (("--rate", rate), ("--duration", duration)):
            if number is not None and not (math.isfinite(number) and number > 0):
                raise LoadPlanError(f"{flag} must be a number > 0 (got {number})")
        if duration is not None and requests is not None:
            raise LoadPlanError("give --requests N or --duration D, not both")
        if rate is not None:
            if duration is not None:
                count = math.floor(rate * duration + 1e-9)
                if count < 1:
                    raise LoadPlanError(f"--rate {rate:g} for --duration {duration:g} s sends "
                                        "no request: make the rate or the duration larger")
            else:
                count = requests if requests is not None else DEFAULT_REQUESTS
            return cls(LoadMode.OPEN_LOOP, count, 1, float(rate), count / rate)
        if concurrency is not None:
            if duration is not None:
                return cls(LoadMode.CLOSED_LOOP, None, concurrency, None, float(duration))
            return cls(LoadMode.CLOSED_LOOP,
                       requests if requests is not None else DEFAULT_REQUESTS, concurrency)
        if duration is not None:
            raise LoadPlanError("--duration needs --rate R (open loop) or --concurrency C "
                                "(closed loop); a sequential run takes --requests N")
        return cls(LoadMode.SEQUENTIAL, requests if requests is not None else DEFAULT_REQUESTS)

    @property
    def sequential(self) -> bool:
        return self.mode is LoadMode.SEQUENTIAL

    def describe(self) -> str:
        """One line, e.g. ``open loop: 20 requests/s for 10 s (200 requests)``."""
        if self.mode is LoadMode.OPEN_LOOP:
            return (f"open loop: {self.rate_rps:g} requests/s for {self.duration_s:g} s "
                    f"({self.requests} requests)")
        if self.mode is LoadMode.CLOSED_LOOP:
            amount = (f"for {self.duration_s:g} s" if self.requests is None
                      else f"{self.requests} requests")
            return f"closed loop: {self.concurrency} at a time, {amount}"
        return f"sequential: {self.requests} requests"

    def to_metadata(self) -> dict[str, Any]:
        """The metadata fields of the plan (``RunMetadata``'s names)."""
        return {"mode": self.mode, "requests": self.requests, "concurrency": self.concurrency,
                "rate_rps": self.rate_rps, "duration_s": self.duration_s}


def intended_send_ns(seq: int, rate_rps: float) -> int:
    """When request ``seq`` is due in an open loop, in ns since the start: ``seq / rate``."""
    return round(seq * 1e9 / rate_rps)


def open_loop_workers(rate_rps: float) -> int:
    """Connections an open loop keeps: enough for a quarter second of arrivals (a throttling
    stall is ~0.1 s), at least 4, at most 64. Beyond that, due requests wait for a free
    connection, and that wait is part of their latency."""
    return max(4, min(MAX_OPEN_LOOP_WORKERS, math.ceil(rate_rps * 0.25)))
