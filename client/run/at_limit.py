"""One seam for "a service at a limit": what ``advise`` and ``sweep`` run their requests against.

An :class:`AtLimit` puts a service at a CPU limit (or none) and times one run of requests
there (:meth:`AtLimit.measure`, a :class:`client.run.measure.Measurement`); the commands never
ask which one they have: what a kind can do beyond a run at a limit (put the limit back, keep
the answer, show its group's counters, patch its owner) it declares once, as its
:class:`Capabilities`, and :class:`AtLimit` holds the defaults. Three implementations:

- :class:`StartedService` (here): burn-service started by the command under each limit, by a
  backend of ``client.run.targets`` (one service, or a replica set), stopped by its own id
  after the run;
- :class:`client.run.inplace.InPlace`: the user's running service, its limit changed in place
  by a limiter of ``client.run.limiters`` and sampled as ``--cgroup`` does;
- :class:`client.advise.replayed_limit.ReplayedLimit`: no service, a recorded window's
  requests replayed at the limit and saved as a predicted run (above this layer: the replay is
  analysis).

Every limit is changed inside :meth:`AtLimit.holding`: a running service gets back the limit it
had when the block is left, whatever ends it (a started one is stopped after each run anyway).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from client.data.metadata import SweepInfo
from client.data.record import RequestRecord
from client.run.limiters import LimiterError
from client.run.measure import Measurement, Progress, Started, Traffic, measure, target_spec
from client.run.plan import LoadPlan
from client.run.record import settle_s
from client.run.targets import Backend, ServiceError, Target
from client.run.targets.replicas import ReplicaSet
from client.run.targets.service import free_port
from cpuquota.limit import Limit

__all__ = ["RUN_ERRORS", "AtLimit", "Capabilities", "InPlaceError", "StartedService"]

Shape = Callable[[int], Limit]      # millicores -> the limit of the command's period and burst


class InPlaceError(RuntimeError):
    """A running service whose limit could not be set, read back or put back (one line)."""


@dataclass(frozen=True)
class Capabilities:
    """What a service at a limit can do beyond a run at one, declared once by each kind: the
    advice and the sweep ask these, never which kind they have."""

    removes: bool = True     # runs without any limit (else the profile runs at its ceiling)
    restores: bool = False   # a running service: its limit put back at the end
    keeps: bool = False      # ``--keep``: the answer can be left in force instead
    evidence: bool = False   # each run carries its group's own counters (and its usage)
    patches: bool = False    # ``--apply``: its owner (a Deployment) can be patched for good


# what a run at a limit may raise, one line each: a service that does not start, a limit
# that cannot be set or read back, a group that is gone
RUN_ERRORS: tuple[type[Exception], ...] = (ServiceError, InPlaceError, LimiterError)


class AtLimit(ABC):
    """A service put at a CPU limit for each run (see the module docstring); the defaults
    are a service started for each run, with nothing to put back."""

    @property
    def capabilities(self) -> Capabilities:
        """What it can do beyond a run at a limit (see :class:`Capabilities`)."""
        return Capabilities()

    @property
    @abstractmethod
    def name(self) -> str:
        """In the runs' file names: "kernel", "docker", "inprocess", "inplace"."""

    @property
    @abstractmethod
    def description(self) -> str:
        """One line, e.g. "kernel CPU quota (burn-service --cpus, a cgroup)"."""

    @property
    @abstractmethod
    def sends(self) -> str:
        """What each request is, e.g. "iterations=5000" or "GET http://..."."""

    @property
    def can_remove(self) -> bool:
        """Whether it can run without any limit (else the profile runs at its ceiling)."""
        return self.capabilities.removes

    @property
    def instances(self) -> int:
        """Services the limit is set on alike (a Deployment's pods), else 1."""
        return 1

    @property
    def inplace(self) -> AtLimit | None:
        """The running service changed in place, itself (None: none); what it can do is
        :attr:`capabilities`'."""
        return None

    @property
    def kind(self) -> str:
        """What sets the limit: the limiter's kind ("cgroup v2", "docker"...), else the name."""
        return self.name

    @property
    def spec(self) -> str:
        """The service as the user named it (``--cgroup``'s target), else its description."""
        return self.description

    @property
    def names(self) -> Mapping[str, Any]:
        """What names it where it is kept for good (a pod's namespace, owner...), else none."""
        return {}

    def problem(self) -> str | None:
        """Why it cannot work on this machine (one line), or None."""
        return None

    def check(self, limits: Sequence[Limit | None]) -> None:
        """``ValueError`` (one line) for the first limit it cannot be given."""

    @abstractmethod
    def ceiling(self, shape: Shape) -> tuple[int, str]:
        """The largest limit worth trying (millicores) and its words; ``ValueError`` when
        none can be set."""

    @contextmanager
    def _nothing_to_hold(self) -> Iterator[object]:
        yield self

    def holding(self) -> AbstractContextManager[object]:
        """The block inside which limits change; leaving it puts back what was there (by
        default nothing: each service is stopped after its run)."""
        return self._nothing_to_hold()

    def with_replicas(self, replicas: int, on_replica: Callable[[int, int], None] | None = None
                      ) -> AtLimit:
        """``sweep --replicas``: ``replicas`` services of the limit each, the requests
        round-robin over them (``on_replica``: replicas started, of how many)."""
        raise ValueError(f"--replicas starts services of its own: not with {self.description}")

    def keep(self, limit: Limit | None) -> None:
        """``--keep`` (``capabilities.keeps``): leave ``limit`` in force at the end."""

    def patch_for_good(self, limit: Limit) -> str:
        """``--apply`` (``capabilities.patches``): ``limit`` into the owner; what was done."""
        raise ValueError(f"{self.spec} has no owner to patch with the answer")

    def state(self) -> dict[str, Any] | None:
        """A running service (``capabilities.restores``): what it had, what it was left at,
        what did not change; None for a started one."""
        return None

    @abstractmethod
    def measure(self, limit: Limit | None, *, name: str, plan: LoadPlan, data_dir: Path,
                sweep: SweepInfo | None = None, index: int = 1,
                progress: Progress | None = None,
                observers: Sequence[Callable[[RequestRecord], None]] = (),
                sample_usage: bool = False, on_target: Callable[[str], None] | None = None,
                on_recorded: Callable[[Measurement], None] | None = None) -> Measurement:
        """One run of ``plan`` at ``limit`` (None: none), saved as ``data_dir/name``;
        ``on_target`` is told what runs before the requests (the command line started, the
        group changed). ``sample_usage``: the per-second CPU usage in the measurement."""


