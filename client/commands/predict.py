"""``http-timing predict``: what a CPU quota does to requests of S ms of CPU (the model)."""

from __future__ import annotations

import json

from client.analysis.model import MAX_CONCURRENCY, MAX_REQUESTS, Workload, predict
from client.commands.common import EXIT_OK, add_limit_arguments, limit_from
from client.commands.options import (CliError, OneLineParser, int_in, number_above,
                                     number_at_least)
from client.data.jsonsafe import json_ready
from client.render.text import format_prediction

__all__ = ["build_predict_parser", "command_predict"]


def build_predict_parser() -> OneLineParser:
    parser = OneLineParser(
        prog="http-timing predict",
        description="Predict what a CPU quota does to requests of S ms of CPU sent back to back, "
        "by simulating the kernel's accounting (quota per period, the wait for the next period, "
        "burst credit) on a simulated clock. Deterministic.")
    parser.add_argument("--service-ms", type=number_above(0), required=True, metavar="S",
                        help="CPU time of one request in ms (its latency on an idle, unlimited "
                        "machine, minus the network)")
    add_limit_arguments(parser, required=True)
    parser.add_argument("--concurrency", type=int_in(1, MAX_CONCURRENCY), default=1,
                        metavar="C", help="requests in flight at once (closed loop; default 1)")
    parser.add_argument("--requests", type=int_in(1, MAX_REQUESTS), default=100, metavar="N",
                        help="how many requests (default 100)")
    parser.add_argument("--overhead-ms", type=number_at_least(0), default=0.0, metavar="O",
                        help="client and network time per request that uses no quota (default 0)")
    parser.add_argument("--cores", type=int_in(1, 1024), default=None, metavar="K",
                        help="CPUs the service's work can use at once (default 1: one Python "
                        "process; with --threads T, T)")
    parser.add_argument("--threads", type=int_in(1, 1024), default=1, metavar="T",
                        help="each request's work runs on T threads in parallel: S ms of quota "
                        "in S/T of wall time (default 1)")
    parser.add_argument("--replicas", type=int_in(1, 10_000), default=1, metavar="N",
                        help="requests spread round-robin over N replicas, each under the "
                        "limit (default 1)")
    parser.add_argument("--json", action="store_true", help="print JSON (the keys of report)")
    return parser


def command_predict(argv: list[str]) -> int:
    opts = build_predict_parser().parse_args(argv)
    limit = limit_from(opts.cpus, opts.period_ms, opts.burst_ms)
    try:
        workload = Workload.under(limit, opts.service_ms, concurrency=opts.concurrency,
                                  requests=opts.requests, overhead_ms=opts.overhead_ms,
                                  cores=opts.cores or opts.threads, threads=opts.threads,
                                  replicas=opts.replicas)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    prediction = predict(workload)
    if opts.json:
        print(json.dumps(json_ready(prediction.to_dict()), indent=2))
    else:
        print(format_prediction(prediction))
    return EXIT_OK
