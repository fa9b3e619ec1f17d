"""``http-timing sweep``: start the service under each CPU limit, time it, stop it, compare.

    http-timing sweep --cpus 1,0.3,0.1 --backend kernel|inprocess|docker|auto
                      [--requests N] [--iterations N] [--rate R --duration D | --concurrency C]
                      [--name PREFIX] [--image IMAGE]

For each limit the sweep starts the burn service itself on a free port, waits for
``/healthz``, times it like ``http-timing run`` (same raw data, same picture), and stops it by
its pid or container id (also on Ctrl-C/SIGTERM or a failure):

- ``kernel``: ``burn-service --cpus X``, a real CFS quota in a cgroup (root + cgroups);
- ``inprocess``: ``burn-service --cpu-limit X*100``, the in-process throttle (anywhere, X <= 1);
- ``docker``: ``docker run --cpus X -p 127.0.0.1:PORT:7800 IMAGE``, the project's image;
- ``auto``: kernel where this process may create cgroups, else in-process.

Files: ``<data-dir>/<prefix>-<backend>-<cpus>.csv/.json`` and ``<pictures-dir>/<same>.png``
per limit, then the comparison picture ``<pictures-dir>/<prefix>-<backend>-sweep.png`` with its
Markdown table beside it (``client.compare``), printed too. With ``--rate`` or
``--concurrency`` it is the seeds' throughput-scaling test: a second table (RPS, avg, p95,
p99, error rate, throttled, per limit) in ``<prefix>-<backend>-sweep-throughput.md``.
A limit of 0 (or ``none``) runs the service without a limit, as a baseline.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from client import __version__
from client.cli import (EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, EXIT_OK, _raise_terminated,
                        format_summary, format_throughput)
from client.compare import format_table, save_comparison
from client.load import DEFAULT_REQUESTS, LoadPlan, time_plan
from client.options import CliError, int_at_least, number_above
from client.plot import plot_run
from client.progress import RunProgress
from client.rawdata import RequestRecord, Run, RunWriter, write_metadata
from client.service import Service, ServiceError, burn_service_path, free_port
from client.stats import summarize
from client.throughput import format_throughput_table, throughput_row
from client.timing import RunOutcome, build_url, fetch_limits, format_line, warm_up

__all__ = ["BACKENDS", "DEFAULT_IMAGE", "build_sweep_parser", "command_sweep", "cpus_label",
           "docker_problem", "kernel_quota_problem", "parse_cpus", "resolve_backend", "run_name",
           "service_argv", "sweep_stem"]

BACKENDS = ("auto", "kernel", "inprocess", "docker")
DEFAULT_IMAGE = "throttle-lab:latest"  # docker/compose.yaml's default; THROTTLE_LAB_IMAGE wins
CONTAINER_PORT = 7800                  # the image's BURN_SERVICE_PORT


# --- pure: options, names, commands -------------------------------------------------------

def parse_cpus(text: str) -> tuple[float, ...]:
    """``1,0.3,0.1`` -> (1.0, 0.3, 0.1); ``0`` or ``none`` is no limit. ValueError, one line."""
    values: list[float] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise ValueError(f"--cpus takes numbers separated by commas, like 1,0.3,0.1 "
                             f"(got {text!r})")
        if item.lower() in ("none", "unlimited"):
            value = 0.0
        else:
            try:
                value = float(item)
            except ValueError:
                raise ValueError(f"--cpus: {item!r} is not a number of CPUs "
                                 "(like 0.3, or none for no limit)") from None
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"--cpus: {item!r} must be a number >= 0 (0 or none: no limit)")
            if 0 < value < 0.01:
                raise ValueError(f"--cpus: {item} is below 0.01 CPU (1 ms per 100 ms period), "
                                 "the smallest limit the service accepts")
        if value in values:
            raise ValueError(f"--cpus: {cpus_label(value)} is given twice")
        values.append(value)
    return tuple(values)


def cpus_label(cpus: float) -> str:
    """``1``, ``0.3``, ``none`` (for 0): used in file names and tables."""
    return "none" if cpus == 0 else f"{cpus:g}"


def _limit_text(cpus: float) -> str:
    """``0.3 CPU``, or ``no limit`` for 0: the run's limit in tables and headings."""
    return f"{cpus_label(cpus)} CPU" if cpus else "no limit"


def sweep_stem(prefix: str, backend: str) -> str:
    return f"{prefix}-{backend}" if prefix else backend


def run_name(prefix: str, backend: str, cpus: float) -> str:
    """``<prefix>-<backend>-<cpus>``, e.g. ``demo-kernel-0.3`` (``kernel-0.3`` without one)."""
    return f"{sweep_stem(prefix, backend)}-{cpus_label(cpus)}"


