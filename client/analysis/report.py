"""Typed reports of a run: what ``report`` (and ``report --json``) says, and the comparison with
the quota model that ``report --predict`` shows.

:func:`build_report` is the one place a run's statistics (``client.data.summary``), throttling
(``client.analysis.detect``) and limit come together; tables, pictures and commands read the
:class:`Report`'s fields, never the JSON keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from client.analysis.cgroup import CgroupReport, cgroup_report
from client.analysis.detect import Detection, ThrottleSource, detect_run
from client.analysis.model import MAX_CONCURRENCY, MAX_REQUESTS, Prediction, Scenario, predict
from client.analysis.quotas import QuotaSpan, split_by_quota
from client.analysis.threads import ThreadsReport, threads_report
from client.data.files import Run
from client.data.metadata import LoadMode, watched_without_limit
from client.data.pace import fell_behind_words
from client.data.summary import Summary, error_kinds, summarize
from cpuquota.limit import Limit

__all__ = ["PredictionReport", "QuotaPart", "Report", "ScenarioError", "build_prediction",
           "build_predictions", "build_report", "quota_parts", "scenario_for"]


@dataclass(frozen=True)
class Report:
    """A run's statistics and throttling, with the limit they were judged against."""

    name: str
    limit: Limit | None              # the limit used for detection (the run's, or one given)
    limit_description: str           # the limits in force, in words (from the metadata)
    summary: Summary
    detection: Detection
    cgroup: CgroupReport | None = None   # the watched group's (``--cgroup``), when there is one
    # whether the client itself kept up, as the metadata says (``client.data.pace``)
    client_fell_behind: bool | None = None
    client_pace: dict[str, Any] | None = None
    # a run that spans a change of quota: the requests sent under each, judged by it
    by_quota: tuple[QuotaPart, ...] = ()
    # who spent the quota: the watched group's CPU by thread name (None: no group watched)
    threads: ThreadsReport | None = None
    # a prediction saved as a run (``client.advise.replayed_limit``): what its JSON says
    # of the replay (None: a measured run)
    predicted: dict[str, Any] | None = None
    # what the failed requests met, counted, most first: ("answered 404", 3), ("failed:
    # ConnectError: Connection refused", 1) (``client.data.summary.error_kinds``)
    errors_by: tuple[tuple[str, int], ...] = ()

    @property
    def fell_behind_words(self) -> str | None:
        """The one line saying the client fell behind, or None."""
        return fell_behind_words(self.client_fell_behind, self.client_pace)

    def to_dict(self) -> dict[str, Any]:
        """The keys of ``http-timing report --json`` (``cgroup`` only for a watched group,
        ``client_fell_behind`` and ``client_pace`` only when the metadata has them)."""
        out = {"name": self.name, "limit": self.limit_description,
               "limit_cpus": self.limit.cpus if self.limit else None,
               **self.summary.to_dict(), **self.detection.to_dict()}
        if self.cgroup is not None:
            out["cgroup"] = self.cgroup.to_dict()
        if self.client_fell_behind is not None:
            out["client_fell_behind"] = self.client_fell_behind
        if self.client_pace is not None:
            out["client_pace"] = self.client_pace
        if self.by_quota:
            out["quotas"] = [part.to_dict() for part in self.by_quota]
        if self.predicted is not None:
            out["predicted"] = self.predicted
        if self.errors_by:
            out["errors_by"] = [{"what": what, "count": count} for what, count in self.errors_by]
        if self.threads is not None:
            out["cpu_by_thread"] = (None if self.threads.unknown is not None else
                                    [share.to_dict() for share in self.threads.shares])
            if self.threads.unknown is not None:
                out["cpu_by_thread_unknown"] = self.threads.unknown
            if self.threads.unnamed is not None:
                out["cpu_by_thread_unnamed"] = self.threads.unnamed.to_dict()
        return out


@dataclass(frozen=True)
class QuotaPart:
    """The requests sent while one quota was in force, and their report under it."""

    span: QuotaSpan
    report: Report
    straddling: int    # of them, answered after the quota changed again

    def to_dict(self) -> dict[str, Any]:
        s, d, c = self.report.summary, self.report.detection, self.report.cgroup
        group = ({} if c is None else {
            "cgroup_nr_periods": c.nr_periods, "cgroup_nr_throttled": c.nr_throttled,
            "cgroup_throttled_ms": c.throttled_ms, "usage_cpus": c.usage_cpus_mean,
            "cgroup_duration_s": c.duration_s})
        return {**self.span.to_dict(), "requests": s.count, "p50_ms": s.p50_ms,
                "p90_ms": s.p90_ms, "p99_ms": s.p99_ms, "throttled_count": d.throttled_count,
                "straddling": self.straddling, **group}


def quota_parts(run: Run) -> list[tuple[QuotaSpan, Run, int]]:
    """The run cut at each change of quota its timeline shows (:func:`split_by_quota`); []
    when the quota never changed (or the timeline does not say)."""
    parts = split_by_quota(run)
    return parts if len({(p[0].quota_us, p[0].period_us) for p in parts}) > 1 else []


def _span_limit(span: QuotaSpan, run: Run) -> Limit | None:
    found = run.metadata.limit
    return span.limit(found.burst_ms if found is not None else 0.0)


