"""``http-timing advise --cgroup TARGET --url URL``: the smallest CPU limit for the user's own
*running* service, found by changing its limit in place, and put back at the end.

    http-timing advise --cgroup PATH|pid:PID|docker:NAME --url URL --p99 MS
                       [-X M] [-H 'N: V'] [-d BODY] [--targets FILE] [--cacert F | -k]
                       [--requests N | --rate R --duration D | --concurrency C]
                       [--allow-new-limit] [--keep] [--json] ...

The same search as for burn-service (``client.commands.advise``, whose :class:`Advisor` this
is), with each run made by :class:`client.run.inplace.InPlace` instead of a started service:

1. **Profile** without a limit where the target can run without one (a cgroup), else at the
   ceiling (a Docker container: ``--cpus`` of all the machine's CPUs); CPU per request and per-second usage from the group's own
   counters (the ``--cgroup`` timeline), not a ``/metrics`` page.
2. **Guess** with the quota model, **verify** and **converge** as ``advise`` does, each run at
   a limit set in place and in force (the quota file reads it back) before a request is sent.
3. **25 % less**: the answer's limit times 0.75 is run too, to show what a tighter limit does.
4. **Say it**: the runs at the answer, what 25 % less did, the throttled requests and periods
   the group counted in each run, and how to keep the answer for this kind of target.

Whatever ends it (the answer, an error, Ctrl-C, SIGTERM) the group gets back the limit it had
(``--keep``: the answer, when there is one). Bad input is one line (exit 2): no such target, no
permission, a target without a limit and no ``--allow-new-limit``, a target the service misses
even without a limit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from client.analysis.advise import Advice, floor_millicores, shape
from client.analysis.advise_model import Profile
from client.analysis.advise_target import LatencyTarget, Measured, pooled
from client.analysis.cgroup import CgroupReport
from client.analysis.report import Report, build_report
from client.commands.advise import EXIT_NOT_MET, Advisor, save_answer, target_from
from client.commands.common import EXIT_INTERRUPTED, EXIT_OK, check_folders, plan_from
from client.commands.inplace import InPlaceBackend, inplace_from, request_words
from client.commands.options import CliError
from client.data.metadata import SweepInfo
from client.data.naming import check_file_name, sweep_stem
from client.render.advise import format_advice, format_runs_table, limit_words
from client.render.inplace import format_evidence, format_less, format_verification
from client.render.permanent import permanent_lines
from client.render.progress import RunProgress
from client.run.inplace import InPlace, InPlaceError, timeline_usage
from client.run.limiters import LimiterError
from client.run.plan import LoadPlan
from client.run.record import RecordedRun
from client.run.recorder import stop_on_terminate
from client.run.usage import UsageSample
from cpuquota.cgroupfs import available_cpus
from cpuquota.limit import Limit

__all__ = ["LESS", "LiveAdvisor", "command_advise_live"]

LESS = 0.75   # "what 25 % less does"


def ceiling_for(inplace: InPlace, limit_of: Any) -> tuple[int, str]:
    """The largest limit to try: the CPUs this machine lets the service use, or the quota of
    a group above it, whichever is less."""
    cpus = available_cpus()
    millicores, words = cpus * 1000, f"the machine's {cpus} CPUs"
    ceiling = getattr(inplace.limiter, "ceiling", lambda: None)()
    if ceiling is not None and ceiling.millicores < millicores:
        millicores, words = ceiling.millicores, f"the {ceiling.cpus:g} CPU quota above the group"
    try:
        inplace.check([limit_of(millicores)])
    except LimiterError as exc:
        raise CliError(str(exc)) from None
    return millicores, words


class LiveAdvisor(Advisor):
    """``Advisor`` whose runs set the running service's limit in place."""

    def __init__(self, opts: argparse.Namespace, plan: LoadPlan, inplace: InPlace,
                 target: LatencyTarget, prefix: str, started: datetime, argv: list[str], *,
                 span: tuple[int, int, str]) -> None:
        super().__init__(opts, plan, InPlaceBackend(inplace), target, prefix,  # type: ignore[arg-type]
                         started, argv, span=span)
        self.inplace = inplace
        self.load = f"{plan.describe()}, {request_words(inplace)}"
        self.sampled_warmup = 0           # the group's timeline starts after the warm-up
        self.evidence: dict[str, CgroupReport | None] = {}
        self.less: Measured | None = None
        self.applied: str | None = None       # --apply: what was patched

    def advise(self) -> Advice:
        advice = super().advise()
        rec = advice.recommended
        if rec is not None:
            millicores = math.floor(rec.millicores * LESS)
            if millicores >= self.floor:
                print(f"\nadvise: {LESS:g} x the answer: what 25 % less does", flush=True)
                self.less = pooled(self.judge(self.shape(millicores), "less"), self.target)
        return advice

    def profile(self) -> Profile:
        """As ``Advisor.profile``; with several pods the per-second usage the usage rules read
        is the mean pod's (the pods' summed usage / their number: those rules set a limit per
        pod), the CPU per request the whole of it."""
        profile = super().profile()
        pods = len(self.inplace.pod_specs)
        if pods > 1 and profile.usage:
            profile = replace(profile, usage=tuple(u / pods for u in profile.usage))
            print(f"profile: {sum(profile.usage) / len(profile.usage):.2f} CPU per second for "
                  f"the mean pod (the {pods} pods' usage summed / {pods}): what the usage "
                  "rules read", flush=True)
        return profile

    def record(self, limit: Limit | None, role: str, *, sample: bool = False,
               plan: LoadPlan | None = None
               ) -> tuple[RecordedRun, Report, list[UsageSample], str | None]:
        name = self.name_for(limit, role)
        inplace = self.inplace
        applied = limit
        how = limit_words(limit)
        if limit is None and not inplace.limiter.can_remove:   # all the CPUs it may have
            applied = self.shape(self.ceiling)
            how = (f"{limit_words(applied)}, {self.ceiling_words} ({inplace.limiter.kind} "
                   "cannot take a limit away)")
        print(f"\n{name}: {inplace.target.spec} at {how}", flush=True)
        plan = plan or self.plan
        sweep = SweepInfo(sweep_stem(self.prefix, "advise"), "inplace",
                          limit.cpus if limit else 0, self.started.isoformat())
        try:
            measured = inplace.measure(applied, name=name, plan=plan,
                                       data_dir=self.opts.data_dir,
                                       command=inplace.template.command, sweep=sweep,
                                       progress=RunProgress(plan.requests, limit_words(applied)))
        except (LimiterError, InPlaceError) as exc:
            raise CliError(f"{exc} (runs so far are saved in {self.opts.data_dir})") from None
        if measured.interrupted:
            raise KeyboardInterrupt
        report = build_report(measured.run)
        self.evidence[name] = report.cgroup
        samples = timeline_usage(measured.run.timeline) if sample else []
        counter = f"the group's {inplace.target.usage_source.kind}" if samples else None
        return measured.recorded, report, samples, counter

    def add(self, row: Measured, *, again: bool = False) -> None:
        super().add(row, again=again)
        print("    " + format_evidence(self.evidence.get(row.name)), flush=True)

    def to_dict(self, advice: Advice) -> dict[str, Any]:
        out = advice.to_dict()
        rec = advice.recommended
        out["inplace"] = {
            "target": self.inplace.target.spec, "kind": self.inplace.limiter.kind,
            "set_by": self.inplace.limiter.description,
            "original": _limit_dict(self.inplace.original),
            "left_at": _limit_dict(self.inplace.restore_to),
            "unchanged": self.inplace.unchanged,
            "applied": self.applied,
            "less_25": self.less.to_dict() if self.less else None,
            "cgroup": {name: (report.to_dict() if report else None)
                       for name, report in self.evidence.items()},
            "permanent": permanent_lines(self.inplace.limiter.kind, self.inplace.limiter.names,
                                         rec) if rec else []}
        return out

    def words(self, advice: Advice) -> str:
        """What is printed after ``format_advice``: the verification, 25 % less, for good."""
        lines = ["", format_verification(advice, self.runs, self.evidence), ""]
        if advice.recommended is not None:
            lines.append(format_less(advice, self.less, LESS))
            lines.append("")
            lines.append("To keep it:")
            lines += ["  " + line for line in permanent_lines(
                self.inplace.limiter.kind, self.inplace.limiter.names, advice.recommended)]
        return "\n".join(lines) + "\n"


