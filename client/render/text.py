"""The text ``http-timing`` prints about runs, reports and predictions, written once.

(The original per-request line, ``26 Status code 200 time 5207306``, is the data's own format:
``client.data.formats.legacy.format_line``.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from client.analysis.cgroup import CgroupReport
from client.analysis.detect import Detection, Held
from client.analysis.model import Prediction
from client.analysis.report import PredictionReport, Report
from client.analysis.threads import NOTABLE, TOP, ThreadsReport
from client.analysis.throughput import ThroughputRow
from client.data.summary import Summary

__all__ = ["format_cgroup", "format_detection", "format_errors", "format_held", "format_predicted", "format_pressure",
           "format_prediction", "format_prediction_report", "format_report", "format_summary", "format_threads",
           "format_throughput"]


def _ms(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or value != value else f"{value:.{digits}f}"


def _share(value: float) -> str:
    return "n/a" if value != value else f"{100 * value:.0f} %"


def format_summary(summary: Summary) -> str:
    """``latency ms: p50 5.13  p90 5.52  ...  errors 0 of 100``."""
    def ms(v: float) -> str:
        return "n/a" if v != v else f"{v:.2f}"
    return (f"latency ms: p50 {ms(summary.p50_ms)}  p90 {ms(summary.p90_ms)}  "
            f"p99 {ms(summary.p99_ms)}  max {ms(summary.max_ms)}  mean {ms(summary.mean_ms)}  "
            f"errors {summary.errors} of {summary.count}")


def format_errors(errors_by: Sequence[tuple[str, int]], count: int) -> str | None:
    """``errors: 5 of 20 answered 404, 1 of 20 failed: ConnectError: Connection refused``
    (what each failed request met, counted); None when none failed."""
    if not errors_by:
        return None
    return "errors: " + ", ".join(f"{n} of {count} {what}" for what, n in errors_by)


def format_throughput(row: ThroughputRow, rate_rps: float | None) -> str:
    """``throughput 58.3 requests/s (intended 100/s), 0.0 % errors`` for load runs."""
    intended = f" (intended {rate_rps:g}/s)" if rate_rps is not None else ""
    return (f"throughput {row.rps:.1f} requests/s{intended}, "
            f"{100 * row.error_rate:.1f} % errors")


def _held_figure(ms: float) -> str:
    """``0.02``, ``5.2``, ``71``: a hold to the digits that tell tiny from long."""
    return f"{ms:.2g}" if ms < 1 else f"{ms:.1f}" if ms < 10 else f"{ms:.0f}"


def format_held(held: Held, *, median: bool = True) -> str:
    """``held 0.02–71 ms, median 68 ms`` (``held 5.2 ms``: one hold, or all alike)."""
    low, high = _held_figure(held.min_ms), _held_figure(held.max_ms)
    span = f"held {low} ms" if low == high else f"held {low}–{high} ms"
    return f"{span}, median {_held_figure(held.median_ms)} ms" if median and low != high \
        else span


def format_detection(detection: Detection, *, predicted: bool = False) -> list[str]:
    """The requests delayed by throttling (from counters) or, from latency alone, the slow
    ones (never called throttled without a counter that says so); a saturated run says so.
    ``predicted``: the run is a replay's prediction, whose periods throttled are the replay's."""
    d = detection
    if d.count == 0:
        return ["delayed by throttling: n/a (no successful request)"]
    fraction = d.throttled_fraction or 0.0
    latency_only = d.marked_as == "slow"
    where = f"; slower than {d.threshold_ms:.1f} ms counts" if (
        d.threshold_ms is not None and d.source.uses_latency) else ""
    if latency_only:
        why = ("a prediction has no counter: the replay's periods throttled are above"
               if predicted else "not known to be throttling: --cgroup TARGET reads the "
               "service's own counters")
        lines = [f"slow: {d.throttled_count} of {d.count} requests ({100 * fraction:.1f} %), "
                 f"from the {d.source.words} alone{where} ({why})"]
    else:
        held = f"; {format_held(d.held)}" if d.held else ""
        lines = [f"delayed by throttling: {d.throttled_count} of {d.count} requests "
                 f"({100 * fraction:.1f} %), from the {d.source.words}{where}{held}"]
    if d.saturated is not None:
        lines.append(f"saturated: {d.saturated}")
    if d.stall_ms is not None:
        which = "slow request" if latency_only else "request delayed by throttling"
        lines.append(f"stall: {d.stall_ms:.1f} ms typical extra delay of a {which} "
                     f"(the others {_ms(d.baseline_ms)} ms)")
    lines.append(f"period: {d.period_ms:g} ms ({d.period_source})")
    if d.throughput_rps is not None:
        lines.append(f"throughput: {d.throughput_rps:.1f} requests/s")
    if d.server_cpu_ms is not None:
        lines.append(f"server CPU per request: {d.server_cpu_ms:.2f} ms (median)")
    lines.extend(f"note: {n}" for n in d.notes)
    return lines


def format_report(report: Report, path: object) -> list[str]:
    """``http-timing report FILE``'s lines."""
    lines = [f"run: {report.name} ({path})", f"limit: {report.limit_description}",
             *(format_predicted(report.predicted) if report.predicted else []),
             format_summary(report.summary),
             *filter(None, [format_errors(report.errors_by, report.summary.count)]),
             *format_detection(report.detection, predicted=report.predicted is not None)]
    if report.fell_behind_words:
        lines.append(report.fell_behind_words)
    if report.cgroup is not None:
        lines += format_cgroup(report.cgroup, mixed=bool(report.by_quota))
    if report.threads is not None:
        lines += format_threads(report.threads)
    lines += format_quota_parts(report)
    return lines


