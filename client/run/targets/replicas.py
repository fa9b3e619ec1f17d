"""A replica set: N copies of the service, each under its own limit, as one target.

"N small or 1 big?": ``sweep --replicas 1,4 --cpus 0.4`` runs the same total CPU as one
service of 0.4 CPU and as four of 0.1 CPU each (kernel: a cgroup each; in-process: each its own
``--cpu-limit``; docker: a container each). The client spreads requests round-robin over them
(``client.run.http.RoundRobinSender``), so nothing stands in between but the client.

Starting many at once: every replica is launched (a process, a detached container) and then
waits for ``/healthz`` on its own thread. At most ``parallel`` replicas start at the same time,
by default as many as the machine's CPUs can run at their limit (a replica starting under 1 %
of a CPU uses only that, so fifty of them start together; under 1 CPU each, two at a time on
two cores). ``stop()`` stops every replica launched, by its pid or container id, also when the
start failed or was interrupted half way.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from client.run.recorder import holding_signals
from client.run.targets.service import Service, ServiceError, free_port
from cpuquota.limit import Limit

__all__ = ["ReplicaSet", "starting_pool"]


class Makes(Protocol):
    def target(self, limit: Limit | None, port: int, *, index: int = 1) -> Service: ...


def starting_pool(limit: Limit | None, cpus: int | None = None) -> int:
    """How many replicas may start at once: the machine's CPUs divided by what one replica
    may use (its limit, at most one CPU: start-up is one Python process importing)."""
    cores = cpus or os.cpu_count() or 1
    share = min(1.0, limit.cpus) if limit is not None else 1.0
    return max(1, math.ceil(cores / share))


class ReplicaSet:
    """``count`` replicas of ``backend``'s service, each under ``limit`` (see the module)."""

    def __init__(self, backend: Makes, limit: Limit | None, count: int, *,
                 parallel: int | None = None,
                 on_started: Callable[[int, int], None] | None = None) -> None:
        if count < 1:
            raise ValueError(f"--replicas must be >= 1 (got {count})")
        self.limit, self.count = limit, count
        self.members = [backend.target(limit, free_port(), index=i + 1) for i in range(count)]
        self.parallel = parallel or starting_pool(limit)
        self.on_started = on_started
        self.start_s: float | None = None

    @property
    def base_url(self) -> str:
        return self.members[0].base_url

    @property
    def urls(self) -> list[str]:
        return [m.base_url for m in self.members]

    @property
    def argv(self) -> list[str]:
        return self.members[0].argv

    @property
    def ident(self) -> str:
        idents = [m.ident for m in self.members]
        shown = ", ".join(idents[:4]) + (f", ... ({len(idents)} in all)" if len(idents) > 4 else "")
        return shown

    def describe(self) -> dict[str, Any]:
        return {"replicas": [m.describe() for m in self.members]}

    def memory_mib(self) -> list[float]:
        """Each replica's resident memory now (those that can be read)."""
        return [mib for m in self.members if (mib := m.memory_mib()) is not None]

    def start(self) -> ReplicaSet:
        """Launch every replica (at most ``parallel`` starting at once) and wait until all
        answer ``/healthz``; on a failure or Ctrl-C, stop all that were launched and raise."""
        began = time.monotonic()
        slots = threading.Semaphore(self.parallel)
        errors: list[ServiceError] = []
        done: list[int] = []
        lock = threading.Lock()

        def wait(member: Service) -> None:
            try:
                member.wait_healthy()
            except ServiceError as exc:
                errors.append(exc)
            finally:
                slots.release()
                with lock:
                    done.append(1)
                    if self.on_started is not None:
                        self.on_started(len(done), self.count)

        waiters: list[threading.Thread] = []
        try:
            for member in self.members:
                while not slots.acquire(timeout=0.1):  # Ctrl-C arrives while waiting here
                    if errors:
                        break
                if errors:
                    break
                with holding_signals():  # launched is stopped: never half launched
                    member.launch()
                waiter = threading.Thread(target=wait, args=(member,), daemon=True)
                waiter.start()
                waiters.append(waiter)
            for waiter in waiters:
                while waiter.is_alive():
                    waiter.join(0.1)
            if errors:
                raise errors[0]
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - began
        return self

    def stop(self) -> str:
        """Stop every replica launched (by its own id); their last words, joined."""
        words = [member.stop() for member in self.members]
        return "\n".join(w for w in words if w)

    def __enter__(self) -> ReplicaSet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