def service_argv(backend: str, cpus: float, port: int, *, burn_service: str = "burn-service",
                 image: str = DEFAULT_IMAGE, container_name: str | None = None) -> list[str]:
    """The command that starts the service under ``cpus`` (0: no limit) on 127.0.0.1:port."""
    common = ["--log-level", "warning"]
    if backend == "kernel":
        limit = ["--cpus", f"{cpus:g}"] if cpus else []
        return [burn_service, "--port", str(port), *limit, *common]
    if backend == "inprocess":
        limit = ["--cpu-limit", f"{cpus * 100:g}"] if cpus else []
        return [burn_service, "--port", str(port), *limit, *common]
    if backend == "docker":
        name = ["--name", container_name] if container_name else []
        limit = ["--cpus", f"{cpus:g}"] if cpus else []
        return ["docker", "run", "--detach", *name, *limit,
                "--publish", f"127.0.0.1:{port}:{CONTAINER_PORT}", image, *common]
    raise ValueError(f"unknown backend {backend!r}")


def check_limits(backend: str, cpus: Sequence[float]) -> None:
    """What a backend cannot do, as a ValueError (one line)."""
    if backend == "inprocess":
        too_many = [c for c in cpus if c > 1]
        if too_many:
            raise ValueError(f"--backend inprocess limits one process to at most 1 CPU "
                             f"(--cpu-limit 100 %); got {', '.join(map(cpus_label, too_many))}: "
                             "use --backend kernel or docker for more")
    if backend == "docker":
        available = os.cpu_count() or 1
        too_many = [c for c in cpus if c > available]
        if too_many:
            raise ValueError(f"docker refuses --cpus above this machine's {available} CPUs "
                             f"(got {', '.join(map(cpus_label, too_many))})")


# --- what this machine can do -------------------------------------------------------------

def kernel_quota_problem() -> str | None:
    """Why ``burn-service --cpus`` cannot work here, or None when it should."""
    if not sys.platform.startswith("linux"):
        return f"kernel CPU quotas need Linux cgroups (this is {sys.platform})"
    if os.geteuid() != 0:
        return "creating a cgroup needs root"
    from service.cgroup import CgroupError, locate_cpu_controller

    try:
        directory = locate_cpu_controller().directory
    except CgroupError as exc:
        return str(exc)
    if not os.access(directory, os.W_OK):
        return f"the cgroup {directory} is not writable"
    return None


