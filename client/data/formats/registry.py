"""The one table of file formats (:data:`FORMATS`) and everything that asks it.

Each format says what it is for (``use``, :mod:`client.data.formats.base`): a run file that
``report``, ``plot`` and ``compare`` read directly (:data:`READERS`), or another tool's
results that ``import`` joins to a timeline (:data:`IMPORTERS`). The table is asked in order,
the strictest first. :func:`recognise` picks a format by what a file holds, never by its
name: :func:`read_run` reads a run file with it, :func:`read_results` a results file.

The last format, ``http-timing``, is a run file as ``import`` reads it: whole, with the JSON
beside it, its starts placed on the wall clock by the run's clock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar, cast

from client.data.formats.base import (EPOCH, HEAD_BYTES, RELATIVE, RESULTS, RUN, ImportFileError,
                                      Imported, ImportedRequest, ResultsFormat, RunFormat,
                                      gunzipped_head, read_bytes)
from client.data.formats.envoy import EnvoyDefault, EnvoyJson
from client.data.formats.hey import HeyCsv
from client.data.formats.http_timing_csv import HttpTimingCsvReader
from client.data.formats.jmeter import JMeterCsv
from client.data.formats.k6 import K6Csv, K6Json
from client.data.formats.legacy import LegacyReader
from client.data.formats.locust import LocustCsv
from client.data.formats.nginx import NginxTiming
from client.data.formats.oha import OhaCsv, OhaSqlite
from client.data.formats.traefik import TraefikClf, TraefikJson
from client.data.formats.vegeta import VegetaCsv, VegetaJson
from client.data.loadshape import LoadShape
from client.data.metadata import LoadMode, RunMetadata
from client.data.record import RawDataError, RequestRecord
from client.data.timeline import CgroupSample, read_timeline, timeline_path
from client.data.threads import RunThreads, read_run_threads

__all__ = ["FORMATS", "IMPORTERS", "READERS", "HttpTimingRun", "Run", "read_results",
           "read_run", "reader_for", "recognise", "results_format", "run_shape",
           "run_zero_epoch_ns"]


def run_shape(metadata: RunMetadata) -> LoadShape | None:
    """How a run's JSON says its requests were sent: an http-timing run's plan (its mode and
    ``--concurrency``), an imported run's shape as its import found it; None: it says none."""
    if not metadata.present:
        return None
    if metadata.tool == "http-timing":
        if metadata.mode is LoadMode.OPEN_LOOP:
            return LoadShape(False, None, "said", "the run's plan: --rate")
        count = 1 if metadata.sequential else metadata.concurrency
        return LoadShape(True, count, "said", "the run's plan"
                         + ("" if count == 1 else f": --concurrency {count}"))
    imported = metadata.extra.get("imported")
    return LoadShape.from_dict(imported.get("shape")) if isinstance(imported, dict) else None


def run_zero_epoch_ns(metadata: RunMetadata) -> tuple[int | None, str]:
    """Where the run's zero is on the wall clock (Unix ns), and how it is known; None (and
    why) when the run's JSON does not say.

    ``clock.zero_epoch_ns`` is read at the zero itself; ``started_at`` is taken before the
    warm-up: tens of ms early (the clock check says by how much)."""
    clock = metadata.clock or {}
    zero = clock.get("zero_epoch_ns")
    if isinstance(zero, int) and not isinstance(zero, bool):
        return zero, "by the run's clock (its zero on the wall clock, read at the zero)"
    if metadata.started_at:
        try:
            started = datetime.fromisoformat(metadata.started_at)
        except ValueError:
            started = None
        if started is not None and started.tzinfo is not None:
            return (round(started.timestamp() * 1e6) * 1000,
                    "by the run's started_at (taken before its warm-up: tens of ms early; "
                    "see the clock check)")
    return None, "no clock in its JSON (or no JSON beside it)"


class HttpTimingRun:
    """http-timing's own run, imported: any file a run format recognises (its CSV, with
    ``<name>.json`` beside it when there, or the original script's text). A run made without
    ``--cgroup`` (from a laptop) is marked afterwards from the service's timeline.

    Times: ``start_ns`` counts from the run's zero, placed on the wall clock by
    :func:`run_zero_epoch_ns`; without it the starts are relative and need ``--start``. Each
    request is kept whole (scheduled send, server timings, replica, target); only the
    throttling columns are the import's."""

    name = "http-timing"
    use = RESULTS
    description = ("http-timing's own run: its CSV (and NAME.json beside it) or the original "
                   "script's text (start: the run's clock, on the wall clock by its JSON)")

    def recognises(self, head: bytes) -> bool:
        return recognise(head, RUN) is not None

    def read(self, path: Path) -> Imported:
        run = read_run(path)
        zero, how = run_zero_epoch_ns(run.metadata)
        base = 0 if zero is None else zero
        requests = [ImportedRequest(r.start_ns + base, r.latency_ns, r.status, r.error,
                                    kept=replace(r, cgroup_throttled_ns=None, cgroup_nr_throttled=None,
                                                 cgroup_held_ns=None)) for r in run.records]
        return Imported(self.name, RELATIVE if zero is None else EPOCH, requests,
                        url=run.metadata.url, notes=[f"{path}: placed {how}"],
                        shape=run_shape(run.metadata))


