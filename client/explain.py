"""The explaining commands of ``http-timing``: ``report`` (throttling), ``report --predict``,
``predict`` and ``compare``.

    http-timing report FILE [--json]
    http-timing report FILE --predict [--cpus X] [--period-ms P] [--burst-ms B] [-o PICTURE]
    http-timing predict --service-ms S --cpus X [--period-ms P] [--burst-ms B]
                        [--concurrency C] [--requests N] [--overhead-ms O] [--cores K] [--json]
    http-timing compare A B C... [-o PICTURE] [--title TITLE]

Bad input is one line on stderr and exit code 2 (:class:`CliError`, or the parser's own
one-line errors).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from client.compare import detect_run, format_table, plot_overlay, save_comparison, sequential
from client.detect import Detection, explain
from client.model import (MAX_CONCURRENCY, MAX_REQUESTS, Limit, Prediction, Workload,
                          limit_from_metadata, predict)
from client.options import CliError, OneLineParser, int_in, number_above, number_at_least
from client.plot import describe_limit
from client.rawdata import Run, read_run
from client.stats import Summary, summarize

__all__ = ["add_report_arguments", "command_compare", "command_predict", "measure",
           "print_report"]


def _period(text: str) -> float:
    """A period in ms, in the kernel's range for ``cfs_period_us`` (1 ms to 1 s)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in [1, 1000] (got {text!r})") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"must be a number in [1, 1000] (got {text})")
    return value


def _check_burst(limit: Limit) -> Limit:
    if limit.burst_ms > limit.quota_ms + 1e-9:
        raise CliError(f"--burst-ms must be at most the quota per period "
                           f"({limit.quota_ms:g} ms; got {limit.burst_ms:g})")
    return limit


def _add_limit_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument("--cpus", type=number_above(0), required=required, metavar="X",
                        help="the CPU limit, as docker run --cpus: X × period of CPU per period"
                        + ("" if required else " (default: the run's metadata)"))
    parser.add_argument("--period-ms", type=_period, metavar="P",
                        help="the quota's period in ms (default: the metadata's, else 100)")
    parser.add_argument("--burst-ms", type=number_at_least(0), metavar="B",
                        help="burst: unused quota that may be saved, in ms (default 0)")


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """``report``'s options beyond FILE and --json."""
    parser.add_argument("--predict", action="store_true",
                        help="also simulate the run with the quota model and show both, in text "
                        "and as a picture")
    _add_limit_arguments(parser, required=False)
    parser.add_argument("-o", "--output", type=Path, metavar="PICTURE",
                        help="with --predict: the picture "
                        "(default <pictures-dir>/<name>-predict.png)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"))


def build_predict_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="http-timing predict",
        description="Predict what a CPU quota does to requests of S ms of CPU sent back to back, "
        "by simulating the kernel's accounting (quota per period, the wait for the next period, "
        "burst credit) on a simulated clock. Deterministic.")
    parser.add_argument("--service-ms", type=number_above(0), required=True, metavar="S",
                        help="CPU time of one request in ms (its latency on an idle, unlimited "
                        "machine, minus the network)")
    _add_limit_arguments(parser, required=True)
    parser.add_argument("--concurrency", type=int_in(1, MAX_CONCURRENCY), default=1,
                        metavar="C", help="requests in flight at once (closed loop; default 1)")
    parser.add_argument("--requests", type=int_in(1, MAX_REQUESTS), default=100, metavar="N",
                        help="how many requests (default 100)")
    parser.add_argument("--overhead-ms", type=number_at_least(0), default=0.0, metavar="O",
                        help="client and network time per request that uses no quota (default 0)")
    parser.add_argument("--cores", type=int_in(1, 1024), default=1, metavar="K",
                        help="how many requests' work can run at once (default 1: one Python "
                        "process)")
    parser.add_argument("--json", action="store_true", help="print JSON (the keys of report)")
    return parser