def docker_problem(image: str) -> str | None:
    """Why ``docker run IMAGE`` cannot work here, or None when it should."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "the Docker engine does not answer (docker info timed out)"
    if info.returncode != 0:
        return "no Docker engine is running (docker info failed)"
    found = subprocess.run(["docker", "image", "inspect", image], capture_output=True,
                           text=True, timeout=20)
    if found.returncode != 0:
        return (f"no image {image}: build it with `docker build -t {image} -f docker/Dockerfile .`"
                " (see docker/) or pass --image")
    return None


def resolve_backend(backend: str) -> tuple[str, str | None]:
    """``auto`` -> ``kernel`` when permitted, else ``inprocess`` with the reason why not."""
    if backend != "auto":
        return backend, None
    problem = kernel_quota_problem()
    return ("inprocess", problem) if problem else ("kernel", None)


# --- the command ----------------------------------------------------------------------------

def build_sweep_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="http-timing sweep",
        description="Start the burn service under each CPU limit, time it, stop it; save every "
        "run, a comparison picture and a Markdown table.")
    parser.add_argument("--cpus", default="1,0.3,0.1",
                        help="CPU limits, comma separated; 0 or none = no limit "
                        "(default 1,0.3,0.1)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="kernel: burn-service --cpus (a real cgroup quota; root); "
                        "inprocess: burn-service --cpu-limit (anywhere); docker: docker run "
                        "--cpus; auto: kernel where permitted, else inprocess (default)")
    parser.add_argument("--iterations", type=int_at_least(0), default=5000,
                        help="burn iterations per request, ~1 us each (default 5000)")
    parser.add_argument("--requests", type=int_at_least(1), default=None,
                        help=f"requests per limit (default {DEFAULT_REQUESTS})")
    parser.add_argument("--concurrency", type=int_at_least(1), metavar="C",
                        help="closed loop: C requests at a time")
    parser.add_argument("--rate", type=number_above(0), metavar="R",
                        help="open loop: R requests per second, latency from the intended "
                        "send time")
    parser.add_argument("--duration", type=number_above(0), metavar="D",
                        help="seconds per limit, with --rate or --concurrency")
    parser.add_argument("--name", default=None, metavar="PREFIX",
                        help="prefix of the file names (default sweep-<timestamp>; '' for none)")
    parser.add_argument("--image", default=None,
                        help=f"docker image for --backend docker (default $THROTTLE_LAB_IMAGE "
                        f"or {DEFAULT_IMAGE})")
    parser.add_argument("--warmup", type=int_at_least(0), default=0, metavar="N",
                        help="requests sent to each service before timing, not recorded "
                        "(default 0)")
    parser.add_argument("--timeout", type=number_above(0), default=30.0,
                        help="seconds before one request counts as failed (default 30)")
    parser.add_argument("--data-dir", type=Path, default=Path("raw-data"))
    parser.add_argument("--pictures-dir", type=Path, default=Path("pictures"))
    parser.add_argument("--show-requests", action="store_true",
                        help="print the original per-request line for every request")
    return parser


def _check_prefix(prefix: str) -> None:
    if os.sep in prefix or (os.altsep and os.altsep in prefix) or prefix in (".", ".."):
        raise CliError(f"--name must be a plain file name prefix (got {prefix!r})")


def command_sweep(argv: list[str]) -> int:
    opts = build_sweep_parser().parse_args(argv)
    started = datetime.now(timezone.utc)
    try:
        cpus_list = parse_cpus(opts.cpus)
        plan = LoadPlan.from_options(requests=opts.requests, concurrency=opts.concurrency,
                                     rate=opts.rate, duration=opts.duration)
    except ValueError as exc:  # a LoadPlanError is a ValueError
        raise CliError(str(exc)) from None
    prefix = "sweep-" + started.strftime("%Y%m%d-%H%M%S") if opts.name is None else opts.name
    _check_prefix(prefix)
    backend, why_not_kernel = resolve_backend(opts.backend)
    try:
        check_limits(backend, cpus_list)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    image = opts.image or os.environ.get("THROTTLE_LAB_IMAGE") or DEFAULT_IMAGE
    if backend == "kernel" and (problem := kernel_quota_problem()):
        raise CliError(f"--backend kernel cannot work here: {problem}; use --backend inprocess "
                       "(no root needed) or docker")
    if backend == "docker" and (problem := docker_problem(image)):
        raise CliError(f"--backend docker cannot work here: {problem}")
    try:
        burn_service = burn_service_path() if backend != "docker" else "burn-service"
    except ServiceError as exc:
        raise CliError(str(exc)) from None

    if why_not_kernel:
        print(f"sweep: in-process throttle (no kernel quota here: {why_not_kernel})")
    print(f"sweep: {describe_backend(backend)}; limits {', '.join(map(cpus_label, cpus_list))} "
          f"CPU; {plan.describe()}, iterations={opts.iterations}", flush=True)
    if (load := _load_average()) is not None:
        print(f"sweep: load average {load[0]:.1f} on {os.cpu_count()} CPUs (a busy machine "
              "slows every run, limited or not)", flush=True)

    runs: list[Run] = []
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        for index, cpus in enumerate(cpus_list, start=1):
            port = free_port()
            service = Service(
                service_argv(backend, cpus, port, burn_service=burn_service, image=image,
                             container_name=f"throttle-lab-sweep-{os.getpid()}-{index}"),
                port, docker=backend == "docker",
                health_timeout=30 + 1.5 / cpus if cpus else 30)
            print(f"\n[{index}/{len(cpus_list)}] {_limit_text(cpus)}: {' '.join(service.argv)}",
                  flush=True)
            try:
                began = time.monotonic()
                service.start()
                what = (f"container {service.container[:12]}" if service.container
                        else f"pid {service.pid}")
                print(f"healthy after {time.monotonic() - began:.1f} s ({what})", flush=True)
                runs.append(_record_run(opts, plan, service, run_name(prefix, backend, cpus),
                                        backend, cpus, prefix, started, argv))
            finally:
                _stop_quietly(service)
        _compare_and_report(runs, opts, plan, backend, prefix)
    except KeyboardInterrupt:
        print(f"\nhttp-timing sweep: interrupted; {len(runs)} of {len(cpus_list)} limits done, "
              f"every completed request is saved in {opts.data_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ServiceError as exc:
        raise CliError(f"{exc} (runs so far are saved in {opts.data_dir})") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    failed = any(summarize(run.records).errors for run in runs)
    return EXIT_FAILED_REQUESTS if failed else EXIT_OK


def describe_backend(backend: str) -> str:
    return {"kernel": "kernel CPU quota (burn-service --cpus, a cgroup)",
            "inprocess": "in-process throttle (burn-service --cpu-limit)",
            "docker": "docker run --cpus"}[backend]


def _stop_quietly(service: Service) -> None:
    """Stop the service; a second Ctrl-C meanwhile must not leave it running."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals cannot arrive here anyway
        previous = None
    try:
        words = service.stop()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    summary = [line for line in words.splitlines() if "periods" in line and "throttled" in line]
    if summary:  # the cpu-quota supervisor's cpu.stat line
        print(summary[-1].strip(), flush=True)


