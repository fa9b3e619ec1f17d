"""Which HTTP statuses a run counts as successes: one rule, applied once, when a request's
answer is read.

An answer is an answer: a request that got a whole status line and body is timed and kept with
its status, whatever the status. Whether it *succeeded* is this rule, as vegeta's: a status in
[200, 400) is a success (so a ``304 Not Modified`` or a ``302`` is one; redirects are not
followed unless asked, ``--follow-redirects N``: then the 3xx's own time is what was
measured), anything else is an error. ``--ok-status``
says otherwise, e.g. ``200-299`` (redirects count as errors) or ``200-399,404`` (a 404 is an
expected answer). The rule decides the record's ``error`` column (empty on success, ``HTTP
<status>`` otherwise), and everything after reads that column: the summary's error count, the
exit status (1 when any request failed), ``report`` and the pictures; the run's metadata keeps
the rule (``ok_status``) so a file says how it was judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEFAULT_OK_STATUS", "StatusRule", "StatusRuleError"]

DEFAULT_OK_STATUS = "200-399"

_PART = re.compile(r"([1-9][0-9]{2})(?:-([1-9][0-9]{2}))?")


class StatusRuleError(ValueError):
    """``--ok-status`` cannot be read (a one-line message)."""


@dataclass(frozen=True)
class StatusRule:
    """Statuses counted as successes: inclusive ranges, e.g. ``200-399,404``; ``follow``:
    how many redirects a request follows (inside its time) before its answer is judged."""

    ranges: tuple[tuple[int, int], ...] = ((200, 399),)
    follow: int = 0

    @classmethod
    def parse(cls, text: str) -> StatusRule:
        """``200-399``, ``200-299,304``, ``200-499``: comma-separated statuses and inclusive
        ranges of three-digit statuses."""
        ranges = []
        for part in text.replace(" ", "").split(","):
            match = _PART.fullmatch(part)
            if not match:
                raise StatusRuleError(f"--ok-status {text!r}: expected statuses and ranges of "
                                      "three-digit statuses like 200-399,404")
            low = int(match.group(1))
            high = int(match.group(2) or low)
            if high < low:
                raise StatusRuleError(f"--ok-status {text!r}: the range {part} is empty")
            ranges.append((low, high))
        return cls(tuple(ranges))

    def __contains__(self, status: object) -> bool:
        return isinstance(status, int) and any(low <= status <= high
                                               for low, high in self.ranges)

    def __str__(self) -> str:
        return ",".join(f"{low}" if low == high else f"{low}-{high}" for low, high in self.ranges)

    def error(self, status: int, location: str | None = None) -> str:
        """The ``error`` of an answer with ``status``: empty when the rule counts it a success,
        else ``HTTP <status>`` (a redirect says where it pointed: it is not followed)."""
        if status in self:
            return ""
        if 300 <= status < 400 and location:
            return f"HTTP {status}: redirect to {location} (not followed)"
        return f"HTTP {status}"

    def too_many(self, status: int, location: str) -> str:
        """The ``error`` of a request whose redirects went on beyond ``follow``."""
        return f"HTTP {status}: more than {self.follow} redirects (the next to {location})"