FORMATS: dict[str, RunFormat | ResultsFormat] = {f.name: f for f in (
    # run files: report, plot and compare read them
    HttpTimingCsvReader(), LegacyReader(),
    # other tools' results and access logs: import reads them
    VegetaCsv(), VegetaJson(), K6Json(), K6Csv(), HeyCsv(), OhaCsv(), OhaSqlite(),
    JMeterCsv(), LocustCsv(), TraefikClf(), TraefikJson(), NginxTiming(), EnvoyDefault(),
    EnvoyJson(),
    # a run file, imported (any run format above)
    HttpTimingRun())}

F = TypeVar("F", RunFormat, ResultsFormat)


class _ForUse(Mapping[str, F], Generic[F]):
    """The formats of :data:`FORMATS` for one use, in its order (a view: always the table's)."""

    def __init__(self, use: str) -> None:
        self.use = use

    def _formats(self) -> dict[str, F]:
        return {name: cast(F, f) for name, f in FORMATS.items() if f.use == self.use}

    def __getitem__(self, name: str) -> F:
        return self._formats()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._formats())

    def __len__(self) -> int:
        return len(self._formats())


READERS: Mapping[str, RunFormat] = _ForUse[RunFormat](RUN)
IMPORTERS: Mapping[str, ResultsFormat] = _ForUse[ResultsFormat](RESULTS)


def recognise(head: bytes, use: str) -> RunFormat | ResultsFormat | None:
    """The first format for ``use`` that recognises ``head`` (a file's first bytes: for
    results, gunzipped); None when none does."""
    return next((f for f in FORMATS.values() if f.use == use and f.recognises(head)), None)


def reader_for(path: Path, head: bytes) -> RunFormat:
    """The run format of ``path``, whose first bytes are ``head``; a one-line
    ``RawDataError`` naming the file and every run format expected when none recognises it
    (another tool's results are pointed to ``http-timing import``)."""
    if (found := recognise(head, RUN)) is not None:
        return cast(RunFormat, found)
    results = gunzipped_head(head)
    if results is not None and (other := recognise(results, RESULTS)) is not None:
        raise RawDataError(f"{path}: {other.name} results, not a run file: make it one with "
                           f"http-timing import {path} --timeline NAME.cgroup.csv (the "
                           "service's timeline, from http-timing record)")
    formats = [reader.expected for reader in READERS.values()]
    expected = (", ".join(formats[:-1]) + " or " if len(formats) > 1 else "") + formats[-1]
    what = "not a run file" if _is_text(head) else "not a text file"
    raise RawDataError(f"{path}: {what} (expected {expected})")


def _is_text(head: bytes) -> bool:
    """Whether ``head`` is UTF-8 (but for a character cut short at the end of ``HEAD_BYTES``)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return len(head) == HEAD_BYTES and exc.start >= len(head) - 3
    return True


def results_format(path: Path) -> ResultsFormat:
    """The results format of the file (``ImportFileError`` naming the formats if none)."""
    head = read_bytes(path)[:HEAD_BYTES]
    if not head.strip():
        raise ImportFileError(f"{path}: empty file")
    if (found := recognise(head, RESULTS)) is not None:
        return cast(ResultsFormat, found)
    raise ImportFileError(f"{path}: line 1: not a format import knows (expected one of "
                          f"{', '.join(IMPORTERS)}; --format names one)")


def read_results(path: Path, format_name: str | None = None) -> Imported:
    """The requests of ``path``, in the results format named or recognised."""
    importer = IMPORTERS[format_name] if format_name else results_format(path)
    imported = importer.read(path)
    if not imported.requests:
        raise ImportFileError(f"{path}: no requests in it (read as {importer.name})")
    return imported


@dataclass
class Run:
    """A recorded run: its requests and the metadata saved with it (``present`` False for a
    text capture)."""

    path: Path
    records: list[RequestRecord]
    metadata: RunMetadata = field(default_factory=RunMetadata.missing)
    timeline: list[CgroupSample] | None = None   # the watched group's (``<name>.cgroup.csv``)
    threads: RunThreads | None = None   # its threads' (``<name>.threads.csv``), with a timeline

    @property
    def name(self) -> str:
        return self.metadata.name or self.path.stem


def read_run(path: str | os.PathLike[str]) -> Run:
    """Read a run from its file (the metadata from the JSON beside it; the JSON finds its CSV),
    in whichever run format recognises it."""
    p = Path(path)
    if p.suffix == ".json" and p.with_suffix(".csv").exists():
        p = p.with_suffix(".csv")
    if not p.exists():
        raise RawDataError(f"{p}: no such file")
    if p.is_dir():
        raise RawDataError(f"{p}: is a directory, not a run file")
    try:
        with p.open("rb") as file:
            head = file.read(HEAD_BYTES)
    except OSError as exc:
        raise RawDataError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if not head.strip():
        raise RawDataError(f"{p} holds no requests (an empty file)")
    records = reader_for(p, head).read(p)
    if not records:
        raise RawDataError(f"{p} holds no requests (its header alone)")
    timeline_file = timeline_path(p)
    timeline = (read_timeline(timeline_file) if timeline_file.exists() and timeline_file != p
                else None)
    return Run(p, records, _read_metadata(p.with_suffix(".json"), p), timeline,
               read_run_threads(p) if timeline else None)


def _read_metadata(meta_path: Path, run_path: Path) -> RunMetadata:
    if not meta_path.exists() or meta_path == run_path:
        return RunMetadata.missing()
    try:
        raw = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raw = None  # a broken metadata file does not lose the requests
    return RunMetadata.from_dict(raw) if isinstance(raw, dict) else RunMetadata.missing()
