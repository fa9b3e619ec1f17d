"""Bring-up as data: a list of small steps, each with a check, a do and an undo.

``up`` runs each step whose check is false and checks it again afterwards (a step that does not
reach its check is an error naming the step). ``down`` runs every undo in reverse order, all of
them even when one fails, and reports the failures together. An undo must be safe to call when
its step never ran (it works from what it finds: pids, links, directories).

A step marked ``update`` may be done again on a node that is up (an add-on's manifests, a
setting of the cgroup root): when only such steps are pending, ``up`` runs them on the node as
it is, without taking anything down (``updatable``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

__all__ = ["Step", "StepError", "run_up", "run_down", "pending", "updatable"]

C = TypeVar("C")


class StepError(RuntimeError):
    """A step failed; the message names it."""


@dataclass(frozen=True)
class Step(Generic[C]):
    name: str
    check: Callable[[C], bool]
    do: Callable[[C], None]
    undo: Callable[[C], None] | None = None
    update: bool = False     # its do changes a running node in place (no daemon restarts)


def pending(steps: Sequence[Step[C]], ctx: C) -> list[str]:
    """The names of the steps whose check is false."""
    return [step.name for step in steps if not step.check(ctx)]


def updatable(steps: Sequence[Step[C]], ctx: C) -> list[str] | None:
    """The pending steps' names when every one of them may be done on a running node (empty:
    nothing pending), else None."""
    todo = [step for step in steps if not step.check(ctx)]
    return [step.name for step in todo] if all(step.update for step in todo) else None


def run_up(steps: Sequence[Step[C]], ctx: C, log: Callable[[str], None] = print) -> dict[str, float]:
    """Run the steps in order; return the wall seconds of each step that had to do something."""
    seconds: dict[str, float] = {}
    for step in steps:
        if step.check(ctx):
            continue
        t0 = time.monotonic()
        log(f"  {step.name} ...")
        try:
            step.do(ctx)
        except Exception as exc:
            raise StepError(f"step {step.name!r} failed: {exc}") from exc
        if not step.check(ctx):
            raise StepError(f"step {step.name!r} ran but its check is still false")
        seconds[step.name] = time.monotonic() - t0
    return seconds


def run_down(steps: Sequence[Step[C]], ctx: C, log: Callable[[str], None] = print) -> dict[str, float]:
    """Every undo in reverse order; raise once at the end if any failed."""
    seconds: dict[str, float] = {}
    failures: list[str] = []
    for step in reversed(steps):
        if step.undo is None:
            continue
        t0 = time.monotonic()
        try:
            step.undo(ctx)
        except Exception as exc:  # keep going: leave as little behind as possible
            failures.append(f"{step.name}: {exc}")
            log(f"  undo {step.name} failed: {exc}")
        seconds[step.name] = time.monotonic() - t0
    if failures:
        raise StepError("teardown left something behind: " + "; ".join(failures))
    return seconds