@dataclass(frozen=True)
class StartedService(AtLimit):
    """burn-service started by ``backend`` under each limit, timed, stopped by its id.

    ``replicas``: N services of the limit each, the requests round-robin over them (``sweep
    --replicas``); ``on_started``/``on_stopped``: what the command shows of the services."""

    backend: Backend
    load: Traffic
    command: tuple[str, ...]
    replicas: int = 0
    on_started: Callable[[Started, float], None] | None = None
    on_stopped: Callable[[str], None] | None = None
    on_replica: Callable[[int, int], None] | None = None   # replicas started, of how many

    @property
    def name(self) -> str:
        return self.backend.name

    @property
    def description(self) -> str:
        return self.backend.description

    @property
    def sends(self) -> str:
        return f"iterations={self.load.iterations}"

    def problem(self) -> str | None:
        return self.backend.problem()

    def with_replicas(self, replicas: int, on_replica: Callable[[int, int], None] | None = None
                      ) -> StartedService:
        return replace(self, replicas=replicas, on_replica=on_replica)

    def check(self, limits: Sequence[Limit | None]) -> None:
        self.backend.check(limits)

    def ceiling(self, shape: Shape) -> tuple[int, str]:
        """The machine's CPUs, else 1 CPU when the backend cannot set more (in-process)."""
        cpus = os.cpu_count() or 1
        problem = ""
        for millicores, words in ((cpus * 1000, f"the machine's {cpus} CPUs"),
                                  (1000, f"1 CPU (the most --backend {self.name} can set)")):
            try:
                self.check([shape(millicores)])
                return millicores, words
            except ValueError as exc:
                problem = str(exc)
        raise ValueError(problem)

    def measure(self, limit: Limit | None, *, name: str, plan: LoadPlan, data_dir: Path,
                sweep: SweepInfo | None = None, index: int = 1,
                progress: Progress | None = None,
                observers: Sequence[Callable[[RequestRecord], None]] = (),
                sample_usage: bool = False, on_target: Callable[[str], None] | None = None,
                on_recorded: Callable[[Measurement], None] | None = None) -> Measurement:
        target = self.target(limit, index)
        if on_target is not None:
            on_target(" ".join(target.argv))
        load = replace(self.load, plan=plan)
        return measure(
            lambda started: target_spec(started, load, name=name, data_dir=data_dir,
                                        command=self.command, sweep=sweep,
                                        settle_s=settle_s(limit)),
            target=target, progress=progress, observers=observers, sample_usage=sample_usage,
            on_started=self.on_started, on_recorded=on_recorded, on_stopped=self.on_stopped)

    def target(self, limit: Limit | None, index: int) -> Target | ReplicaSet:
        if not self.replicas:
            return self.backend.target(limit, free_port(), index=index)
        return ReplicaSet(self.backend, limit, self.replicas, on_started=self.on_replica)
