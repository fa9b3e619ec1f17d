"""``record_run``: one run from start to saved files, the same for every command and benchmark.

metadata (what, where, the service's ``/limits``) -> ``<name>.json`` -> warm-up -> the load plan,
each completed request a flushed CSV row and handed to the observers (printed lines, a progress
bar) -> the end written into the metadata (summary, completed, interrupted, why it stopped).
With ``cgroup`` (``--cgroup``), the target's own group is sampled meanwhile and each request
gets its throttling (``client.run.attach``).
Ctrl-C or SIGTERM ends the run early with every completed request on disk; the caller learns
it from ``RecordedRun.interrupted`` and decides what follows (a sweep stops, ``run`` exits 130).
Drawing and printing the result are the caller's (``client.render``).
"""

from __future__ import annotations

import os
import platform
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from client import __version__
from client.data.files import Run, RunWriter, write_metadata, write_rows
from client.data.metadata import LoadMode, ReplicaInfo, RunMetadata, SweepInfo
from client.data.pace import closed_loop_pace, open_loop_pace
from client.data.record import DEFAULT_RULE, RawDataError, RequestRecord
from client.data.status import StatusRule
from client.data.summary import summarize
from client.data.threads import read_run_threads
from client.data.timeline import timeline_path
from client.run.attach import CgroupAttachment
from client.run.cgroup_sampler import DEFAULT_INTERVAL
from client.run.service_group import ServiceGroup
from client.data.request import HttpRequest
from client.run.http import Requests, Verify, fetch_limits, warm_up, warm_up_all
from client.run.modes import time_plan
from client.run.observer import RunObserver
from client.run.plan import LoadPlan
from client.run.recorder import RunOutcome, files_first, stop_on_terminate
from client.run.timeline_record import anchor_clock
from cpuquota.limit import DEFAULT_PERIOD_MS, Limit

__all__ = ["RecordedRun", "RunSpec", "load_average", "note_pace", "record_run", "settle_s"]


def settle_s(limit: Limit | None) -> float:
    """The pause after a warm-up: one period of ``limit``'s quota (without one, the kernel's
    default period)."""
    return (limit.period_ms if limit is not None else DEFAULT_PERIOD_MS) / 1000


@dataclass(frozen=True)
class RunSpec:
    """What to run and where to keep it."""

    url: str                       # the full URL timed (with ``?iterations=N``)
    plan: LoadPlan
    name: str
    data_dir: Path
    iterations: int
    command: Sequence[str]         # how it was asked for, for the metadata
    new_connection: bool = False
    timeout: float = 30.0
    warmup: int = 0
    # after a warm-up, this long before the first timed request: one quota period, so the
    # warm-up's CPU does not spend the quota the first timed requests run on
    settle_s: float = DEFAULT_PERIOD_MS / 1000
    max_failures: int = 5
    limits_url: str | None = None  # where to ask for ``/limits`` (default: ``url``)
    sweep: SweepInfo | None = None
    service: dict[str, Any] | None = None
    note_load_average: bool = False
    replica_urls: tuple[str, ...] = ()  # several: requests spread round-robin over them
    replicas: ReplicaInfo | None = None
    cgroup: ServiceGroup | None = None  # the target's own group, read during the run
    cgroup_interval: float = DEFAULT_INTERVAL
    verify: Verify = True               # an https:// server's certificate: see tls_verify
    request: HttpRequest | None = None  # what is sent (None: a GET of ``url``)
    targets: tuple[HttpRequest, ...] = ()  # a --targets file's: sent round-robin instead
    redact: frozenset[str] = frozenset()   # more header names whose values stay out of files
    ask_limits: bool = True             # ask the service for /limits (burn-service's only)
    ok_status: StatusRule = DEFAULT_RULE  # which statuses are successes (client.data.status)

    @property
    def sent(self) -> Requests:
        """What the timed requests are: the targets, the replicas' URLs, or the one request."""
        return self.targets or self.replica_urls or self.request or self.url

    @property
    def csv_path(self) -> Path:
        return self.data_dir / f"{self.name}.csv"

    @property
    def meta_path(self) -> Path:
        return self.data_dir / f"{self.name}.json"


