"""Whether the client itself kept up: an open loop's send lag and achieved rate, a closed
loop's own time per request.

In an open loop every request records when it was meant to go (``scheduled_ns``) and when it
went (``start_ns``); their difference is the **send lag**, the client's own queue. The client
**fell behind** when the lag's p99 is over 1 ms or it sent under 98 % of the rate asked: its
latencies then include its own queue, not only the service's. The run's metadata keeps
``client_fell_behind`` and the figures (``client_pace``); ``run``'s summary, ``report`` and
the picture say so (:func:`fell_behind_words`).

A closed loop has no schedule to fall behind; its ``client_pace`` keeps the client's own time
per request outside the wait for the answer (taking the next request, recording this one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client.data.record import RequestRecord
from client.data.summary import percentile

__all__ = ["FELL_BEHIND_LAG_MS", "FELL_BEHIND_RATE_SHARE", "OpenLoopPace", "closed_loop_pace",
           "fell_behind_words", "open_loop_pace"]

FELL_BEHIND_LAG_MS = 1.0        # send lag p99 over this: the client's own queue shows
FELL_BEHIND_RATE_SHARE = 0.98   # achieved rate under this share of the asked one


@dataclass(frozen=True)
class OpenLoopPace:
    asked_rps: float
    achieved_rps: float
    sent: int
    send_lag_p50_ms: float
    send_lag_p99_ms: float
    send_lag_max_ms: float

    @property
    def fell_behind(self) -> bool:
        return (self.send_lag_p99_ms > FELL_BEHIND_LAG_MS
                or self.achieved_rps < FELL_BEHIND_RATE_SHARE * self.asked_rps)

    def to_dict(self) -> dict[str, Any]:
        return {"asked_rps": self.asked_rps, "achieved_rps": round(self.achieved_rps, 1),
                "sent": self.sent, "send_lag_p50_ms": round(self.send_lag_p50_ms, 3),
                "send_lag_p99_ms": round(self.send_lag_p99_ms, 3),
                "send_lag_max_ms": round(self.send_lag_max_ms, 3)}


def open_loop_pace(records: Sequence[RequestRecord], rate_rps: float) -> OpenLoopPace | None:
    """How the client kept an open loop's schedule; None with fewer than two requests sent.
    The achieved rate is the sends over the time they took: (n - 1) requests after the first
    in the time from the first send to the last (the asked rate when on time)."""
    sent = [r for r in records if r.scheduled_ns is not None]
    if len(sent) < 2:
        return None
    starts = sorted(r.start_ns for r in sent)
    span_ns = starts[-1] - starts[0]
    achieved = (len(sent) - 1) * 1e9 / span_ns if span_ns > 0 else float(rate_rps)
    lags_ms = [max(0, r.start_ns - (r.scheduled_ns or 0)) / 1e6 for r in sent]
    return OpenLoopPace(float(rate_rps), achieved, len(sent), percentile(lags_ms, 50),
                        percentile(lags_ms, 99), max(lags_ms))


def closed_loop_pace(own_ns: int, requests: int) -> dict[str, Any] | None:
    """A closed loop's ``client_pace``: the client's own time per request outside the wait."""
    if requests <= 0:
        return None
    return {"own_time_per_request_us": round(own_ns / requests / 1e3, 1),
            "requests": requests}


def fell_behind_words(fell_behind: bool | None, pace: Mapping[str, Any] | None) -> str | None:
    """The one line that says the client fell behind and how: its sends lagged behind the
    schedule, and the rate only when it really sent less than asked (None when it did not fall
    behind, or it is not known)."""
    if not fell_behind or not pace:
        return None
    asked, achieved = pace.get("asked_rps", 0), pace.get("achieved_rps", 0)
    lag = f"{pace.get('send_lag_p99_ms', 0):g} ms (p99) behind schedule"
    how = (f"it sent {achieved:g} of the {asked:g} requests/s asked, its sends lagging up to {lag}"
           if achieved < FELL_BEHIND_RATE_SHARE * asked else
           f"its sends lagged up to {lag} (at the {asked:g} requests/s asked)")
    return (f"http-timing fell behind: {how}; these latencies include its own queue, not only "
            "the service's")
