"""``http-timing predict``: what a CPU quota does to requests of S ms of CPU (the model), or
(``--timeline``) what other limits would have done to a recorded window
(``client.analysis.replay``, its inputs read by :func:`client.advise.replay.load_replay`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from client.analysis.model import MAX_CONCURRENCY, MAX_REQUESTS, Scenario, predict
from client.commands.common import EXIT_OK, limit_from, period_ms
from client.commands.options import (CliError, OneLineParser, cpus_number, int_in,
                                     number_above, number_at_least, parse_limits)
from client.data.jsonsafe import json_ready
from client.render.text import format_prediction
from cpuquota.limit import zero_limit

__all__ = ["MODEL_ONLY", "build_predict_parser", "command_predict", "command_replay"]

# the model's own options: a replay takes its load from the record
MODEL_ONLY = ("service_ms", "concurrency", "requests", "overhead_ms", "cores", "threads",
              "replicas")


def build_predict_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="http-timing predict",
        description="Predict what a CPU quota does to requests of S ms of CPU sent back to back, "
        "by simulating the kernel's accounting (quota per period, the wait for the next period, "
        "burst credit) on a simulated clock. Deterministic. With --timeline: replay a recorded "
        "window (its CPU demand, with or without its requests) at the limits --cpus A,B,C.")
    parser.add_argument("--service-ms", type=number_above(0), metavar="S",
                        help="CPU time of one request in ms (its latency on an idle, unlimited "
                        "machine, minus the network); the model's load (or --timeline)")
    parser.add_argument("--cpus", required=True, metavar="X",
                        help="the CPU limit, as docker run --cpus: X × period of CPU per period; "
                        "with --timeline, one or more: A,B,C (none: no limit)")
    parser.add_argument("--period-ms", type=period_ms, metavar="P",
                        help="the quota's period in ms (default: the timeline's, else 100)")
    parser.add_argument("--burst-ms", type=number_at_least(0), metavar="B",
                        help="burst: unused quota that may be saved, in ms (default 0)")
    parser.add_argument("--timeline", type=Path, metavar="NAME.cgroup.csv",
                        help="replay this recorded timeline (http-timing record's, a --cgroup "
                        "run's, the node agent's; its NAME.json beside it) at each limit")
    parser.add_argument("--requests-from", type=Path, metavar="FILE",
                        help="with --timeline: the requests of the recorded window (a run's "
                        "CSV, a load tool's file or an access log, as import reads them): "
                        "each one's latency predicted at each limit")
    parser.add_argument("--concurrency", type=int_in(1, MAX_CONCURRENCY), metavar="C",
                        help="requests in flight at once (closed loop; default 1)")
    parser.add_argument("--requests", type=int_in(1, MAX_REQUESTS), metavar="N",
                        help="how many requests (default 100)")
    parser.add_argument("--overhead-ms", type=number_at_least(0), metavar="O",
                        help="client and network time per request that uses no quota (default 0)")
    parser.add_argument("--cores", type=int_in(1, 1024), default=None, metavar="K",
                        help="CPUs the service's work can use at once (default 1: one Python "
                        "process; with --threads T, T)")
    parser.add_argument("--threads", type=int_in(1, 1024), metavar="T",
                        help="each request's work runs on T threads in parallel: S ms of quota "
                        "in S/T of wall time (default 1)")
    parser.add_argument("--replicas", type=int_in(1, 10_000), metavar="N",
                        help="requests spread round-robin over N replicas, each under the "
                        "limit (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON (the keys of report)")
    return parser


def command_predict(argv: list[str]) -> int:
    parser = build_predict_parser()
    opts = parser.parse_args(argv)
    if opts.timeline is not None:
        return command_replay(opts, parser)
    if opts.requests_from is not None:
        raise CliError("--requests-from goes with --timeline (the requests of a recorded window)")
    if opts.service_ms is None:
        parser.error("the following arguments are required: --service-ms (or --timeline)")
    return _model(opts, parser)


def _model(opts: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        cpus = cpus_number(opts.cpus)
    except argparse.ArgumentTypeError as exc:
        parser.error(f"argument --cpus: {exc}")
    if cpus == 0:
        parser.error(zero_limit(f"--cpus {opts.cpus}", "predict models a limit (with "
                                "--timeline, none in the list is no limit)"))
    limit = limit_from(cpus, opts.period_ms, opts.burst_ms)
    threads = opts.threads or 1
    try:
        workload = Scenario.under(limit, opts.service_ms, concurrency=opts.concurrency or 1,
                                  requests=opts.requests or 100,
                                  overhead_ms=opts.overhead_ms or 0.0,
                                  cores=opts.cores or threads, threads=threads,
                                  replicas=opts.replicas or 1)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    prediction = predict(workload)
    if opts.json:
        print(json.dumps(json_ready(prediction.to_dict()), indent=2))
    else:
        print(format_prediction(prediction))
    return EXIT_OK


def command_replay(opts: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``--timeline``: the recorded window replayed at each limit (its modules imported only
    then: the model alone needs none of them)."""
    from client.advise.replay import MS, load_replay, replay_answer
    from client.analysis.replay import replay_limits
    from client.render.replay import format_replay

    given = [f"--{name.replace('_', '-')}" for name in MODEL_ONLY
             if getattr(opts, name) is not None]
    if given:
        raise CliError(f"{', '.join(given)}: for the model (--service-ms); a replay takes its "
                       "load from the recorded timeline")
    replayed = load_replay(opts.timeline, opts.requests_from, opts.period_ms)
    limits = parse_limits(opts.cpus, period_ms=replayed.period_ns / MS,
                          burst_ms=opts.burst_ms or 0.0)
    rows = replay_limits(replayed.demand,
                         [None if limit is None else limit.cpus for limit in limits],
                         replayed.requests, round((opts.burst_ms or 0.0) * MS),
                         replayed.period_ns, replayed.closed)
    answer = replay_answer(replayed.recording, replayed.demand, rows, replayed.placed,
                           opts.requests_from)
    if opts.json:
        print(json.dumps(json_ready(answer), indent=2))
    else:
        print(format_replay(answer))
    return EXIT_OK
