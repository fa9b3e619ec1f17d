"""The live advice: the smallest CPU limit that meets a latency target, proven by runs.

1. **Profile**: one run without a limit (where the service can run without one, else at its
   ceiling), its usage sampled every second: CPU per request, per-second usage, the load's
   shape. A target the typical request misses even without a limit is bad input; one that
   only its requests slow without throttling miss is said (``client.analysis.goal``).
2. **Guess**: the quota model proposes the smallest limit that meets the target
   (``client.analysis.advise_model``).
3. **Verify**: real runs from the guess (and at the usage rules' limits), through the one
   search (:mod:`client.advise.search`, its stepping ``client.analysis.advise``), each run
   judged by the requests its quota delayed; a narrow verdict is run once more, a miss above
   a met limit is run once more before it is believed, the answer confirmed by a second run.
4. **Alternatives**: a shorter period or a burst of one quota, run where the model says they
   need at most 90 %; on a running service, the answer times 0.75 (what 25 % less does).

Each run is one ``AtLimit.measure`` (``client.run.at_limit``): burn-service started under the
limit, or the running service at a limit set in place; the advice asks only what the service
can do (its ``capabilities``), never which kind it is. Nothing is printed here: each line of
progress goes to the :class:`Hooks`' ``say``, each run's requests to its ``progress``.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from client.advise import AdviseError
from client.advise.answer import Answer
from client.advise.search import Rules, Search
from client.analysis.advise import (SAVING, Advice, Alternative, UsageResult,
                                    alternative_guesses, conclude, floor_millicores,
                                    needs_repeat, shape,
                                    to_confirm, to_recheck, unmet_reason, unthrottled_miss,
                                    verdicts)
from client.analysis.advise_model import (ModelPoint, Profile, build_profile, model_curve,
                                          model_guess, profile_plan, usage_limits)
from client.analysis.goal import LatencyGoal, Measured, measured, pooled_runs
from client.analysis.cgroup import CgroupReport
from client.analysis.report import Report, build_report
from client.data.files import writing
from client.data.metadata import SweepInfo
from client.data.naming import run_name, sweep_stem
from client.render.advise import (format_advice, format_run, format_runs_table, limit_words,
                                  save_advice_figure)
from client.render.inplace import format_evidence, format_less, format_verification
from client.render.permanent import permanent_lines
from client.run.at_limit import RUN_ERRORS, AtLimit
from client.run.measure import Progress
from client.run.plan import LoadPlan
from client.run.record import RecordedRun, load_average
from client.run.usage import UsageSample
from cpuquota.limit import Limit

__all__ = ["LESS", "Advisor", "Asked", "Hooks", "save_answer", "span"]

LESS = 0.75        # on a running service: "what 25 % less does"


@dataclass(frozen=True)
class Hooks:
    """What the command shows of the advice: a line of progress (``say``), and a run's
    requests as they complete (``progress(requests, what)``, e.g.
    ``client.render.progress.RunProgress``)."""

    say: Callable[[str], None] = lambda line: None
    progress: Callable[[int | None, str], Progress] | None = None


@dataclass(frozen=True)
class Asked:
    """What the advice was asked, in plain values: the load, the limits' shape, the search's
    bounds, where the runs go and how they are named."""

    plan: LoadPlan
    target: LatencyGoal
    prefix: str                   # of the runs' and the answer's file names
    started: datetime
    data_dir: Path
    span: tuple[int, int, str]    # floor and ceiling (millicores), the ceiling's words
    period_ms: float
    burst_ms: float | None = None
    warmup: int = 0
    profile_seconds: float = 10.0
    max_runs: int = 12
    alternatives: bool = True


class Advisor:
    """One advice: its runs, each at a limit of ``at``, in the order of the module's steps;
    on a running service also what 25 % less did and what its group counted in each run."""

    def __init__(self, asked: Asked, at: AtLimit, hooks: Hooks = Hooks()) -> None:
        self.asked, self.at, self.hooks, self.say = asked, at, hooks, hooks.say
        self.plan, self.target, self.prefix = asked.plan, asked.target, asked.prefix
        self.floor, self.ceiling, self.ceiling_words = asked.span
        self.shape = shape(asked.period_ms, asked.burst_ms or 0.0)
        self.caps = at.capabilities
        self.runs: list[Measured] = []
        self.names: set[str] = set()
        self.began = time.monotonic()
        # warm-up requests the usage samples include (a group's timeline starts after them)
        self.sampled_warmup = 0 if self.caps.evidence else asked.warmup
        self.load = f"{asked.plan.describe()}, {at.sends}"
        self.evidence: dict[str, CgroupReport | None] = {}   # a running service's group
        self.less: Measured | None = None
        self.applied: str | None = None       # --apply: what was patched
        self.search: Search[Measured] = Search(
            lambda millicores, role, again: self.measure(self.shape(millicores), role,
                                                         again=again),
            Rules(lambda rows: verdicts(rows, self.target), needs_repeat,
                  lambda rows: to_recheck(rows, self.target),
                  lambda rows: to_confirm(rows, self.target)),
            start=self.ceiling, floor=self.floor, ceiling=self.ceiling,
            max_runs=asked.max_runs, say=self.say)

    def advise(self) -> Advice:
        self.say(f"advise: {self.at.description}; {self.load}; target "
                 f"{self.target.describe()}; limits from {self.floor / 1000:g} CPU up to "
                 f"{self.ceiling_words}")
        if (load := load_average()) is not None:
            self.say(f"advise: load average {load[0]:.1f} on {os.cpu_count()} CPUs (a busy "
                     "machine slows every run, limited or not)")
        profile = self.profile()
        guess = model_guess(profile, self.target, self.shape, self.floor, self.ceiling)
        self.say("model: " + (
            f"{limit_words(guess.limit)} should meet it (predicted p50 {guess.p50_ms:.1f}, p90 "
            f"{guess.p90_ms:.1f}, p99 {guess.p99_ms:.1f} ms, throttled "
            f"{guess.throttled_fraction * 100:.0f} %)" if guess
            else f"no limit up to {self.ceiling_words} meets it; trying that"))
        start = guess.limit.millicores if guess else self.ceiling
        self.search.start = start
        self.search.at(min(self.ceiling, max(self.floor, start)), "guess")
        rules = usage_limits(profile.usage, self.floor, self.ceiling)
        for _, _, millicores in rules:  # evidence for the search too
            if not any(r.millicores == millicores for r in self.search.rows):
                self.search.at(millicores, "usage")
        self.search.run()
        main = self.search.rows
        at, below = conclude(main, self.target)
        top = [r for r in main if r.millicores == self.ceiling]
        reason = None if at else unmet_reason(profile, self.target, top[-1] if top else None,
                                              self.ceiling_words)
        usage = tuple(UsageResult(rule, cpus, self.shape(m), pooled_runs(
            [r for r in main if r.millicores == m], self.target)) for rule, cpus, m in rules)
        alternatives: tuple[Alternative, ...] | None = None
        if at is not None and at.limit is not None and self.asked.alternatives:
            alternatives = self.alternatives(profile, at.limit, guess)
        low = max(self.floor, min([r.millicores or start for r in main] + [start]) // 4)
        curve = model_curve(profile, self.target, self.shape, low, self.ceiling)
        advice = Advice(self.target, self.at.description, self.load, profile, guess,
                        tuple(self.runs), at, below, self.floor, self.ceiling, reason, usage,
                        alternatives, tuple(curve))
        if self.caps.restores and at is not None and at.limit is not None:
            millicores = math.floor(at.limit.millicores * LESS)
            if millicores >= self.floor:
                self.say(f"\nadvise: {LESS:g} x the answer: what 25 % less does")
                self.less = pooled_runs(self.judge(self.shape(millicores), "less"), self.target)
        return advice

    # -- the steps -----------------------------------------------------------------------

    def profile(self) -> Profile:
        """Step 1: the run without a limit; a target it misses is bad input."""
        plan = profile_plan(self.plan, self.asked.profile_seconds)
        recorded, report, samples, counter = self.record(None, "profile", sample=True, plan=plan)
        row = replace(measured(report, role="profile", limit=None, target=self.target,
                               records=recorded.run.records), missed=None, narrow=False)
        self.add(row)
        profile = build_profile(recorded.run, report, row, samples, plan=self.plan,
                                counter=counter, warmup=self.sampled_warmup)
        usage = (f"; {sum(profile.usage) / len(profile.usage):.2f} CPU used per second on "
                 f"average ({len(profile.usage)} samples)") if profile.usage else ""
        self.say(f"profile: {profile.cpu_ms:.2f} ms of CPU per request ({profile.cpu_source}), "
                 f"{profile.overhead_ms:.1f} ms of each request outside the service{usage}")
        self.check_profile(profile, report)
        pods = self.at.instances
        if pods > 1 and profile.usage:   # the usage rules set a limit per pod
            profile = replace(profile, usage=tuple(u / pods for u in profile.usage))
            self.say(f"profile: {sum(profile.usage) / len(profile.usage):.2f} CPU per second "
                     f"for the mean pod (the {pods} pods' usage summed / {pods}): what the "
                     "usage rules read")
        return profile

    def check_profile(self, profile: Profile, report: Report) -> None:
        """Failed requests, or a target the typical request misses without a limit, are bad
        input; a target only the requests slow without throttling miss is said."""
        free, target = profile.run, self.target
        where = f"{self.asked.data_dir}/{profile.run.name}"
        if free.errors:
            raise AdviseError(f"{free.errors} request(s) failed without a limit ({where}.csv): "
                              "fix that before choosing a limit")
        missed = target.misses(free.judged_p90, free.judged_p99, None)
        if missed:
            work = (f"; the work itself takes {profile.cpu_ms:.1f} ms of CPU per request"
                    if profile.cpu_ms >= target.p99_ms else "")
            raise AdviseError(f"the target {target.describe()} is below what the service does "
                              f"without any CPU limit ({', '.join(missed)}; {where}.csv){work}: "
                              "no limit can make it faster (on a busy machine, try again or a "
                              "looser target)")
        if words := unthrottled_miss(free, target):
            self.say(f"profile: {words}")

    def alternatives(self, profile: Profile, recommended: Limit,
                     guess: ModelPoint | None) -> tuple[Alternative, ...]:
        """A shorter period, a burst: run where the model says they need at most 90 %."""
        out = []
        most = int(recommended.millicores * SAVING)
        for kind, limit_of, point, first in alternative_guesses(
                profile, self.target, recommended, guess, self.possible):
            results = [pooled_runs(self.judge(limit_of(first), kind), self.target)]
            middle = round((first * most) ** 0.5)
            if not results[0].met and first < middle <= most:
                results.append(pooled_runs(self.judge(limit_of(middle), kind), self.target))
            out.append(Alternative(kind, point, tuple(results)))
        return tuple(out)

    # -- one run ---------------------------------------------------------------------------

    def possible(self, limit: Limit) -> bool:
        try:
            self.at.check([limit])
        except ValueError:
            return False
        return True

    def judge(self, limit: Limit, role: str) -> list[Measured]:
        """Run ``limit`` (of any shape); once more when its verdict could flip."""
        runs = [self.measure(limit, role)]
        if needs_repeat(runs):
            runs.append(self.measure(limit, role, again=True))
        return runs

    def measure(self, limit: Limit, role: str, *, again: bool = False) -> Measured:
        recorded, report, _, _ = self.record(limit, role)
        row = measured(report, role=role, limit=limit, target=self.target,
                       records=recorded.run.records)
        self.add(row, again=again)
        return row

    def add(self, row: Measured, *, again: bool = False) -> None:
        self.runs.append(row)
        self.say(format_run(len(self.runs), row) + (" (run again: the first was narrow)"
                                                     if again else ""))
        if self.caps.evidence:
            self.say("    " + format_evidence(self.evidence.get(row.name)))

    def name_for(self, limit: Limit | None, role: str) -> str:
        name = run_name(self.prefix, "advise", limit)
        if limit is not None and role == "period":
            name += f"-period{limit.period_ms:g}"
        elif limit is not None and role == "burst":
            name += f"-burst{limit.burst_ms:g}"
        unique, count = name, 1
        while unique in self.names:
            count += 1
            unique = f"{name}-{count}"
        self.names.add(unique)
        return unique

    def record(self, limit: Limit | None, role: str, *, sample: bool = False,
               plan: LoadPlan | None = None
               ) -> tuple[RecordedRun, Report, list[UsageSample], str | None]:
        """One run at ``limit`` (sampling the usage when ``sample``): a started service is
        stopped by its id whatever happens; a Ctrl-C ends the advice once the files are
        complete. Without a limit where none can be taken away: at the ceiling."""
        name = self.name_for(limit, role)
        applied, how = limit, limit_words(limit)
        if limit is None and not self.at.can_remove:   # all the CPUs it may have
            applied = self.shape(self.ceiling)
            how = (f"{limit_words(applied)}, {self.ceiling_words} ({self.at.kind} cannot take "
                   "a limit away)")
        plan = plan or self.plan
        sweep = SweepInfo(sweep_stem(self.prefix, "advise"), self.at.name,
                          limit.cpus if limit else 0, self.asked.started.isoformat())
        progress = self.hooks.progress
        at_how = f" at {how}" if self.caps.restores else ""
        try:
            done = self.at.measure(
                applied, name=name, plan=plan, data_dir=self.asked.data_dir, sweep=sweep,
                index=len(self.runs) + 1, sample_usage=sample,
                progress=None if progress is None else progress(plan.requests,
                                                                limit_words(applied)),
                on_target=lambda words: self.say(f"\n{name}: {words}{at_how}"))
        except RUN_ERRORS as exc:
            raise AdviseError(f"{exc} (runs so far are saved in {self.asked.data_dir})"
                              ) from None
        if done.interrupted:
            raise KeyboardInterrupt
        report = build_report(done.run)
        self.evidence[name] = report.cgroup
        return done.recorded, report, done.usage, done.usage_counter

    # -- the answer --------------------------------------------------------------------------

    def answer(self, advice: Advice) -> Answer:
        """The answer; on a running service with what was done to it."""
        if not self.caps.restores:
            return Answer(advice)
        rec = advice.recommended
        return Answer(advice, inplace={
            **(self.at.state() or {}),
            "applied": self.applied,
            "less_25": self.less.to_dict() if self.less else None,
            "cgroup": {name: (report.to_dict() if report else None)
                       for name, report in self.evidence.items()},
            "permanent": permanent_lines(self.at.kind, self.at.names, rec) if rec else []})

    def words(self, advice: Advice) -> str:
        """What is said after ``format_advice`` on a running service: the verification,
        25 % less, for good ("" for burn-service started by the command)."""
        if not self.caps.restores:
            return ""
        lines = ["", format_verification(advice, self.runs, self.evidence), ""]
        if advice.recommended is not None:
            lines.append(format_less(advice, self.less, LESS))
            lines.append("")
            lines.append("To keep it:")
            lines += ["  " + line for line in permanent_lines(
                self.at.kind, self.at.names, advice.recommended)]
        return "\n".join(lines) + "\n"


def save_answer(answer: Answer, folder: Path, stem: str, *, less: Measured | None = None,
                words: str = "") -> list[Path]:
    """The picture (with ``less``, the run at 25 % less, when there is one), the tables
    (Markdown, ``words`` after them) and the JSON of the answer."""
    advice = answer.advice
    assert isinstance(advice, Advice)
    picture = save_advice_figure(advice, folder / f"{stem}.png", less=less)
    tables, path = folder / f"{stem}.md", folder / f"{stem}.json"
    with writing(tables):
        tables.write_text(f"advise: {advice.target.describe()}; {advice.backend}; "
                          f"{advice.load}\n\n{format_advice(advice)}\nEvery run:\n\n"
                          f"{format_runs_table(advice.runs)}" + ("\n" + words if words else ""),
                          encoding="utf-8")
    with writing(path):
        path.write_text(json.dumps(answer.to_dict(), indent=2, allow_nan=False) + "\n",
                        encoding="utf-8")
    return [picture, tables, path]


def span(at: AtLimit, period_ms: float, burst_ms: float) -> tuple[int, int, str]:
    """The limits the search may try: the floor and the ceiling (millicores), the ceiling's
    words; a service that cannot be given them is a one-line ``AdviseError``."""
    limit_of, floor = shape(period_ms, burst_ms), floor_millicores(period_ms)
    try:
        ceiling, ceiling_words = at.ceiling(limit_of)
        at.check([limit_of(floor)])
    except ValueError as exc:
        raise AdviseError(str(exc)) from None
    if problem := at.problem():
        raise AdviseError(problem)
    return floor, ceiling, ceiling_words
