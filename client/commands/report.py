"""``http-timing report FILE``: a run's statistics, which requests were throttled, and with
``--predict`` what the quota model says about it (text and a picture).

    http-timing report FILE [--json]
    http-timing report FILE --predict [--cpus X] [--period-ms P] [--burst-ms B] [-o PICTURE]

Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from client.analysis.explain import explain
from client.analysis.report import (ScenarioError, build_prediction, build_predictions,
                                   build_report)
from client.commands.common import EXIT_OK, add_limit_arguments, limit_from
from client.commands.options import CliError, OneLineParser
from client.data.files import FileWriteError, Run, read_run
from client.data.jsonsafe import json_ready
from client.render.compare import plot_overlay
from client.render.text import format_prediction_report, format_report
from cpuquota.limit import Limit

__all__ = ["build_report_parser", "command_report", "limit_for"]


def build_report_parser() -> OneLineParser:
    parser = OneLineParser(prog="http-timing report",
                           description="Latency statistics of a saved run, which requests were "
                           "throttled, and (--predict) what the quota model says.")
    parser.add_argument("file", type=Path, help="run file (.csv, .json or text capture)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--predict", action="store_true",
                        help="also simulate the run with the quota model and show both, in text "
                        "and as a picture")
    add_limit_arguments(parser, required=False)
    parser.add_argument("-o", "--output", type=Path, metavar="PICTURE",
                        help="with --predict: the picture "
                        "(default <pictures-dir>/<name>-predict.png)")
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"), metavar="DIR",
                        help="with --predict: where <name>-predict.png goes (default ./pictures)")
    return parser


def command_report(argv: list[str]) -> int:
    opts = build_report_parser().parse_args(argv)
    run = read_run(opts.file)
    if opts.predict:
        return report_predict(run, opts)
    if any(v is not None for v in (opts.cpus, opts.period_ms, opts.burst_ms)) or opts.output:
        raise CliError("--cpus, --period-ms, --burst-ms and -o go with --predict")
    report = build_report(run)
    if opts.json:
        print(json.dumps(json_ready(report.to_dict()), indent=2))
    else:
        print("\n".join(format_report(report, run.path)))
    return EXIT_OK


def limit_for(run: Run, opts: argparse.Namespace) -> Limit:
    """The limit to model: ``--cpus`` (its period and burst, else the run's), else the run's
    (with ``--period-ms``/``--burst-ms`` over it); a run without one needs ``--cpus``."""
    found = run.metadata.limit
    if opts.cpus is not None:
        return limit_from(opts.cpus, opts.period_ms, opts.burst_ms or 0.0, "--cpus",
                          default=found)
    if found is not None:
        return limit_from(found.cpus, opts.period_ms, opts.burst_ms, found.source,
                          default=found)
    what = ("its metadata shows no CPU limit" if run.metadata.limits_known
            else "no limits in its metadata: a text capture, or a server without /limits")
    raise CliError(f"no CPU limit known for {run.path} ({what}): give --cpus X "
                   "(and --period-ms P if not 100)")


def report_predict(run: Run, opts: argparse.Namespace) -> int:
    if opts.cpus is None and opts.period_ms is None and opts.burst_ms is None:
        try:
            per_quota = build_predictions(run)
        except ScenarioError as exc:
            raise CliError(str(exc)) from None
        if per_quota:
            return _predict_per_quota(run, opts, per_quota)
    limit = limit_for(run, opts)
    try:
        result = build_prediction(run, limit)
    except ScenarioError as exc:
        raise CliError(str(exc)) from None
    explanation = explain(result.report, result.prediction, limit)
    out = opts.output or opts.pictures_dir / f"{run.path.stem}-predict.png"
    picture, failed = _drawn(lambda: plot_overlay(
        run, [(label, p.records) for label, p in result.series()], result.report.detection,
        out, title=f"{run.name}: measured vs predicted at {limit.describe()}"))
    if opts.json:
        print(json.dumps(json_ready({
            **result.report.to_dict(), "model_limit": limit.describe(),
            "predicted": result.prediction.to_dict(), "charged_ms": result.charged_ms,
            "predicted_charged": result.charged.to_dict() if result.charged else None,
            "explanation": explanation, "picture": picture and str(picture)}), indent=2))
    else:
        print("\n".join(format_prediction_report(result, explanation, run.path,
                                                  picture or "not written")))
    if failed is not None:
        raise failed
    return EXIT_OK


def _drawn(draw: Callable[[], Path]) -> tuple[Path | None, FileWriteError | None]:
    """A picture drawn after the text is ready: its path, or the one-line error to raise once
    the text is printed (the text does not depend on the picture)."""
    try:
        return draw(), None
    except FileWriteError as exc:
        return None, exc


def _predict_per_quota(run: Run, opts: argparse.Namespace, per_quota: list) -> int:
    """A run that spans a change of quota: the model once per quota, on the requests sent
    while it was in force; one picture each (``-o`` names the first; the others get -2, -3)."""
    base = opts.output or opts.pictures_dir / f"{run.path.stem}-predict.png"
    lines: list[str] = [f"the quota changed during {run.path}: the model is run once per "
                        "quota, on the requests sent while it was in force"]
    out: list[dict] = []
    failed: FileWriteError | None = None
    for index, (span, part, result) in enumerate(per_quota, start=1):
        limit = result.limit
        explanation = explain(result.report, result.prediction, limit)
        picture, failed = (None, failed) if failed is not None else _drawn(
            lambda: plot_overlay(
                part, [(label, p.records) for label, p in result.series()],
                result.report.detection,
                base if index == 1 else base.with_name(f"{base.stem}-{index}{base.suffix}"),
                title=f"{run.name} ({span.describe()}): measured vs predicted at "
                      f"{limit.describe()}"))
        lines += ["", f"[{index}] {span.describe()}",
                  *format_prediction_report(result, explanation, run.path,
                                            picture or "not written")]
        out.append({"span": span.to_dict(), **result.report.to_dict(),
                    "model_limit": limit.describe(), "predicted": result.prediction.to_dict(),
                    "explanation": explanation, "picture": picture and str(picture)})
    if opts.json:
        print(json.dumps(json_ready({"name": run.name, "by_quota": out}), indent=2))
    else:
        print("\n".join(lines))
    if failed is not None:
        raise failed
    return EXIT_OK
