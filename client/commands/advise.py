"""``http-timing advise``: the smallest CPU limit that meets a latency target, proven by runs.

    http-timing advise --p99 MS [--p90 MS] [--max-throttled PCT]
                       [--backend kernel|inprocess|docker|auto] [--period-ms P] [--burst-ms B]
                       [--requests N | --rate R --duration D | --concurrency C]
                       [--iterations N] [--name PREFIX] [--json] [--max-runs N]
                       [--no-alternatives]

1. **Profile**: one run without a limit, its service's ``/metrics`` scraped every second
   (``client.run.usage``): CPU per request, per-second usage, the load's shape. A target the
   typical request misses even without a limit is bad input (exit 2); one that only its
   requests slow without throttling miss (a wait that is not the CPU's) is said, and every
   run counts such requests apart (``client.analysis.advise_target``).
2. **Guess**: the quota model proposes the smallest limit that meets the target
   (``client.analysis.advise_model``).
3. **Verify**: real runs from the guess (and at the usage rules' limits), stepping and then
   bisecting over limits until the smallest that met is within 10 % of the largest that
   missed below it (``client.analysis.advise``), each run judged by the requests its quota
   delayed (a miss no throttled request made never raises the limit); a narrow verdict is
   run once more and the mean of the two counts, a miss above a met limit is run once more
   before it is believed, and the answer is confirmed by a second run. Up to the machine's
   CPUs (the in-process backend: 1 CPU); when even that misses, no recommendation (exit 3).
4. **Say it**, beside what the usage rules (p90 + 15 %, p95 of per-second usage) would set,
   each measured too, and whether a shorter period or a burst of one quota met the target
   with less (run when the model says they need at most 90 %; ``--no-alternatives``: never).

Each run is one ``client.run.measure`` (start, time, stop), saved like any other
(``<data-dir>/<prefix>-advise-<cpus>.csv/.json``, a repeat ``...-2``, an alternative
``...-period10`` / ``...-burst60``); the answer goes to
``<pictures-dir>/<prefix>-advise.png`` (the picture), ``.md`` (the tables) and ``.json``
(what ``--json`` prints; progress then goes to stderr). Every service is started on a free
port and stopped by its pid or container id, also on Ctrl-C (exit 130: the runs so far stay).

**A running service** (``--cgroup PATH|pid:PID|docker:NAME|k8s:NS/POD`` or ``--k8s
NS/deployment/NAME``, with ``--url URL``): the same search, each run at a limit set in place
(``client.run.inplace``) and in force before a request is sent; the profile runs without a
limit where the target can run without one, else at the ceiling (the CPUs it may use, or the
quota of a group above). The runs show what the group counted; the answer times 0.75 is run
too (what 25 % less does), and the answer says how to keep it (``--keep``: leave it in force;
``--apply``: patch the pod's Deployment). Whatever ends it (the answer, an error, Ctrl-C,
SIGTERM) the group gets back the limit it had. Both kinds of service are one
:class:`client.run.at_limit.AtLimit` to :class:`Advisor`; ``--passive`` answers from a
recorded window instead (``client.advise.passive``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from client.advise import AdviseError
from client.analysis.advise import (MAIN_ROLES, SAVING, Advice, Alternative, UsageResult,
                                    alternative_guesses, conclude, floor_millicores,
                                    needs_repeat, next_millicores, shape, to_confirm,
                                    to_recheck, unmet_reason, unthrottled_miss, verdicts)
from client.analysis.advise_model import (ModelPoint, Profile, build_profile, model_curve,
                                          model_guess, profile_plan, usage_limits)
from client.analysis.advise_target import LatencyTarget, Measured, measured, pooled
from client.analysis.cgroup import CgroupReport
from client.analysis.report import Report, build_report
from client.commands.common import (EXIT_INTERRUPTED, EXIT_OK, add_load_arguments,
                                    add_target_arguments, check_folders, plan_from,
                                    show_stopped)
from client.commands.inplace import add_inplace_arguments, at_limit_from, check_inplace_options
from client.commands.options import (CliError, OneLineParser, duration, instant, int_at_least,
                                     iso_utc, number_above, number_at_least)
from client.data.files import writing
from client.data.request import DEFAULT_ITERATIONS
from client.data.metadata import SweepInfo
from client.data.naming import check_file_name, run_name, sweep_stem
from client.render.advise import (format_advice, format_run, format_runs_table, limit_words,
                                  save_advice_figure)
from client.render.inplace import format_evidence, format_less, format_verification
from client.render.permanent import permanent_lines
from client.render.progress import RunProgress
from client.render.replay import format_passive, format_predicted_runs, format_workload
from client.run.at_limit import RUN_ERRORS, AtLimit
from client.run.inplace import InPlace, InPlaceError
from client.run.limiters import LimiterError
from client.run.plan import LoadPlan
from client.run.record import RecordedRun, load_average
from client.run.recorder import stop_on_terminate
from client.run.usage import UsageSample
from cpuquota.limit import DEFAULT_PERIOD_MS, Limit

__all__ = ["EXIT_NOT_MET", "LESS", "Advisor", "build_advise_parser", "command_advise",
           "target_from"]

EXIT_NOT_MET = 3   # no limit up to the ceiling met the target
LESS = 0.75        # on a running service: "what 25 % less does"


def build_advise_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="http-timing advise",
        description="Find the smallest CPU limit that meets a latency target: profile the "
        "service without a limit, let the quota model guess, verify with real runs.")
    parser.add_argument("--p99", type=number_above(0), required=True, metavar="MS",
                        help="the target: p99 latency at most MS milliseconds")
    parser.add_argument("--p90", type=number_above(0), metavar="MS",
                        help="and p90 at most MS milliseconds")
    parser.add_argument("--max-throttled", type=number_at_least(0), metavar="PCT",
                        help="and at most PCT %% of the requests delayed by throttling")
    add_target_arguments(parser)
    add_load_arguments(parser, per=" per run", iterations_default=None)
    parser.add_argument("--profile-seconds", type=number_above(0), default=10.0, metavar="S",
                        help="the run without a limit lasts at least S seconds (the same load "
                        "for longer: S per-second usage samples; default 10)")
    parser.add_argument("--max-runs", type=int_at_least(2), default=12, metavar="N",
                        help="most limits the search runs (default 12)")
    parser.add_argument("--no-alternatives", dest="alternatives", action="store_false",
                        help="do not run a shorter period or a burst, even when the model "
                        "says they need less")
    parser.add_argument("--name", default=None, metavar="PREFIX",
                        help="prefix of the file names (default <date>-<time>; '' for none)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"), metavar="DIR",
                        help="where every run of the search is saved, as <name>.csv and "
                        "<name>.json (default ./raw-data)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"), metavar="DIR",
                        help="where the answer goes: its picture, tables (.md) and JSON "
                        "(default ./pictures)")
    parser.add_argument("--json", action="store_true",
                        help="print the answer as JSON (progress goes to stderr)")
    add_inplace_arguments(parser, keep=True)
    passive = parser.add_argument_group(
        "without touching the service (--passive: no resize, no load)")
    passive.add_argument("--passive", action="store_true",
                         help="answer from the replay of a recorded window "
                         "(client.analysis.replay): --timeline FILE, or --cgroup TARGET "
                         "--duration S to record it first")
    passive.add_argument("--timeline", type=Path, metavar="NAME.cgroup.csv",
                         help="with --passive: the recorded window (http-timing record's, a "
                         "--cgroup run's, the node agent's)")
    passive.add_argument("--requests-from", type=Path, metavar="FILE",
                         help="with --passive: the window's requests (a run's CSV, a load "
                         "tool's file or an access log, as import reads them); without, the "
                         "added delay of a random arrival is judged")
    passive.add_argument("--since", type=duration, metavar="DURATION",
                         help="with --passive --k8s NS/KIND/NAME: the window the node agent "
                         "recorded, the last DURATION (90s, 10m, 1h; default 10m)")
    passive.add_argument("--until", type=instant, metavar="TIME",
                         help="with --passive --k8s NS/KIND/NAME: the window ends at TIME "
                         "(unix seconds, or ISO 8601 with its zone: 2026-11-28T14:00:00Z) "
                         "instead of now")
    return parser


def target_from(opts: argparse.Namespace) -> LatencyTarget:
    """The target of the options; nonsense is a one-line ``CliError``."""
    throttled = None if opts.max_throttled is None else opts.max_throttled / 100
    target = LatencyTarget(opts.p99, opts.p90, throttled)
    if problem := target.problem():
        raise CliError(problem)
    if opts.p99 >= opts.timeout * 1000:
        raise CliError(f"--p99 {opts.p99:g} ms is not below --timeout {opts.timeout:g} s: a "
                       "request that slow counts as failed")
    return target


def command_advise(argv: list[str]) -> int:
    try:
        return _advise(argv)
    except AdviseError as exc:
        raise CliError(str(exc)) from None


def _advise(argv: list[str]) -> int:
    opts = build_advise_parser().parse_args(argv)
    if opts.passive:
        return advise_passive(opts, argv, target_from(opts))
    passive_only = [flag for flag, value in (("--timeline", opts.timeline),
                                             ("--requests-from", opts.requests_from),
                                             ("--since", opts.since), ("--until", opts.until))
                    if value is not None]
    if passive_only:
        raise CliError(f"{', '.join(passive_only)}: with --passive only (a recorded window)")
    if not check_inplace_options(opts) and opts.iterations is None:
        opts.iterations = DEFAULT_ITERATIONS   # burn-service's work per request
    if opts.period_ms is None:
        opts.period_ms = DEFAULT_PERIOD_MS
    started = datetime.now(timezone.utc)
    target = target_from(opts)
    plan = plan_from(opts)
    check_folders(opts)
    prefix = started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    at, why_not_kernel = at_limit_from(opts, argv, "advise", plan, on_stopped=show_stopped)
    if opts.apply and (at.inplace is None or not at.inplace.limiter.names.get("owner")):
        spec = at.inplace.target.spec if at.inplace else at.description
        raise CliError(f"--apply patches a Kubernetes Deployment: {spec} is not a pod of one "
                       "(see 'To keep it' in the answer)")
    limit_of = shape(opts.period_ms, opts.burst_ms)
    floor = floor_millicores(opts.period_ms)
    try:
        ceiling, ceiling_words = at.ceiling(limit_of)
        at.check([limit_of(floor)])
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if problem := at.problem():
        raise CliError(problem)
    out = sys.stderr if opts.json else sys.stdout
    with contextlib.redirect_stdout(out):
        if why_not_kernel:
            print(f"advise: in-process throttle (no kernel quota here: {why_not_kernel})")
        advisor = Advisor(opts, plan, at, target, prefix, started, argv,
                          span=(floor, ceiling, ceiling_words))
        try:
            with stop_on_terminate(), at.holding():
                advice = advisor.advise()
                if opts.keep and at.inplace is not None and advice.recommended is not None:
                    at.inplace.keep(advice.recommended)
        except KeyboardInterrupt:
            print(f"\nhttp-timing advise: interrupted after {len(advisor.runs)} run(s); every "
                  f"completed request is saved in {opts.data_dir}", file=sys.stderr)
            if advisor.runs:
                print(format_runs_table(advisor.runs), end="", file=sys.stderr)
            return EXIT_INTERRUPTED
        except InPlaceError as exc:   # the limit could not be put back
            raise CliError(str(exc)) from None
        if opts.apply and at.inplace is not None and advice.recommended is not None:
            advisor.applied = apply_for_good(at.inplace, advice.recommended)
        files = save_answer(advice, opts.pictures_dir, sweep_stem(prefix, "advise"),
                            less=advisor.less)
        answer = advisor.to_dict(advice)
        files[-1].write_text(json.dumps(answer, indent=2, allow_nan=False) + "\n",
                             encoding="utf-8")
        words = advisor.words(advice)
        if words:
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


LOAD_OPTIONS = ("url", "requests", "concurrency", "rate", "max_throttled")  # not with --passive


def passive_problem(opts: argparse.Namespace) -> str | None:
    """What is wrong with ``--passive``'s options, in one line (None: nothing)."""
    given = [f"--{name.replace('_', '-')}" for name in LOAD_OPTIONS
             if getattr(opts, name, None) not in (None, False)]
    if given:
        return (f"{', '.join(given)}: not with --passive (it sends no load and answers from a "
                "recorded window by its requests' latency or its added delay)")
    if len([s for s in (opts.timeline, opts.cgroup, opts.k8s) if s is not None]) != 1:
        return ("--passive needs one of --timeline FILE (a recorded window), --cgroup TARGET "
                "--duration S (record it now) or --k8s NS/KIND/NAME (what the node agent "
                "recorded)")
    for flag, value in (("--since", opts.since), ("--until", opts.until)):
        if value is not None and opts.k8s is None:
            return f"{flag} goes with --passive --k8s NS/KIND/NAME (the node agent's window)"
    if opts.k8s is not None and opts.duration is not None:
        return "--duration goes with --passive --cgroup (--k8s reads what was recorded: --since)"
    if opts.cgroup is not None and opts.duration is None:
        return "--passive --cgroup needs --duration S: how long to record the group"
    if opts.timeline is not None and opts.duration is not None:
        return "--duration goes with --passive --cgroup (--timeline is already recorded)"
    return None