@dataclass
class RecordedRun:
    run: Run
    outcome: RunOutcome
    interrupted: bool = False
    meta_path: Path = field(default_factory=Path)

    def files(self, picture: Path | None = None) -> list[Path]:
        """The files the run left: CSV, metadata, the group's timeline, the picture."""
        files = [self.run.path, self.meta_path]
        if self.run.timeline is not None:
            files.append(timeline_path(self.run.path))
        return files + ([picture] if picture else [])


def load_average() -> list[float] | None:
    """How busy the machine was (it may be shared); None where there is no such number."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # not available on this platform
        return None


def start_metadata(spec: RunSpec, started: datetime) -> RunMetadata:
    plan = spec.plan.to_metadata()
    return RunMetadata(
        name=spec.name, version=__version__, url=spec.url, iterations=spec.iterations,
        mode=plan["mode"], requests=plan["requests"], concurrency=plan["concurrency"],
        rate_rps=plan["rate_rps"], duration_s=plan["duration_s"],
        new_connection=spec.new_connection, timeout_s=spec.timeout, warmup=spec.warmup,
        started_at=started.isoformat(), host=socket.gethostname(),
        platform=platform.platform(), python=platform.python_version(),
        command=list(spec.command),
        limits=(fetch_limits(spec.limits_url or spec.url, verify=spec.verify)
                if spec.ask_limits else None),
        request=spec.request.to_metadata(spec.redact) if spec.request else None,
        targets=[t.to_metadata(spec.redact) for t in spec.targets] or None,
        sweep=spec.sweep, service=spec.service, replicas=spec.replicas,
        cgroup=spec.cgroup.to_metadata() if spec.cgroup else None,
        load_average=load_average() if spec.note_load_average else None,
        ok_status=str(spec.ok_status))


def note_pace(metadata: RunMetadata, plan: LoadPlan, outcome: RunOutcome) -> None:
    """Whether the client kept up (``client.data.pace``): an open loop's send lag and rate,
    a closed loop's own time per request."""
    if plan.mode is LoadMode.OPEN_LOOP and plan.rate_rps is not None:
        pace = open_loop_pace(outcome.records, plan.rate_rps)
        if pace is not None:
            metadata.client_fell_behind = pace.fell_behind
            metadata.client_pace = pace.to_dict()
    elif plan.mode is LoadMode.CLOSED_LOOP:
        metadata.client_pace = closed_loop_pace(outcome.own_ns, outcome.own_requests)


def _warm_up(spec: RunSpec) -> None:
    """``spec.warmup`` requests that are not recorded, then one quota period
    (``spec.settle_s``) so their CPU does not spend the first timed requests' quota."""
    if spec.warmup <= 0:
        return
    if spec.replica_urls:
        warm_up_all(spec.replica_urls, spec.warmup, new_connection=spec.new_connection,
                    timeout=spec.timeout, verify=spec.verify)
    else:
        warm_up(spec.targets or spec.request or spec.url, spec.warmup,
                new_connection=spec.new_connection, timeout=spec.timeout, verify=spec.verify)
    time.sleep(spec.settle_s)


