"""A CPU limit: ``cpus × period`` of CPU per period, plus an optional burst. One type, checked in
one place, used by the kernel quota (``burn-service --cpus``, ``cpu-quota``), the in-process
throttle's accounting and the client's model, tables and pictures.

``Limit(0.3)`` is what ``docker run --cpus 0.3`` and a Kubernetes ``limits.cpu: 300m`` mean: a
quota of 30 ms per 100 ms period. A bad value raises :class:`LimitError` (a ``ValueError``)
whose one-line message names the option (``--cpus``, ``--period-ms``, ``--burst-ms``) and its
allowed range. The kernel has one rule more, a quota of at least 1 ms per period
(:meth:`Limit.kernel_problem`, :func:`kernel_limit`).

A limit of 0 means one thing everywhere: nothing. Every option that takes a limit
(``burn-service --cpus`` and ``--cpu-limit``, ``cpu-quota --cpus``, http-timing's ``--cpus``)
refuses 0 with the line :func:`zero_limit` words and says what to give instead: the option
left out, or ``none`` in a list of limits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["DEFAULT_PERIOD_MS", "MAX_PERIOD_MS", "MIN_PERIOD_MS", "MIN_QUOTA_US", "NO_QUOTA", "Limit",
           "LimitError", "kernel_limit", "zero_limit"]

MIN_QUOTA_US = 1000                     # the kernel refuses a quota below 1 ms
MIN_PERIOD_MS, MAX_PERIOD_MS = 1, 1000  # ... and a period outside [1 ms, 1 s]
DEFAULT_PERIOD_MS = 100.0               # the kernel's and the kubelet's
# what every command says of a group with no quota on it or above (exclusive CPUs under the
# static CPU manager, a container without limits.cpu, a plain process): its counters stand
# still, so no figure of throttling is claimed for it
NO_QUOTA = "no CPU quota: throttling cannot happen here"


class LimitError(ValueError):
    """A limit that cannot be: the message names the option and the allowed range."""


@dataclass(frozen=True)
class Limit:
    """``cpus × period_ms`` of CPU per period, plus ``burst_ms`` of unused quota that may be
    saved for later periods (at most one period's quota). ``source`` says where it was read
    (``kernel``, ``in-process``, ``--cpus``, ``model``); it is part of equality, as it is of
    the label."""

    cpus: float
    period_ms: float = DEFAULT_PERIOD_MS
    burst_ms: float = 0.0
    source: str = field(default="")

    def __post_init__(self) -> None:
        if not (isinstance(self.cpus, (int, float)) and math.isfinite(self.cpus)
                and self.cpus > 0):
            raise LimitError(f"--cpus must be > 0 (got {_g(self.cpus)})")
        if not (isinstance(self.period_ms, (int, float))
                and MIN_PERIOD_MS <= self.period_ms <= MAX_PERIOD_MS):
            raise LimitError(f"--period-ms must be in [{MIN_PERIOD_MS}, {MAX_PERIOD_MS}] "
                             f"(got {_g(self.period_ms)})")
        if not (isinstance(self.burst_ms, (int, float))
                and 0 <= self.burst_ms <= self.quota_ms + 1e-9):
            raise LimitError(f"--burst-ms must be in [0, {self.quota_ms:g}] (at most the quota "
                             f"per period; got {_g(self.burst_ms)})")

    # -- the numbers, in each unit the callers need ------------------------------------

    @property
    def quota_ms(self) -> float:
        return self.cpus * self.period_ms

    @property
    def millicores(self) -> int:
        """Kubernetes' spelling: 0.3 CPU is ``300m``."""
        return round(self.cpus * 1000)

    @property
    def period_us(self) -> int:
        return round(self.period_ms * 1000)

    @property
    def quota_us(self) -> int:
        """What ``cpu.cfs_quota_us`` / ``cpu.max`` get: the share kept on the µs grid."""
        return round(self.cpus * self.period_us)

    @property
    def burst_us(self) -> int:
        return round(self.burst_ms * 1000)

    @property
    def period_ns(self) -> int:
        return round(self.period_ms * 1e6)

    @property
    def quota_ns(self) -> int:
        return max(1, round(self.cpus * self.period_ns))

    @property
    def burst_ns(self) -> int:
        return round(self.burst_ms * 1e6)

    def kernel_problem(self) -> str | None:
        """Why the kernel would refuse this limit (a quota under 1 ms), or None."""
        if self.quota_us < MIN_QUOTA_US:
            return (f"--cpus {self.cpus:g} with --period-ms {self.period_ms:g} is a quota of "
                    f"{self.quota_us} µs per period; the kernel's minimum is {MIN_QUOTA_US} µs")
        return None

    # -- words ---------------------------------------------------------------------------

    def label(self) -> str:
        """Short: ``0.3 CPU (kernel)``; the period and burst only when not the defaults."""
        extra = []
        if self.period_ms != 100:
            extra.append(f"period {self.period_ms:g} ms")
        if self.burst_ms:
            extra.append(f"burst {self.burst_ms:g} ms")
        if self.source:
            extra.insert(0, self.source)
        return f"{self.cpus:g} CPU" + (f" ({', '.join(extra)})" if extra else "")

    def describe(self) -> str:
        """``0.3 CPU (30 ms per 100 ms period)`` (and the burst when there is one)."""
        burst = f", burst {self.burst_ms:g} ms" if self.burst_ms else ""
        return (f"{self.cpus:g} CPU ({self.quota_ms:g} ms per {self.period_ms:g} ms period"
                f"{burst})")

    def describe_kernel(self) -> str:
        """The kernel's files' numbers: ``0.3 CPU (quota 30000 µs per 100000 µs period)``."""
        burst = f", burst {self.burst_us} µs" if self.burst_us else ""
        return (f"{self.quota_us / self.period_us:g} CPU (quota {self.quota_us} µs per "
                f"{self.period_us} µs period{burst})")


def kernel_limit(cpus: float, period_ms: float = DEFAULT_PERIOD_MS, burst_ms: float = 0.0) -> Limit:
    """``--cpus``/``--period-ms``/``--burst-ms`` as a kernel quota: a :class:`Limit` that the
    kernel accepts, else :class:`LimitError` naming the option."""
    limit = Limit(cpus, period_ms, burst_ms, "kernel")
    problem = limit.kernel_problem()
    if problem:
        raise LimitError(problem)
    return limit


def zero_limit(given: str, instead: str, unit: str = "CPU") -> str:
    """The one line for a limit of 0 (``given``: ``--cpus 0``, ``BURN_SERVICE_CPUS=0``), which
    is no limit's spelling nowhere; ``instead`` says what to give (``omit --cpus for no
    limit``)."""
    return f"{given}: a limit must be above 0 {unit}; {instead}"


def _g(value: object) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else repr(value)