def advise_passive(opts: argparse.Namespace, argv: list[str], target: LatencyTarget) -> int:
    """``--passive``: the answer from the replay of a recorded window (no resize, no load)."""
    from client.advise.cluster import DEFAULT_SINCE_S, advise_workload, recorded_workload
    from client.advise.passive import Window, advise_timeline, record_window
    from client.commands.run import cgroup_target

    if problem := passive_problem(opts):
        raise CliError(problem)
    window = Window(opts.requests_from, opts.period_ms, opts.burst_ms, opts.name, opts.data_dir)
    since = DEFAULT_SINCE_S if opts.since is None else opts.since
    if opts.k8s is not None:
        if opts.until is not None and opts.until > time.time():
            raise CliError(f"--until {iso_utc(opts.until)} is in the future")
        answer = advise_workload(recorded_workload(opts.k8s), since, opts.until, target, window)
    elif opts.timeline is not None:
        answer = advise_timeline(opts.timeline, target, window)
    else:
        group = cgroup_target(opts.cgroup, None)
        assert group is not None
        path = record_window(group, window, opts.duration, opts.cgroup_interval,
                             ("http-timing", "advise", *argv), lambda line: print(
                                 line, file=sys.stderr if opts.json else sys.stdout, flush=True))
        answer = advise_timeline(path, target, window)
    if opts.json:
        print(json.dumps(answer.to_json(), indent=2))
        return EXIT_OK if answer.met else EXIT_NOT_MET
    said = answer.to_dict()
    if answer.workload is not None:
        print("\n".join(format_workload(answer.workload, f"the last {since:g} s" if opts.until
                                        is None else f"the {since:g} s to {iso_utc(opts.until)}")))
    print(format_passive(said))
    if answer.runs:
        at = answer.advice.at
        print(format_predicted_runs(answer.runs, None if at is None else at.millicores))
    return EXIT_OK if answer.met else EXIT_NOT_MET