def format_predicted(predicted: Mapping[str, Any]) -> list[str]:
    """A prediction saved as a run: what was replayed and the replay's periods throttled,
    then how sure it is."""
    cpus = predicted.get("cpus")
    what = (f"predicted, not measured: the requests of {predicted.get('requests_from')} "
            f"replayed on {predicted.get('timeline')}")
    if not cpus:
        first = f"{what} without a limit (nothing throttles them)"
    else:
        first = (f"{what} at {cpus:g} CPU: {predicted.get('periods_throttled')} of "
                 f"{predicted.get('periods')} periods throttled, "
                 f"{predicted.get('throttled_ms') or 0:.1f} ms (the replay's)")
    return [first, f"predicted: {predicted.get('says')}"]


def format_threads(t: ThreadsReport) -> list[str]:
    """Who spent the quota: the top thread names' shares of the group's CPU (and of its CPU in
    the periods throttled), where they come from, and the runtime's own threads when they
    spent a notable part of the throttled periods' CPU; or why it is not known."""
    if t.unknown is not None:
        return [f"cpu by thread: not known ({t.unknown})"]
    if not t.shares:
        return ["cpu by thread: no thread of the group used CPU between the readings"]
    def one(s: object) -> str:
        assert isinstance(s, type(t.shares[0]))
        hit = ("" if s.share_throttled is None else
               f" ({_share(s.share_throttled)} in the periods throttled)")
        return f"{s.name} {_share(s.share)}{hit}"
    rest = len(t.shares) - TOP
    lines = ["cpu by thread: " + ", ".join(one(s) for s in t.shares[:TOP])
             + (f", {rest} more" if rest > 0 else "")]
    seen = (f"; {t.total_ns / 1e6:.0f} of the group's {t.usage_ns / 1e6:.0f} ms "
            "(a process that starts and ends between two readings is not seen)"
            if t.usage_ns else "")
    lines.append(f"cpu by thread: from {t.source}{seen}")
    outside = t.outside
    spent = sum(s.share_throttled or 0.0 for s in outside)
    if spent >= NOTABLE:
        names = ", ".join(f"{s.name} {_share(s.share_throttled or 0.0)}" for s in outside[:TOP])
        lines.append(f"cpu by thread: threads outside the request path (the runtime's own) "
                     f"spent {_share(spent)} of the CPU in the periods throttled: {names}")
    if t.unnamed is not None:
        lines.append(f"cpu by thread: {_share(t.unnamed.share)} is under {t.unnamed.name}, the "
                     f"process's own name, borne by {t.unnamed.threads} threads: the kernel "
                     "knows no other name for them. Name them at the OS level "
                     "(prctl(PR_SET_NAME) or pthread_setname_np; Python's threading does "
                     "only from 3.14) to see which spent the quota")
    lines.extend(f"cpu by thread: not seen for a while: {p}" for p in t.problems)
    return lines