def _limit_dict(limit: Limit | None) -> dict[str, Any] | None:
    return None if limit is None else {"cpus": limit.cpus, "quota_us": limit.quota_us,
                                       "period_us": limit.period_us, "burst_us": limit.burst_us}


def apply_for_good(inplace: InPlace, limit: Limit) -> str:
    """``--apply``: the answer into the pod's Deployment (after the pod got its limit back)."""
    patch = getattr(inplace.limiter, "patch_deployment", None)
    if patch is None:
        raise CliError(f"--apply patches a Kubernetes Deployment; {inplace.limiter.kind} "
                       "targets: see 'To keep it' in the answer")
    try:
        done = str(patch(limit))
    except LimiterError as exc:
        raise CliError(str(exc)) from None
    print(f"in place: {done}", flush=True)
    return done


def command_advise_live(opts: argparse.Namespace, argv: list[str]) -> int:
    started = datetime.now(timezone.utc)
    target = target_from(opts)
    plan = plan_from(opts)
    check_folders(opts)
    prefix = started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    inplace = inplace_from(opts, argv, "advise")
    if opts.apply and not inplace.limiter.names.get("owner"):
        raise CliError(f"--apply patches a Kubernetes Deployment: {inplace.target.spec} is not "
                       "a pod of one (see 'To keep it' in the answer)")
    limit_of = shape(opts.period_ms, opts.burst_ms)
    floor = floor_millicores(opts.period_ms)
    ceiling, ceiling_words = ceiling_for(inplace, limit_of)
    try:
        inplace.check([limit_of(floor)])
    except LimiterError as exc:
        raise CliError(str(exc)) from None
    out = sys.stderr if opts.json else sys.stdout
    advisor = LiveAdvisor(opts, plan, inplace, target, prefix, started, argv,
                          span=(floor, ceiling, ceiling_words))
    with contextlib.redirect_stdout(out):
        try:
            with stop_on_terminate(), inplace.restoring():
                advice = advisor.advise()
                if opts.keep and advice.recommended is not None:
                    inplace.keep(advice.recommended)
        except KeyboardInterrupt:
            print(f"\nhttp-timing advise: interrupted after {len(advisor.runs)} run(s); every "
                  f"completed request is saved in {opts.data_dir}", file=sys.stderr)
            if advisor.runs:
                print(format_runs_table(advisor.runs), end="", file=sys.stderr)
            return EXIT_INTERRUPTED
        except InPlaceError as exc:
            raise CliError(str(exc)) from None
        if opts.apply and advice.recommended is not None:
            advisor.applied = apply_for_good(inplace, advice.recommended)
        stem = sweep_stem(prefix, "advise")
        files = save_answer(advice, opts.pictures_dir, stem, less=advisor.less)
        answer = advisor.to_dict(advice)
        files[-1].write_text(json.dumps(answer, indent=2, allow_nan=False) + "\n",
                             encoding="utf-8")
        words = advisor.words(advice)
        with files[1].open("a", encoding="utf-8") as tables:
            tables.write("\n" + words)
        if not opts.json:
            print()
            print(format_advice(advice), end="")
            print(words, end="")
            print(f"\n{len(advice.runs) + (1 if advisor.less else 0)} runs in "
                  f"{time.monotonic() - advisor.began:.0f} s; raw data in {opts.data_dir}; "
                  + ", ".join(map(str, files)))
    if opts.json:
        print(json.dumps(answer, indent=2, allow_nan=False))
    return EXIT_OK if advice.recommended is not None else EXIT_NOT_MET
