"""The one answer of ``advise``, live or passive, and its JSON (:meth:`Answer.to_dict`: what
``--json`` prints and the answer's file holds).

Live (``client.analysis.advise.Advice``), with what was done to a running service when there
was one (``inplace``); passive (``client.analysis.passive.PassiveAdvice``), with advise's keys
where they apply and the replay's window, record and requests (``replay``), and, over a
workload's pods, their timelines and windows (``timeline``, ``workload``), and the predicted
runs saved (``runs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from client.analysis.advise import Advice, recommendation, shape
from client.analysis.passive import PassiveAdvice
from client.data.jsonsafe import json_ready
from cpuquota.limit import DEFAULT_PERIOD_MS

__all__ = ["Answer"]


@dataclass(frozen=True)
class Answer:
    """What advise found (see the module docstring); the optional parts are None or empty
    where they do not apply."""

    advice: Advice | PassiveAdvice
    inplace: Mapping[str, Any] | None = None      # live: the running service's part
    replay: Mapping[str, Any] | None = None       # passive: the window's figures
    period_ms: float = DEFAULT_PERIOD_MS          # passive: the replay's period
    by_requests: bool = False                     # passive: judged by the requests' latency
    timeline: str | None = None                   # passive over pods: their timelines
    workload: Mapping[str, Any] | None = None     # passive over pods: the workload's part
    runs: Mapping[int | None, Path] = field(default_factory=dict)   # predicted runs saved

    @property
    def met(self) -> bool:
        """Whether a limit up to the ceiling met the target."""
        return self.advice.at is not None

    def to_dict(self) -> dict[str, Any]:
        if isinstance(self.advice, Advice):
            out = self.advice.to_dict()
            if self.inplace is not None:
                out["inplace"] = dict(self.inplace)
            return out
        out = self._passive(self.advice)
        if self.timeline is not None:
            out["timeline"] = self.timeline
        if self.runs:
            out["runs"] = [str(p) for p in self.runs.values()]
        if self.workload is not None:
            out["workload"] = dict(self.workload)
        return out

    def to_json(self) -> Any:
        """:meth:`to_dict` as JSON holds it (a passive answer's NaN as null)."""
        answer = self.to_dict()
        return answer if isinstance(self.advice, Advice) else json_ready(answer)

    def _recommended(self, millicores: int, advice: PassiveAdvice) -> dict[str, Any]:
        """The recommended limit and, where it was searched, its range (the limits that meet
        the target under what the record could not show), whether it is sure (within ±25 %)
        and what widened it."""
        limit_of = shape(self.period_ms)
        out = recommendation(limit_of(millicores))
        span = advice.range
        if span is not None:
            out["range"] = {"low": recommendation(limit_of(span.low)),
                            "high": None if span.high is None
                            else recommendation(limit_of(span.high))}
            out["sure"] = span.sure
            out["widened_by"] = list(span.widened_by)
            out["range_says"] = span.words()
        return out

    def _passive(self, advice: PassiveAdvice) -> dict[str, Any]:
        """advise's JSON keys where they apply, and the replay's window, record, requests."""
        at, less = advice.at, advice.less
        out = {key: value for key, value in (self.replay or {}).items() if key != "limits"}
        out.update({
            "passive": True, "target": advice.target.to_dict(),
            "judged_by": ("the requests' predicted latency (p99, p90)" if self.by_requests
                          else "the added delay of a request arriving at a random instant "
                          "(p99, p90): no requests given"),
            "recommended": None if at is None or at.millicores is None else self._recommended(
                at.millicores, advice),
            "reason": advice.reason,
            "predicted": None if at is None else {
                "at_recommended": at.to_dict(),
                "at_25_percent_less": None if less is None else less.to_dict()},
            "no_limit": advice.free.to_dict(),
            "replays": [judged.to_dict() for judged in advice.tried],
            "search": {"floor_cpus": advice.floor / 1000, "ceiling_cpus": advice.ceiling / 1000,
                       "source": "replays of the recorded window (cpuquota.account); no run"},
        })
        return out