def record_run(spec: RunSpec, observers: Sequence[Callable[[RequestRecord], None]] = (), *,
               started: datetime | None = None,
               watcher: RunObserver | None = None) -> RecordedRun:
    """Run ``spec``, keeping every completed request on disk as it completes (see the module
    docstring). ``RawDataError`` when the files cannot be written (nothing is sent then).
    ``watcher`` (``--live``) is told the run's start, each request and its end
    (``client.run.observer``)."""
    metadata = start_metadata(spec, started or datetime.now(timezone.utc))
    writer = _open_files(spec, metadata)
    observers = [*observers, *([watcher.request_done] if watcher is not None else [])]

    def on_record(record: RequestRecord) -> None:
        writer.write(record)
        for observe in observers:
            observe(record)

    outcome = RunOutcome()
    attached = (CgroupAttachment(spec.cgroup, spec.csv_path, spec.cgroup_interval)
                if spec.cgroup is not None else None)
    if attached is not None and metadata.cgroup is not None:
        metadata.cgroup["usage"] = attached.sampler.usage   # the sampler keeps it up to date
    if watcher is not None:
        watcher.run_started(metadata, attached.sampler.samples if attached else None)
    try:
        interrupted = _time_run(spec, metadata, on_record, outcome, attached)
    finally:
        writer.close()
        if attached is not None:
            attached.stop()
    with files_first():
        if attached is not None and not spec.plan.sequential:
            outcome.records[:] = attached.attribute(outcome.records)
            write_rows(spec.csv_path, outcome.records)
        _write_end(spec, metadata, outcome, interrupted, attached, watcher)
    timeline = attached.sampler.samples if attached is not None else None
    threads = read_run_threads(spec.csv_path) if timeline else None   # the sampler's file
    return RecordedRun(Run(spec.csv_path, outcome.records, metadata, timeline, threads),
                       outcome, interrupted, spec.meta_path)


def _open_files(spec: RunSpec, metadata: RunMetadata) -> RunWriter:
    """The run's CSV, open for its rows, and its metadata as at the start."""
    try:
        writer = RunWriter(spec.csv_path)
        write_metadata(spec.meta_path, metadata)
    except OSError as exc:
        raise RawDataError(f"cannot write raw data in {spec.data_dir}: "
                           f"{exc.strerror or exc}") from None
    return writer


def _time_run(spec: RunSpec, metadata: RunMetadata, on_record: Callable[[RequestRecord], None],
              outcome: RunOutcome, attached: CgroupAttachment | None) -> bool:
    """The warm-up, then the load plan's timed requests into ``outcome``; True when Ctrl-C
    or SIGTERM ended it early."""
    def on_start(run_start_ns: int) -> None:
        """At the run's first instant: where its clock is on the wall clock (``import``
        places its requests on a recorded timeline by it), then the group's sampler."""
        metadata.clock = asdict(anchor_clock(run_start_ns))
        if attached is not None:
            attached.start(run_start_ns)
    try:
        with stop_on_terminate():
            _warm_up(spec)
            time_plan(spec.sent, spec.plan, on_record, label="target" if spec.targets else "replica",
                      new_connection=spec.new_connection,
                      timeout=spec.timeout, max_consecutive_failures=spec.max_failures,
                      outcome=outcome, on_start=on_start,
                      wrap=attached.probe if attached and spec.plan.sequential else None,
                      verify=spec.verify, ok_status=spec.ok_status)
    except KeyboardInterrupt:
        return True
    return False


def _write_end(spec: RunSpec, metadata: RunMetadata, outcome: RunOutcome, interrupted: bool,
               attached: CgroupAttachment | None, watcher: RunObserver | None) -> None:
    """The run's end into its metadata file: what completed, why it stopped, the summary, the
    group's usage note, the pace, the live page's figures."""
    metadata.ended_at = datetime.now(timezone.utc).isoformat()
    metadata.completed = len(outcome.records)
    metadata.interrupted = interrupted
    metadata.stop_reason = outcome.stop_reason
    metadata.summary = summarize(outcome.records)
    if attached is not None and metadata.cgroup is not None:
        metadata.cgroup["usage"] = attached.sampler.usage
    note_pace(metadata, spec.plan, outcome)
    if watcher is not None:
        metadata.live = watcher.run_ended(outcome.records)
    write_metadata(spec.meta_path, metadata)