def _one_report(run: Run, limit: Limit | None) -> Report:
    detection = detect_run(run, limit)
    # one count of the requests delayed by throttling: the detection's, also in the cgroup
    # section (from the same counters)
    delayed = ([detection.is_throttled(r) for r in run.records]
               if detection.source is ThrottleSource.CGROUP else None)
    # a watched group with no quota of its own is judged by none (the service's own
    # in-process limit is not the group's)
    group_limit = None if watched_without_limit(run.metadata.cgroup) else limit
    cgroup = (cgroup_report(run.records, run.timeline, group_limit,
                            run.metadata.quota_levels(), run.metadata.cgroup, delayed)
              if run.timeline else None)
    predicted = run.metadata.extra.get("predicted")
    return Report(run.name, limit, run.metadata.limit_description(), summarize(run.records),
                  detection, cgroup, run.metadata.client_fell_behind,
                  run.metadata.client_pace,
                  predicted=dict(predicted) if isinstance(predicted, Mapping) else None,
                  errors_by=tuple(error_kinds(run.records)))


def build_report(run: Run, limit: Limit | None = None) -> Report:
    """The report of ``run``; ``limit`` overrides the one its metadata says was in force.
    A run whose timeline shows the quota changing also gets a report per quota
    (``by_quota``): its requests judged by the quota in force when each was sent."""
    limit = limit if limit is not None else run.metadata.limit
    report = replace(_one_report(run, limit), threads=threads_report(run))
    parts = tuple(QuotaPart(span, _one_report(part, _span_limit(span, run)), straddling)
                  for span, part, straddling in quota_parts(run))
    return replace(report, by_quota=parts) if parts else report


class ScenarioError(ValueError):
    """A run the model cannot simulate; one line naming the run."""


def scenario_for(run: Run, detection: Detection, limit: Limit) -> Scenario:
    """The model's workload for a measured run: its CPU per request, concurrency, the
    service's worker processes (each runs one request's work at a time: the GIL) and the time
    an unthrottled request spends outside its work (the network, the client)."""
    meta = run.metadata
    if not meta.sequential and meta.mode is LoadMode.OPEN_LOOP:
        raise ScenarioError(f"{run.path} is an open-loop run (--rate); the model simulates "
                            "closed loops only (sequential or --concurrency)")
    if detection.service_ms is None or detection.count == 0:
        raise ScenarioError(f"{run.path}: no successful request to take a service time from")
    if limit.source == "in-process" and meta.throttle_mode == "boundary":
        raise ScenarioError(
            f"{run.path} ran under the in-process throttle's boundary mode (a budget per "
            "worker thread, paid between requests); the model simulates a quota of the "
            "kernel's kind (as --throttle-mode cfs does): give --cpus X to see what such a "
            "quota would do to this workload")
    concurrency = min(meta.concurrency, MAX_CONCURRENCY)
    cores = min(meta.workers, 1024)
    overhead = 0.0
    if detection.server_cpu_ms is not None and detection.baseline_ms is not None:
        # an unthrottled request: its work, slowed by the others sharing the cores, + the rest
        shared = detection.server_cpu_ms * concurrency / min(concurrency, cores)
        overhead = max(0.0, detection.baseline_ms - shared)
    try:
        return Scenario.under(limit, detection.service_ms, concurrency=concurrency,
                              requests=min(max(1, len(run.records)), MAX_REQUESTS),
                              overhead_ms=overhead, cores=cores)
    except ValueError as exc:
        raise ScenarioError(f"cannot model {run.path}: {exc}") from None


@dataclass(frozen=True)
class PredictionReport:
    """A measured run beside the model: the prediction with the run's service time, and, when
    the run spent all its quota, the prediction with the quota each request was charged."""

    report: Report
    limit: Limit
    workload: Scenario
    prediction: Prediction
    charged_ms: float | None
    charged: Prediction | None

    def columns(self) -> list[tuple[str, dict[str, Any]]]:
        """``(label, report keys)`` per column: measured, predicted (, charged)."""
        out = [("measured", self.report.to_dict()), ("predicted", self.prediction.to_dict())]
        if self.charged is not None:
            out.append(("charged", self.charged.to_dict()))
        return out

    def series(self) -> list[tuple[str, Prediction]]:
        """The predictions to draw, labelled."""
        out = [("predicted", self.prediction)]
        if self.charged is not None and self.charged_ms is not None:
            out.append((f"predicted with {self.charged_ms:.1f} ms charged", self.charged))
        return out


def build_predictions(run: Run) -> list[tuple[QuotaSpan, Run, PredictionReport]]:
    """``report --predict`` of a run that spans a change of quota: the model run once per
    quota, on the requests sent under it ([] when the quota never changed; ``ScenarioError``
    when a part cannot be modelled)."""
    out = []
    for span, part, _straddling in quota_parts(run):
        limit = _span_limit(span, run)
        if limit is not None:
            out.append((span, part, build_prediction(part, limit)))
    return out


def build_prediction(run: Run, limit: Limit) -> PredictionReport:
    """``report --predict``: the run's report and the model's predictions under ``limit``
    (``ScenarioError`` when the run cannot be modelled)."""
    report = build_report(run, limit)
    detection = report.detection
    workload = scenario_for(run, detection, limit)
    charged = detection.charged_ms(limit.cpus)
    charged_prediction = None
    if charged is not None and charged > 1.1 * workload.service_ms:
        # The run spent all its quota, so the quota per request is known from the throughput:
        # the model with that CPU shows whether the hidden CPU explains the rest of the gap.
        shared = charged * workload.concurrency / min(workload.concurrency, workload.cores)
        baseline = detection.baseline_ms if detection.baseline_ms is not None else charged
        charged_prediction = predict(replace(workload, service_ms=charged,
                                             overhead_ms=max(0.0, baseline - shared)))
    return PredictionReport(report, limit, workload, predict(workload), charged,
                            charged_prediction)