def build_compare_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="http-timing compare",
        description="Several runs stacked on one time axis plus one latency CDF, and a table "
        "(limit, p50, p90, p99, max, throttled %) printed and saved as Markdown next to the "
        "picture.")
    parser.add_argument("files", nargs="+", type=Path, help="run files (.csv, .json or text)")
    parser.add_argument("-o", "--output", type=Path, default=Path("pictures/compare.png"),
                        metavar="PICTURE", help="the picture (default pictures/compare.png); "
                        "the table goes next to it as .md")
    parser.add_argument("--title", help="picture title")
    return parser


# -- report ---------------------------------------------------------------------------------

def measure(run: Run, limit: Limit | None = None) -> tuple[Summary, Detection, dict[str, Any]]:
    """A run's statistics and throttling, as the keys of ``report --json``."""
    summary = summarize(run.records)
    limit = limit if limit is not None else limit_from_metadata(run.metadata)
    detection = detect_run(run, limit)
    fields: dict[str, Any] = {"name": run.name, "limit": describe_limit(run.metadata),
                              "limit_cpus": limit.cpus if limit else None,
                              **summary.to_dict(), **detection.to_dict()}
    return summary, detection, fields


def _ms(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or value != value else f"{value:.{digits}f}"


def format_detection(detection: Detection) -> list[str]:
    d = detection
    if d.count == 0:
        return ["throttled: n/a (no successful request)"]
    fraction = d.throttled_fraction or 0.0
    where = f"; slower than {d.threshold_ms:.1f} ms counts" if (
        d.threshold_ms is not None and "latency" in d.source) else ""
    lines = [f"throttled: {d.throttled_count} of {d.count} requests ({100 * fraction:.1f} %), "
             f"from the {d.source}{where}"]
    if d.stall_ms is not None:
        lines.append(f"stall: {d.stall_ms:.1f} ms typical extra delay of a throttled request "
                     f"(unthrottled {_ms(d.baseline_ms)} ms)")
    lines.append(f"period: {d.period_ms:g} ms ({d.period_source})")
    if d.throughput_rps is not None:
        lines.append(f"throughput: {d.throughput_rps:.1f} requests/s")
    if d.server_cpu_ms is not None:
        lines.append(f"server CPU per request: {d.server_cpu_ms:.2f} ms (median)")
    lines.extend(f"note: {n}" for n in d.notes)
    return lines


def print_report(run: Run, opts: argparse.Namespace,
                 summary_line: Callable[[Summary], str]) -> None:
    """``http-timing report`` after the file is read: text or JSON, with --predict or not."""
    if opts.predict:
        _report_predict(run, opts)
        return
    if any(v is not None for v in (opts.cpus, opts.period_ms, opts.burst_ms)) or opts.output:
        raise CliError("--cpus, --period-ms, --burst-ms and -o go with --predict")
    summary, detection, fields = measure(run)
    if opts.json:
        print(json.dumps(_clean(fields), indent=2))
        return
    print(f"run: {run.name} ({run.path})")
    print(f"limit: {fields['limit']}")
    print(summary_line(summary))
    for line in format_detection(detection):
        print(line)


def _clean(value: Any) -> Any:
    """JSON without NaN (null instead)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _limit_for(run: Run, opts: argparse.Namespace) -> Limit:
    found = limit_from_metadata(run.metadata)
    if opts.cpus is not None:
        period = opts.period_ms or (found.period_ms if found else 100.0)
        limit = _check_burst(Limit(opts.cpus, period, opts.burst_ms or 0.0, "--cpus"))
    elif found is not None:
        limit = Limit(found.cpus, opts.period_ms or found.period_ms,
                      found.burst_ms if opts.burst_ms is None else opts.burst_ms, found.source)
        if opts.burst_ms is not None:
            _check_burst(limit)
    else:
        what = ("its metadata shows no CPU limit" if isinstance(run.metadata.get("limits"), dict)
                else "no limits in its metadata: a text capture, or a server without /limits")
        raise CliError(f"no CPU limit known for {run.path} ({what}): give --cpus X "
                           "(and --period-ms P if not 100)")
    return limit


def _workload_for(run: Run, detection: Detection, limit: Limit) -> Workload:
    if not sequential(run) and run.metadata.get("mode") == "open-loop":
        raise CliError(f"{run.path} is an open-loop run (--rate); the model simulates "
                           "closed loops only (sequential or --concurrency)")
    if detection.service_ms is None or detection.count == 0:
        raise CliError(f"{run.path}: no successful request to take a service time from")
    concurrency = run.metadata.get("concurrency")
    concurrency = min(concurrency, MAX_CONCURRENCY) if (
        isinstance(concurrency, int) and concurrency >= 1) else 1
    # The service's worker processes each run one request's work at a time (the GIL).
    limits = run.metadata.get("limits")
    workers = limits.get("workers") if isinstance(limits, dict) else None
    cores = min(workers, 1024) if isinstance(workers, int) and workers >= 1 else 1
    overhead = 0.0
    if detection.server_cpu_ms is not None and detection.baseline_ms is not None:
        # an unthrottled request: its work, slowed by the others sharing the cores, + the rest
        shared = detection.server_cpu_ms * concurrency / min(concurrency, cores)
        overhead = max(0.0, detection.baseline_ms - shared)
    try:
        return Workload(service_ms=detection.service_ms, cpus=limit.cpus,
                        period_ms=limit.period_ms, burst_ms=limit.burst_ms,
                        concurrency=concurrency,
                        requests=min(max(1, len(run.records)), MAX_REQUESTS),
                        overhead_ms=overhead, cores=cores)
    except ValueError as exc:
        raise CliError(f"cannot model {run.path}: {exc}") from None


ROWS = (("p50 ms", "p50_ms"), ("p90 ms", "p90_ms"), ("p99 ms", "p99_ms"),
        ("mean ms", "mean_ms"), ("max ms", "max_ms"), ("throttled %", "throttled_fraction"),
        ("stall ms", "stall_ms"), ("throughput rps", "throughput_rps"))


def _cell(key: str, value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    if key == "throttled_fraction":
        return f"{100 * value:.1f}"
    return f"{value:.1f}" if key in ("stall_ms", "throughput_rps") else f"{value:.2f}"


def _report_predict(run: Run, opts: argparse.Namespace) -> None:
    limit = _limit_for(run, opts)
    _, detection, measured = measure(run, limit)
    workload = _workload_for(run, detection, limit)
    prediction = predict(workload)
    explanation = explain(detection, measured, prediction, limit)
    columns = [("measured", measured), ("predicted", prediction.to_dict())]
    series = [("predicted", prediction)]
    # When the run spent all its quota, the quota per request is known from the throughput:
    # the model with that CPU shows whether the hidden CPU explains the rest of the gap.
    charged = detection.charged_ms(limit.cpus)
    charged_prediction = None
    if charged is not None and charged > 1.1 * workload.service_ms:
        shared = charged * workload.concurrency / min(workload.concurrency, workload.cores)
        baseline = detection.baseline_ms if detection.baseline_ms is not None else charged
        charged_prediction = predict(replace(workload, service_ms=charged,
                                             overhead_ms=max(0.0, baseline - shared)))
        columns.append(("charged", charged_prediction.to_dict()))
        series.append((f"predicted with {charged:.1f} ms charged", charged_prediction))
    out = opts.output or opts.pictures_dir / f"{run.path.stem}-predict.png"
    picture = plot_overlay(run, [(label, Run(out, list(p.records), {"name": label}))
                                 for label, p in series],
                           detection, out,
                           title=f"{run.name}: measured vs predicted at {limit.describe()}")
    model_text = (f"{workload.service_ms:.2f} ms CPU per request ({detection.service_source})"
                  + (f" + {workload.overhead_ms:.2f} ms outside the quota"
                     if workload.overhead_ms else "")
                  + f", concurrency {workload.concurrency}"
                  + (f" on {workload.cores} cores" if workload.cores > 1 else "")
                  + f", {workload.requests} requests")
    if opts.json:
        print(json.dumps(_clean({
            **measured, "model_limit": limit.describe(), "predicted": columns[1][1],
            "charged_ms": charged,
            "predicted_charged": charged_prediction.to_dict() if charged_prediction else None,
            "explanation": explanation, "picture": str(picture)}), indent=2))
        return
    print(f"run: {run.name} ({run.path})")
    print(f"limit: {limit.describe()}, from {limit.source}")
    print(f"model: {model_text}")
    if charged_prediction is not None:
        w = charged_prediction.workload
        print(f"charged: the same with {w.service_ms:.2f} ms of quota per request (from the "
              f"throughput) + {w.overhead_ms:.2f} ms outside it")
    width = max(len(label) for label, _ in ROWS)
    print(f"{'':{width}}" + "".join(f"  {name:>9}" for name, _ in columns))
    for label, key in ROWS:
        print(f"{label:{width}}" + "".join(f"  {_cell(key, values.get(key)):>9}"
                                           for _, values in columns))
    for line in explanation:
        print(line)
    for note in detection.notes:
        print(f"note: {note}")
    print(f"picture: {picture}")


# -- predict --------------------------------------------------------------------------------

def command_predict(argv: list[str]) -> int:
    opts = build_predict_parser().parse_args(argv)
    _check_burst(Limit(opts.cpus, opts.period_ms or 100.0, opts.burst_ms or 0.0))
    try:
        workload = Workload(service_ms=opts.service_ms, cpus=opts.cpus,
                            period_ms=opts.period_ms or 100.0, burst_ms=opts.burst_ms or 0.0,
                            concurrency=opts.concurrency, requests=opts.requests,
                            overhead_ms=opts.overhead_ms, cores=opts.cores)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    prediction = predict(workload)
    fields = prediction.to_dict()
    if opts.json:
        print(json.dumps(_clean(fields), indent=2))
        return 0
    print(format_prediction(prediction))
    return 0


def format_prediction(prediction: Prediction) -> str:
    w, d = prediction.workload, prediction.to_dict()
    throttled = round(d["throttled_fraction"] * d["count"])
    overhead = f" + {w.overhead_ms:g} ms outside the quota" if w.overhead_ms else ""
    cores = f" on {w.cores} cores" if w.cores > 1 else ""
    lines = [
        f"model: {d['count']} requests of {w.service_ms:g} ms CPU{overhead}, concurrency "
        f"{w.concurrency}{cores}, limit {d['limit']}",
        f"latency ms: p50 {d['p50_ms']:.2f}  p90 {d['p90_ms']:.2f}  p99 {d['p99_ms']:.2f}  "
        f"max {d['max_ms']:.2f}  mean {d['mean_ms']:.2f}",
        f"throttled: {throttled} of {d['count']} requests ({100 * d['throttled_fraction']:.1f} %)"
        + (f", stall {d['stall_ms']:.1f} ms typical" if d["stall_ms"] is not None else ""),
        f"period: {d['period_ms']:g} ms; throughput {d['throughput_rps']:.1f} requests/s",
        f"cpu.stat: nr_periods {d['nr_periods']}  nr_throttled {d['nr_throttled']}  "
        f"throttled time {d['throttled_ms']:.1f} ms",
    ]
    return "\n".join(lines)


# -- compare --------------------------------------------------------------------------------

def command_compare(argv: list[str]) -> int:
    opts = build_compare_parser().parse_args(argv)
    if opts.output.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise CliError(f"-o must end in .png, .svg or .pdf (got {opts.output})")
    runs = [read_run(f) for f in opts.files]  # read all first: a bad file fails before drawing
    try:
        picture, markdown, rows = save_comparison(runs, opts.output, opts.title)
    except OSError as exc:
        raise CliError(f"cannot write {opts.output}: {exc.strerror or exc}") from None
    print(format_table(rows))
    print(f"picture: {picture}, table: {markdown}")
    return 0