def format_quota_parts(report: Report) -> list[str]:
    """A run that spans a change of quota: one line per quota, its requests judged by it."""
    if not report.by_quota:
        return []
    lines = [f"quota changed during the run ({len(report.by_quota)} quotas in force, each "
             "request judged by the one in force when it was sent):"]
    for part in report.by_quota:
        s, d = part.report.summary, part.report.detection
        straddle = (f"; {part.straddling} answered after the next change"
                    if part.straddling else "")
        lines.append(f"  {part.span.describe()}: {s.count} requests, p50 {s.p50_ms:.1f} ms, "
                     f"p90 {s.p90_ms:.1f} ms, p99 {s.p99_ms:.1f} ms, {d.throttled_count} "
                     f"delayed by throttling{straddle}")
        c = part.report.cgroup
        if c is not None and c.quota_cpus is not None and c.usage_unknown is None:
            lines.append(f"    cgroup: {c.nr_throttled} of {c.nr_periods} periods throttled, "
                         f"throttled time {c.throttled_ms:.1f} ms; CPU used "
                         f"{c.usage_cpus_mean:.3f} CPU on average, {100 * c.quota_share_mean:.0f} % of its {c.quota_cpus:g} CPU")
    return lines


def format_cgroup(c: CgroupReport, mixed: bool = False) -> list[str]:
    """The watched group's section: its counters over the run, usage against the quota (or
    why it is not known), and the latency of the requests delayed by throttling against the
    others' (their count is the report's one, on its ``delayed by throttling`` line).
    ``mixed``: the quota changed during the run (each quota's share is said per quota)."""
    if c.usage_unknown is not None:
        used = f"cgroup: CPU used: not known ({c.usage_unknown})"
    else:
        quota = (" (the quota changed during the run: see each quota below)" if mixed else
                 _quota_share(c))
        per_period = "" if mixed else _periods_at_quota(c)
        used = f"cgroup: CPU used {c.usage_cpus_mean:.3f} CPU on average{quota}{per_period}"
    lines = [f"cgroup: {c.samples} samples over {c.duration_s:.1f} s ({c.samples_per_s:.0f}/s)",
             f"cgroup: {c.nr_throttled} of {c.nr_periods} periods throttled "
             f"({_share(c.throttled_share)}), throttled time {c.throttled_ms:.1f} ms"
             + (" in the watched group (each quota level below)" if len(c.levels) > 1 else ""),
             used]
    if c.usage_counter:
        step = (f", in {c.usage_resolution_ms:g} ms steps" if c.usage_resolution_ms and
                c.usage_resolution_ms >= 1 else "")
        lines.append(f"cgroup: CPU usage from {c.usage_counter}{step}")
    if c.busiest:
        busiest = ", ".join(f"{b.usage_ms:.1f} ms at {b.start_s:.1f} s" for b in c.busiest[:3])
        lines.append(f"cgroup: busiest periods: {busiest}")
    for level in c.levels if len(c.levels) > 1 else ():
        lines.append(f"cgroup: quota {level.quota_cpus:g} CPU per {level.period_ms:g} ms on "
                     f"{level.group}: {level.nr_throttled} of {level.nr_periods} periods "
                     f"throttled, {level.throttled_ms:.1f} ms; {level.throttled_requests} "
                     "requests delayed by it")
    named = next((lv for lv in c.levels if lv.group == c.quota_group), None)
    if named is not None:
        lines.append(f"cgroup: throttled by the quota on {named.group} ({named.quota_cpus:g} CPU)"
                     if named.throttled_ms > 0 else
                     f"cgroup: the quota in force is on {named.group} ({named.quota_cpus:g} "
                     "CPU); it did not throttle")
    lines.append(format_pressure(c))
    hit, other = c.throttled_latency, c.other_latency
    lines.append(f"cgroup: latency of the requests delayed by throttling: p50 {_ms(hit.p50_ms)}  "
                 f"p90 {_ms(hit.p90_ms)}  p99 {_ms(hit.p99_ms)} ms; the others: p50 "
                 f"{_ms(other.p50_ms)}  p90 {_ms(other.p90_ms)}  p99 {_ms(other.p99_ms)} ms")
    return lines


def _quota_share(c: CgroupReport) -> str:
    """`` of a 0.3 CPU quota (95 % of it)``, or the quota with why its share is left out: a
    run shorter than one period may use a whole period's quota in less time than the period."""
    if c.quota_cpus is None:
        return " (no quota on the group)"
    if c.period_ms is not None and 1000 * c.duration_s < c.period_ms:
        return (f" of a {c.quota_cpus:g} CPU quota (share of it: not known, the run was shorter "
                f"than one {c.period_ms:g} ms period)")
    return f" of a {c.quota_cpus:g} CPU quota ({_share(c.quota_share_mean)} of it)"


def _periods_at_quota(c: CgroupReport) -> str:
    """``; 3 of 20 periods used 90 % of the quota or more``, or why it is left out."""
    if c.per_period_unknown is not None:
        return f"; per period: not known ({c.per_period_unknown})"
    if c.quota_cpus is None or c.periods_at_quota is None:
        return ""   # no quota: nothing to use 90 % of (said once, above)
    if c.periods == 0:
        return "; per period: not known (the run did not span one whole period)"
    return f"; {c.periods_at_quota} of {c.periods} periods used 90 % of the quota or more"


