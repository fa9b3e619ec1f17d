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
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from client.analysis.advise import (MAIN_ROLES, SAVING, Advice, Alternative, UsageResult,
                                    alternative_guesses, conclude, floor_millicores,
                                    needs_repeat, next_millicores, shape, to_confirm,
                                    to_recheck, unmet_reason, unthrottled_miss, verdicts)
from client.analysis.advise_target import pooled
from client.analysis.advise_model import (ModelPoint, Profile, Shape, build_profile, model_curve,
                                          model_guess, profile_plan, usage_limits)
from client.analysis.advise_target import LatencyTarget, Measured, measured
from client.analysis.report import Report, build_report
from client.commands.common import (EXIT_INTERRUPTED, EXIT_OK, add_load_arguments,
                                    add_target_arguments, backend_from, check_folders,
                                    plan_from,
                                    show_stopped)
from client.commands.options import CliError, OneLineParser, int_at_least, number_above
from client.commands.options import number_at_least
from client.commands.inplace import add_inplace_arguments, check_inplace_options
from client.data.files import writing
from client.data.request import DEFAULT_ITERATIONS
from client.data.metadata import SweepInfo
from client.data.naming import check_file_name, run_name, sweep_stem
from client.render.advise import (format_advice, format_run, format_runs_table, limit_words,
                                  save_advice_figure)
from client.render.progress import RunProgress
from client.run.measure import Load, measure, target_spec
from client.run.plan import LoadPlan
from client.run.record import RecordedRun, load_average
from client.run.recorder import stop_on_terminate
from client.run.targets import Backend, ServiceError
from client.run.targets.service import free_port
from client.run.usage import UsageSample
from cpuquota.limit import Limit

__all__ = ["EXIT_NOT_MET", "Advisor", "build_advise_parser", "command_advise", "target_from"]

EXIT_NOT_MET = 3   # no limit up to the ceiling met the target


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


def ceiling_for(backend: Backend, limit_of: Shape) -> tuple[int, str]:
    """The largest limit to try (millicores) and its words: the machine's CPUs, else 1 CPU
    when the backend cannot set more (the in-process throttle)."""
    cpus = os.cpu_count() or 1
    problem = ""
    for millicores, words in ((cpus * 1000, f"the machine's {cpus} CPUs"),
                              (1000, f"1 CPU (the most --backend {backend.name} can set)")):
        try:
            backend.check([limit_of(millicores)])
            return millicores, words
        except ValueError as exc:
            problem = str(exc)
    raise CliError(problem)


def command_advise(argv: list[str]) -> int:
    opts = build_advise_parser().parse_args(argv)
    check_inplace_options(opts)   # --cgroup: client.commands.advise_live (inplace_entry)
    if opts.iterations is None:
        opts.iterations = DEFAULT_ITERATIONS
    started = datetime.now(timezone.utc)
    target = target_from(opts)
    plan = plan_from(opts)
    check_folders(opts)
    prefix = started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    if problem := check_file_name(prefix, prefix=True):
        raise CliError(problem)
    backend, why_not_kernel = backend_from(opts)
    limit_of = shape(opts.period_ms, opts.burst_ms)
    floor = floor_millicores(opts.period_ms)
    ceiling, ceiling_words = ceiling_for(backend, limit_of)
    try:
        backend.check([limit_of(floor)])
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if problem := backend.problem():
        raise CliError(problem)
    out = sys.stderr if opts.json else sys.stdout
    with contextlib.redirect_stdout(out):
        if why_not_kernel:
            print(f"advise: in-process throttle (no kernel quota here: {why_not_kernel})")
        advisor = Advisor(opts, plan, backend, target, prefix, started, argv,
                          span=(floor, ceiling, ceiling_words))
        try:
            with stop_on_terminate():
                advice = advisor.advise()
        except KeyboardInterrupt:
            print(f"\nhttp-timing advise: interrupted after {len(advisor.runs)} run(s); every "
                  f"completed request is saved in {opts.data_dir}", file=sys.stderr)
            if advisor.runs:
                print(format_runs_table(advisor.runs), end="", file=sys.stderr)
            return EXIT_INTERRUPTED
        except ServiceError as exc:
            raise CliError(f"{exc} (runs so far are saved in {opts.data_dir})") from None
        files = save_answer(advice, opts.pictures_dir, sweep_stem(prefix, "advise"))
        if not opts.json:
            print()
            print(format_advice(advice), end="")
            print(f"\n{len(advice.runs)} runs in {time.monotonic() - advisor.began:.0f} s; "
                  f"raw data in {opts.data_dir}; " + ", ".join(map(str, files)))
    if opts.json:
        print(json.dumps(advice.to_dict(), indent=2, allow_nan=False))
    return EXIT_OK if advice.recommended is not None else EXIT_NOT_MET


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
    """One advice: the runs it starts, records and stops, in the order of the module's steps."""

    def __init__(self, opts: argparse.Namespace, plan: LoadPlan, backend: Backend,
                 target: LatencyTarget, prefix: str, started: datetime, argv: list[str], *,
                 span: tuple[int, int, str]) -> None:
        self.opts, self.plan, self.backend, self.target = opts, plan, backend, target
        self.prefix, self.started, self.argv = prefix, started, list(argv)
        self.floor, self.ceiling, self.ceiling_words = span
        self.shape = shape(opts.period_ms, opts.burst_ms)
        self.runs: list[Measured] = []
        self.names: set[str] = set()
        self.began = time.monotonic()
        self.sampled_warmup = opts.warmup   # warm-up requests the usage samples include
        self.load = f"{plan.describe()}, iterations={opts.iterations}"
        self.sent = Load(plan, opts.iterations, opts.timeout, opts.warmup)

    def advise(self) -> Advice:
        print(f"advise: {self.backend.description}; {self.load}; target "
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
        return Advice(self.target, self.backend.description, self.load, profile, guess,
                      tuple(self.runs), at, below, self.floor, self.ceiling, reason, usage,
                      alternatives, tuple(curve))

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
            self.backend.check([limit])
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
        """Start the service under ``limit``, time it (scraping its usage when ``sample``),
        stop it by its id whatever happens (``measure``); a Ctrl-C ends the advice once the
        files are complete."""
        name = self.name_for(limit, role)
        service = self.backend.target(limit, free_port(), index=len(self.runs) + 1)
        print(f"\n{name}: {' '.join(service.argv)}", flush=True)
        load = self.sent if plan is None else replace(self.sent, plan=plan)
        sweep = SweepInfo(sweep_stem(self.prefix, "advise"), self.backend.name,
                          limit.cpus if limit else 0, self.started.isoformat())
        measured = measure(
            lambda started: target_spec(started, load, name=name, data_dir=self.opts.data_dir,
                                        command=["http-timing", "advise", *self.argv],
                                        sweep=sweep),
            target=service, progress=RunProgress(load.plan.requests, limit_words(limit)),
            sample_usage=sample, on_stopped=show_stopped)
        if measured.interrupted:
            raise KeyboardInterrupt
        return (measured.recorded, build_report(measured.run), measured.usage,
                measured.usage_counter)