def _record_run(opts: argparse.Namespace, plan: LoadPlan, service: Service, name: str,
                backend: str, cpus: float, prefix: str, sweep_started: datetime,
                argv: Sequence[str]) -> Run:
    """Time the service like ``http-timing run`` does: CSV row per request, metadata, picture."""
    url = build_url(service.base_url + "/cpuBurnFlow", opts.iterations)
    csv_path = opts.data_dir / f"{name}.csv"
    meta_path = csv_path.with_suffix(".json")
    metadata: dict[str, Any] = {
        "name": name, "tool": "http-timing", "version": __version__,
        "url": url, "iterations": opts.iterations, **plan.to_metadata(),
        "new_connection": False, "timeout_s": opts.timeout, "warmup": opts.warmup,
        "started_at": datetime.now(timezone.utc).isoformat(), "host": socket.gethostname(),
        "platform": platform.platform(), "python": platform.python_version(),
        "command": ["http-timing", "sweep", *argv],
        "sweep": {"name": sweep_stem(prefix, backend) + "-sweep", "backend": backend,
                  "cpus": cpus, "started_at": sweep_started.isoformat()},
        "service": service.describe(), "limits": fetch_limits(url),
        "load_average": _load_average(),  # how busy the machine was (it may be shared)
    }
    try:
        writer = RunWriter(csv_path)
        write_metadata(meta_path, metadata)
    except OSError as exc:
        raise CliError(f"cannot write raw data in {opts.data_dir}: {exc.strerror or exc}") from None
    progress = RunProgress(plan.requests, _limit_text(cpus))
    show: Callable[[RequestRecord], None] = _print_line if opts.show_requests else _ignore

    def on_record(record: RequestRecord) -> None:
        writer.write(record)
        show(record)
        progress.advance(record)

    outcome = RunOutcome()
    interrupted = False
    try:
        warm_up(url, opts.warmup, timeout=opts.timeout)
        with progress:
            time_plan(url, plan, on_record, timeout=opts.timeout, outcome=outcome)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        writer.close()
        summary = summarize(outcome.records)
        metadata.update(ended_at=datetime.now(timezone.utc).isoformat(),
                        completed=len(outcome.records), interrupted=interrupted,
                        stop_reason=outcome.stop_reason, summary=summary.to_dict())
        write_metadata(meta_path, metadata)
    run = Run(csv_path, outcome.records, metadata)
    print(format_summary(summary))
    if plan.mode != "sequential":
        print(format_throughput(outcome.records, metadata))
    if outcome.stop_reason:
        print(f"http-timing sweep: {outcome.stop_reason}: {outcome.records[-1].error}",
              file=sys.stderr)
    if outcome.reached:
        plot_run(run, opts.pictures_dir / f"{name}.png")
    return run


def _limit_of(run: Run) -> str:
    cpus = run.metadata.get("sweep", {}).get("cpus")
    return _limit_text(cpus) if isinstance(cpus, (int, float)) else run.name


def _load_average() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


def _print_line(record: RequestRecord) -> None:
    print(format_line(record), flush=True)


def _ignore(record: RequestRecord) -> None:
    return None


def _compare_and_report(runs: Sequence[Run], opts: argparse.Namespace, plan: LoadPlan,
                        backend: str, prefix: str) -> None:
    stem = sweep_stem(prefix, backend) + "-sweep"
    title = (f"{describe_backend(backend)}: {plan.describe()}, iterations={opts.iterations}")
    picture, table, rows = save_comparison(runs, opts.pictures_dir / f"{stem}.png", title)
    print()
    print(format_table(rows))
    files = [f"comparison picture: {picture}", f"table: {table}"]
    if plan.mode != "sequential":
        labelled = [(_limit_of(run), throughput_row(run.records)) for run in runs]
        markdown = format_throughput_table(labelled)
        scaling = opts.pictures_dir / f"{stem}-throughput.md"
        scaling.write_text(f"Throughput, {title}\n\n{markdown}", encoding="utf-8")
        print()
        print(markdown, end="")
        files.append(f"throughput table: {scaling}")
    print()
    print(f"raw data: {', '.join(str(r.path) for r in runs)} (+ .json metadata)")
    pictures = [opts.pictures_dir / f"{r.path.stem}.png" for r in runs]
    print(f"pictures: {', '.join(str(p) for p in pictures if p.exists())}")
    for line in files:
        print(line)