def format_pressure(c: CgroupReport) -> str:
    """The PSI line: how long the group's tasks waited for a CPU (any cause), or why unknown."""
    if c.pressure_some_ms is None:
        return ("cgroup: CPU pressure (PSI): not recorded (no cpu.pressure: cgroup v1, or a "
                "kernel without PSI)")
    share = c.pressure_some_ms / (1000 * c.duration_s) if c.duration_s > 0 else float("nan")
    full = ("" if c.pressure_full_ms is None else
            f", all of them {c.pressure_full_ms:.1f} ms")
    return (f"cgroup: CPU pressure (PSI): some tasks waited {c.pressure_some_ms:.1f} ms for a "
            f"CPU ({100 * share:.0f} % of the run){full}")


_ROWS = (("p50 ms", "p50_ms"), ("p90 ms", "p90_ms"), ("p99 ms", "p99_ms"),
         ("mean ms", "mean_ms"), ("max ms", "max_ms"),
         ("delayed by throttling %", "throttled_fraction"),
         ("stall ms", "stall_ms"), ("throughput rps", "throughput_rps"))


def _cell(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if key == "throttled_fraction":
        return f"{100 * value:.1f}"
    return f"{value:.1f}" if key in ("stall_ms", "throughput_rps") else f"{value:.2f}"


def format_prediction_report(p: PredictionReport, explanation: list[str], path: object,
                             picture: object) -> list[str]:
    """``http-timing report FILE --predict``'s lines: measured vs predicted, and why."""
    w, d = p.workload, p.report.detection
    model = (f"{w.service_ms:.2f} ms CPU per request ({d.service_source})"
             + (f" + {w.overhead_ms:.2f} ms outside the quota" if w.overhead_ms else "")
             + f", concurrency {w.concurrency}"
             + (f" on {w.cores} cores" if w.cores > 1 else "")
             + f", {w.requests} requests")
    lines = [f"run: {p.report.name} ({path})",
             f"limit: {p.limit.describe()}, from {p.limit.source}", f"model: {model}"]
    if p.charged is not None:
        c = p.charged.workload
        lines.append(f"charged: the same with {c.service_ms:.2f} ms of quota per request (from "
                     f"the throughput) + {c.overhead_ms:.2f} ms outside it")
    columns = p.columns()
    width = max(len(label) for label, _ in _ROWS)
    lines.append(f"{'':{width}}" + "".join(f"  {name:>9}" for name, _ in columns))
    for label, key in _ROWS:
        lines.append(f"{label:{width}}" + "".join(f"  {_cell(key, values.get(key)):>9}"
                                                  for _, values in columns))
    lines.extend(explanation)
    lines.extend(f"note: {note}" for note in d.notes)
    lines.append(f"picture: {picture}")
    return lines


def format_prediction(prediction: Prediction) -> str:
    """``http-timing predict``'s text."""
    w, d = prediction.workload, prediction.to_dict()
    throttled = round(d["throttled_fraction"] * d["count"])
    overhead = f" + {w.overhead_ms:g} ms outside the quota" if w.overhead_ms else ""
    cores = f" on {w.cores} cores" if w.cores > 1 else ""
    cores += f", {w.threads} threads each" if w.threads > 1 else ""
    cores += f", over {w.replicas} replicas" if w.replicas > 1 else ""
    lines = [
        f"model: {d['count']} requests of {w.service_ms:g} ms CPU{overhead}, concurrency "
        f"{w.concurrency}{cores}, limit {d['limit']}",
        f"latency ms: p50 {d['p50_ms']:.2f}  p90 {d['p90_ms']:.2f}  p99 {d['p99_ms']:.2f}  "
        f"max {d['max_ms']:.2f}  mean {d['mean_ms']:.2f}",
        f"delayed by throttling: {throttled} of {d['count']} requests "
        f"({100 * d['throttled_fraction']:.1f} %)"
        + (f", stall {d['stall_ms']:.1f} ms typical" if d["stall_ms"] is not None else ""),
        f"period: {d['period_ms']:g} ms; throughput {d['throughput_rps']:.1f} requests/s",
        f"cpu.stat: nr_periods {d['nr_periods']}  nr_throttled {d['nr_throttled']}  "
        f"throttled time {d['throttled_ms']:.1f} ms",
    ]
    return "\n".join(lines)
