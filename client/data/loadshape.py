"""How a load sent its requests (pure, no I/O): an open loop (each request at its own time: an
access log, a rate) or a closed loop of C connections (each sends its next request when its
previous one is answered, plus the gap it leaves: one at a time, hey's and oha's ``-c C``).

A replay at another limit needs it: a closed loop recorded under throttling sent slowly
because its answers came slowly, and at a higher limit it sends faster and wants more CPU.

Where the shape comes from, first found first (:attr:`LoadShape.source`):

- ``"said"``: the run's JSON (an http-timing run's plan: its mode and ``--concurrency``), or
  the user (``import --concurrency C``, ``--open-loop``);
- ``"column"``: the file's connection or worker column (JMeter's ``threadName``);
- ``"format"``: what the format is (an access log, vegeta's ``attack -rate``: open loops);
- ``"inferred"``: from the requests (:func:`infer`): nearly every request starts just after a
  previous answer (:data:`CLOSED_GAP_NS`), in chains (:func:`chains`) built with a tolerance
  of the file's own rounding (:func:`time_step`), so times rounded to 0.1 ms (hey's) never
  make two connections of one;
- ``"unknown"``: none of these: "concurrency not known". Overlaps of rounded times are never
  taken as connections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd
from typing import Any

__all__ = ["CLOSED_GAP_NS", "LoadShape", "UNKNOWN", "chains", "infer", "is_closed",
           "time_step"]

MS = 1_000_000
CLOSED_GAP_NS = 10 * MS     # a load tool sends its next request sooner than this
CLOSED_SHARE = 0.9          # ... for at least this share of the requests that follow one
MAX_STEP_NS = MS            # a coarser file's chains are not read (Traefik's whole seconds)


@dataclass(frozen=True)
class LoadShape:
    """How the requests were sent: ``closed`` None when not known; ``connections`` a closed
    loop's (None: not known); ``source`` where it comes from (see the module's docstring) and
    ``why`` the phrase that says so."""

    closed: bool | None
    connections: int | None
    source: str
    why: str

    @property
    def known(self) -> bool:
        return self.closed is not None

    def describe(self) -> str:
        """One phrase: ``closed loop: one at a time (inferred from the requests: ...)``."""
        if self.closed is None:
            return f"concurrency not known ({self.why})"
        if not self.closed:
            return f"open loop: each request sent at its own time ({self.why})"
        count = ("C not known" if self.connections is None else
                 "one at a time" if self.connections == 1 else f"{self.connections} at a time")
        return f"closed loop: {count} ({self.why})"

    def to_dict(self) -> dict[str, Any]:
        return {"loop": None if self.closed is None else "closed" if self.closed else "open",
                "connections": self.connections, "source": self.source, "why": self.why}

    @classmethod
    def from_dict(cls, data: Any) -> LoadShape | None:
        """The shape an imported run's JSON keeps (None when it keeps none, or not this)."""
        if not isinstance(data, dict) or data.get("loop") not in ("closed", "open", None):
            return None
        connections = data.get("connections")
        if not (connections is None or isinstance(connections, int) and connections > 0):
            return None
        loop = data.get("loop")
        return cls(None if loop is None else loop == "closed", connections,
                   str(data.get("source") or "said"), str(data.get("why") or "the run's JSON"))


UNKNOWN = LoadShape(None, None, "unknown", "the file does not say how its requests were sent")


def time_step(spans: Sequence[tuple[int, int]]) -> int:
    """The file's rounding: the coarsest power of ten ns (1 ns to 1 ms) dividing every
    latency and every difference between two starts (``(start, end)`` ns; hey's 4 decimals of
    a second: 100 000 ns)."""
    if not spans:
        return 1
    first = spans[0][0]
    g = 0
    for start, end in spans:
        g = gcd(g, gcd(start - first, end - start))
        if g == 1:
            return 1
    step = 1
    while step < MAX_STEP_NS and g and g % (step * 10) == 0:
        step *= 10
    return step if g else MAX_STEP_NS


def chains(spans: Sequence[tuple[int, int]], tolerance_ns: int = 0
           ) -> tuple[list[int | None], list[int]]:
    """Each request's predecessor in the fewest chains of requests that do not overlap by
    more than ``tolerance_ns`` (the file's rounding), and the gap after it (0 when the
    rounding made it negative). ``spans`` are ``(start, end)`` ns, sorted by start; each goes
    after the chain whose last answer came latest before it started (None: it starts one)."""
    lane_ends: list[tuple[int, int]] = []   # (end, the request that ended it)
    follows: list[int | None] = []
    gaps: list[int] = []
    for i, (start, end) in enumerate(spans):
        free = [j for j, (e, _) in enumerate(lane_ends) if e <= start + tolerance_ns]
        if free:
            j = max(free, key=lambda j: lane_ends[j][0])
            follows.append(lane_ends[j][1])
            gaps.append(max(0, start - lane_ends[j][0]))
            lane_ends[j] = (end, i)
        else:
            follows.append(None)
            gaps.append(0)
            lane_ends.append((end, i))
    return follows, gaps


def is_closed(follows: Sequence[int | None], gaps: Sequence[int]) -> bool:
    """Whether nearly every request that follows another starts just after its answer."""
    sent_after = sorted(g for f, g in zip(follows, gaps) if f is not None)
    if not sent_after:
        return True
    return sent_after[int(CLOSED_SHARE * (len(sent_after) - 1))] <= CLOSED_GAP_NS


def infer(spans: Sequence[tuple[int, int]]) -> LoadShape:
    """The shape the requests show (``(start, end)`` ns, any order): a closed loop of as many
    chains as it takes when nearly every request starts within :data:`CLOSED_GAP_NS` of a
    previous answer (after the file's rounding), else :data:`UNKNOWN`."""
    ordered = sorted(spans)
    if len(ordered) < 2:
        return UNKNOWN
    step = time_step(ordered)
    follows, gaps = chains(ordered, 2 * step if step > 1 else 0)
    if not is_closed(follows, gaps):
        return LoadShape(None, None, "unknown",
                         "the file does not say how its requests were sent, and they do not "
                         f"follow one another: fewer than {100 * CLOSED_SHARE:.0f} % start "
                         f"within {CLOSED_GAP_NS / MS:g} ms of a previous answer")
    lanes = sum(1 for f in follows if f is None)
    rounding = f", its times rounded to {step / MS:g} ms" if step > 1 else ""
    return LoadShape(True, lanes, "inferred",
                     "inferred from the requests: each starts within "
                     f"{CLOSED_GAP_NS / MS:g} ms of a previous answer{rounding}")