def apply_for_good(inplace: InPlace, limit: Limit) -> str:
    """``--apply``: the answer into the pod's Deployment (after the pod got its limit back)."""
    try:
        done = inplace.limiter.patch_deployment(limit)
    except LimiterError as exc:
        raise CliError(str(exc)) from None
    print(f"in place: {done}", flush=True)
    return done


def save_answer(advice: Advice, folder: Path, stem: str, *,
                less: Measured | None = None) -> list[Path]:
    """The picture (with ``less``, the run at 25 % less, when there is one), the tables
    (Markdown) and the JSON of the answer."""
    picture = save_advice_figure(advice, folder / f"{stem}.png", less=less)
    tables, answer = folder / f"{stem}.md", folder / f"{stem}.json"
    with writing(tables):
        tables.write_text(f"advise: {advice.target.describe()}; {advice.backend}; "
                          f"{advice.load}\n\n{format_advice(advice)}\nEvery run:\n\n"
                          f"{format_runs_table(advice.runs)}", encoding="utf-8")
    with writing(answer):
        answer.write_text(json.dumps(advice.to_dict(), indent=2, allow_nan=False) + "\n",
                          encoding="utf-8")
    return [picture, tables, answer]


class Advisor:
    """One advice: its runs, each at a limit of ``at``, in the order of the module's steps;
    on a running service also what 25 % less did and what its group counted in each run."""

    def __init__(self, opts: argparse.Namespace, plan: LoadPlan, at: AtLimit,
                 target: LatencyTarget, prefix: str, started: datetime, argv: list[str], *,
                 span: tuple[int, int, str]) -> None:
        self.opts, self.plan, self.at, self.target = opts, plan, at, target
        self.prefix, self.started, self.argv = prefix, started, list(argv)
        self.floor, self.ceiling, self.ceiling_words = span
        self.shape = shape(opts.period_ms, opts.burst_ms)
        self.runs: list[Measured] = []
        self.names: set[str] = set()
        self.began = time.monotonic()
        # warm-up requests the usage samples include (a group's timeline starts after them)
        self.sampled_warmup = opts.warmup if at.inplace is None else 0
        self.load = f"{plan.describe()}, {at.sends}"
        self.evidence: dict[str, CgroupReport | None] = {}   # a running service's group
        self.less: Measured | None = None
        self.applied: str | None = None       # --apply: what was patched

    def advise(self) -> Advice:
        print(f"advise: {self.at.description}; {self.load}; target "
              f"{self.target.describe()}; limits from {self.floor / 1000:g} CPU up to "
              f"{self.ceiling_words}", flush=True)
        if (load := load_average()) is not None:
            print(f"advise: load average {load[0]:.1f} on {os.cpu_count()} CPUs (a busy "
                  "machine slows every run, limited or not)", flush=True)
        profile = self.profile()
        guess = model_guess(profile, self.target, self.shape, self.floor, self.ceiling)
        print("model: " + (f"{limit_words(guess.limit)} should meet it (predicted p50 "
                           f"{guess.p50_ms:.1f}, p90 {guess.p90_ms:.1f}, p99 {guess.p99_ms:.1f} "
                           f"ms, throttled {guess.throttled_fraction * 100:.0f} %)" if guess
                           else f"no limit up to {self.ceiling_words} meets it; trying that"),
              flush=True)
        start = guess.limit.millicores if guess else self.ceiling
        self.judge(self.shape(min(self.ceiling, max(self.floor, start))), "guess")
        rules = usage_limits(profile.usage, self.floor, self.ceiling)
        for _, _, millicores in rules:  # evidence for the search too
            if not any(r.millicores == millicores for r in self.main_runs()):
                self.judge(self.shape(millicores), "usage")
        self.search(start)
        main = self.main_runs()
        at, below = conclude(main, self.target)
        top = [r for r in main if r.millicores == self.ceiling]
        reason = None if at else unmet_reason(profile, self.target, top[-1] if top else None,
                                              self.ceiling_words)
        usage = tuple(UsageResult(rule, cpus, self.shape(m), pooled(
            [r for r in main if r.millicores == m], self.target)) for rule, cpus, m in rules)
        alternatives: tuple[Alternative, ...] | None = None
        if at is not None and at.limit is not None and self.opts.alternatives:
            alternatives = self.alternatives(profile, at.limit, guess)
        low = max(self.floor, min([r.millicores or start for r in main] + [start]) // 4)
        curve = model_curve(profile, self.target, self.shape, low, self.ceiling)
        advice = Advice(self.target, self.at.description, self.load, profile, guess,
                        tuple(self.runs), at, below, self.floor, self.ceiling, reason, usage,
                        alternatives, tuple(curve))
        if self.at.inplace is not None and at is not None and at.limit is not None:
            millicores = math.floor(at.limit.millicores * LESS)
            if millicores >= self.floor:
                print(f"\nadvise: {LESS:g} x the answer: what 25 % less does", flush=True)
                self.less = pooled(self.judge(self.shape(millicores), "less"), self.target)
        return advice

    # -- the steps -----------------------------------------------------------------------

    def profile(self) -> Profile:
        """Step 1: the run without a limit; a target it misses is bad input."""
        plan = profile_plan(self.plan, self.opts.profile_seconds)
        recorded, report, samples, counter = self.record(None, "profile", sample=True, plan=plan)
        row = replace(measured(report, role="profile", limit=None, target=self.target,
                               records=recorded.run.records), missed=None, narrow=False)
        self.add(row)
        profile = build_profile(recorded.run, report, row, samples, plan=self.plan,
                                counter=counter, warmup=self.sampled_warmup)
        usage = (f"; {sum(profile.usage) / len(profile.usage):.2f} CPU used per second on "
                 f"average ({len(profile.usage)} samples)") if profile.usage else ""
        print(f"profile: {profile.cpu_ms:.2f} ms of CPU per request ({profile.cpu_source}), "
              f"{profile.overhead_ms:.1f} ms of each request outside the service{usage}",
              flush=True)
        self.check_profile(profile, report)
        pods = self.at.instances
        if pods > 1 and profile.usage:   # the usage rules set a limit per pod
            profile = replace(profile, usage=tuple(u / pods for u in profile.usage))
            print(f"profile: {sum(profile.usage) / len(profile.usage):.2f} CPU per second for "
                  f"the mean pod (the {pods} pods' usage summed / {pods}): what the usage "
                  "rules read", flush=True)
        return profile

    def check_profile(self, profile: Profile, report: Report) -> None:
        """Failed requests, or a target the typical request misses without a limit, are bad
        input; a target only the requests slow without throttling miss is said."""
        free, target, where = profile.run, self.target, f"{self.opts.data_dir}/{profile.run.name}"
        if free.errors:
            raise CliError(f"{free.errors} request(s) failed without a limit ({where}.csv): "
                           "fix that before choosing a limit")
        missed = target.misses(free.judged_p90, free.judged_p99, None)
        if missed:
            work = (f"; the work itself takes {profile.cpu_ms:.1f} ms of CPU per request"
                    if profile.cpu_ms >= target.p99_ms else "")
            raise CliError(f"the target {target.describe()} is below what the service does "
                           f"without any CPU limit ({', '.join(missed)}; {where}.csv){work}: "
                           "no limit can make it faster (on a busy machine, try again or a "
                           "looser target)")
        if words := unthrottled_miss(free, target):
            print(f"profile: {words}", flush=True)

    def main_runs(self) -> list[Measured]:
        """The runs of the search's shape (the guess, the search, the usage rules' limits)."""
        return [r for r in self.runs if r.role in MAIN_ROLES]

    def search(self, start: int) -> None:
        """Step 3: on from the guess (and the usage rules' limits) until the answer is
        bracketed within 10 % and met by the mean of two runs."""
        while True:
            recheck = to_recheck(self.main_runs(), self.target)
            if recheck is not None:
                print(f"advise: {recheck / 1000:g} CPU missed although a smaller limit met the "
                      "target; once more", flush=True)
                self.measure(self.shape(recheck), "search")
                continue
            judged = verdicts(self.main_runs(), self.target)
            step = next_millicores(judged, start=start, floor=self.floor, ceiling=self.ceiling)
            if step is None:
                confirm = to_confirm(self.main_runs(), self.target)
                if confirm is None:
                    return
                print(f"advise: {confirm / 1000:g} CPU met the target in one run; once more "
                      "to confirm it", flush=True)
                self.measure(self.shape(confirm), "confirm")
                continue
            if len(judged) >= self.opts.max_runs:
                print(f"advise: --max-runs {self.opts.max_runs} reached; the answer is the "
                      "bracket so far", flush=True)
                return
            self.judge(self.shape(step), "search")

    def alternatives(self, profile: Profile, recommended: Limit,
                     guess: ModelPoint | None) -> tuple[Alternative, ...]:
        """A shorter period, a burst: run where the model says they need at most 90 %."""
        out = []
        most = int(recommended.millicores * SAVING)
        for kind, limit_of, point, first in alternative_guesses(
                profile, self.target, recommended, guess, self.possible):
            results = [pooled(self.judge(limit_of(first), kind), self.target)]
            middle = round((first * most) ** 0.5)
            if not results[0].met and first < middle <= most:
                results.append(pooled(self.judge(limit_of(middle), kind), self.target))
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
        """Run ``limit``; once more when its verdict could flip (see ``needs_repeat``)."""
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
        print(format_run(len(self.runs), row) + (" (run again: the first was narrow)"
                                                  if again else ""), flush=True)
        if self.at.inplace is not None:
            print("    " + format_evidence(self.evidence.get(row.name)), flush=True)

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
        inplace = self.at.inplace
        if limit is None and not self.at.can_remove:   # all the CPUs it may have
            applied = self.shape(self.ceiling)
            kind = inplace.limiter.kind if inplace is not None else self.at.name
            how = (f"{limit_words(applied)}, {self.ceiling_words} ({kind} cannot take a limit "
                   "away)")
        plan = plan or self.plan
        sweep = SweepInfo(sweep_stem(self.prefix, "advise"), self.at.name,
                          limit.cpus if limit else 0, self.started.isoformat())
        try:
            measured = self.at.measure(
                applied, name=name, plan=plan, data_dir=self.opts.data_dir, sweep=sweep,
                index=len(self.runs) + 1, sample_usage=sample,
                progress=RunProgress(plan.requests, limit_words(applied)),
                on_target=lambda words: print(
                    f"\n{name}: {words}" + (f" at {how}" if inplace is not None else ""),
                    flush=True))
        except RUN_ERRORS as exc:
            raise CliError(f"{exc} (runs so far are saved in {self.opts.data_dir})") from None
        if measured.interrupted:
            raise KeyboardInterrupt
        report = build_report(measured.run)
        self.evidence[name] = report.cgroup
        return measured.recorded, report, measured.usage, measured.usage_counter

    # -- the answer --------------------------------------------------------------------------

    def to_dict(self, advice: Advice) -> dict[str, Any]:
        """The JSON of the answer; on a running service with what was done to it."""
        out = advice.to_dict()
        inplace = self.at.inplace
        if inplace is None:
            return out
        rec = advice.recommended
        out["inplace"] = {
            "target": inplace.target.spec, "kind": inplace.limiter.kind,
            "set_by": inplace.limiter.description,
            "original": _limit_dict(inplace.original),
            "left_at": _limit_dict(inplace.restore_to),
            "unchanged": inplace.unchanged,
            "applied": self.applied,
            "less_25": self.less.to_dict() if self.less else None,
            "cgroup": {name: (report.to_dict() if report else None)
                       for name, report in self.evidence.items()},
            "permanent": permanent_lines(inplace.limiter.kind, inplace.limiter.names,
                                         rec) if rec else []}
        return out

    def words(self, advice: Advice) -> str:
        """What is printed after ``format_advice`` on a running service: the verification,
        25 % less, for good ("" for burn-service started by the command)."""
        inplace = self.at.inplace
        if inplace is None:
            return ""
        lines = ["", format_verification(advice, self.runs, self.evidence), ""]
        if advice.recommended is not None:
            lines.append(format_less(advice, self.less, LESS))
            lines.append("")
            lines.append("To keep it:")
            lines += ["  " + line for line in permanent_lines(
                inplace.limiter.kind, inplace.limiter.names, advice.recommended)]
        return "\n".join(lines) + "\n"


def _limit_dict(limit: Limit | None) -> dict[str, Any] | None:
    return None if limit is None else {"cpus": limit.cpus, "quota_us": limit.quota_us,
                                       "period_us": limit.period_us, "burst_us": limit.burst_us}
