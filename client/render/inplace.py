"""The words of ``advise --cgroup`` on a running service: what the group's counters said in
each run, the runs that verify the answer, and what 25 % less did (pure)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from client.analysis.advise import MAIN_ROLES, Advice
from client.analysis.goal import Measured
from client.analysis.cgroup import CgroupReport
from client.render.advise import figures, limit_words, verdict

__all__ = ["format_evidence", "format_less", "format_verification"]


def format_evidence(report: CgroupReport | None) -> str:
    """``cgroup: 12 of 60 requests delayed by throttling; 31 of 40 periods throttled, 212 ms
    (quota 0.5 CPU)``: what the kernel counted in the run (the quota level in force)."""
    if report is None:
        return "cgroup: no timeline (the group was not sampled)"
    quota = "no quota" if report.quota_cpus is None else f"quota {report.quota_cpus:g} CPU"
    return (f"cgroup: {report.throttled_requests} of {report.requests} requests delayed by "
            "throttling; "
            f"{report.nr_throttled} of {report.nr_periods} periods throttled, "
            f"{report.throttled_ms:.0f} ms ({quota}, {report.usage_cpus_mean:.2f} CPU used)")


def _ms(value: float) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:.1f}"


def _row(run: Measured, report: CgroupReport | None) -> str:
    met = "–" if run.met is None else "yes" if run.met else "no"
    if report is None:
        counted = "– | – | –"
    else:
        counted = (f"{report.throttled_requests} of {report.requests} | {report.nr_throttled} "
                   f"of {report.nr_periods} | {report.throttled_ms:.0f}")
    return (f"| {run.name} | {run.role} | {limit_words(run.limit)} | {_ms(run.p50_ms)} | "
            f"{_ms(run.p90_ms)} | {_ms(run.p99_ms)} | {counted} | {met} |")


HEADER = ["| run | role | limit | p50 ms | p90 ms | p99 ms | requests delayed by throttling | "
          "periods throttled | throttled time ms | met |", "|---|---|---|---|---|---|---|---|---|---|"]


def format_verification(advice: Advice, runs: Sequence[Measured],
                        evidence: Mapping[str, CgroupReport | None]) -> str:
    """The runs at the answer (its verification), then every run with the group's counts."""
    lines: list[str] = []
    rec = advice.recommended
    if rec is not None:
        at = [r for r in runs if r.role in MAIN_ROLES and r.millicores == rec.millicores]
        lines += [f"Verification: the runs at {limit_words(rec)} (the throttling is what the "
                  "kernel counted in the group's cpu.stat):", "", *HEADER]
        lines += [_row(run, evidence.get(run.name)) for run in at]
        lines.append("")
    lines += ["Every run, with what the group's counters said:", "", *HEADER]
    lines += [_row(run, evidence.get(run.name)) for run in runs]
    return "\n".join(lines) + "\n"


def format_less(advice: Advice, less: Measured | None, factor: float) -> str:
    rec = advice.recommended
    if rec is None:
        return ""
    if less is None or less.limit is None:
        return (f"25 % less: {rec.cpus * factor:g} CPU is below the smallest limit the kernel "
                "takes, not run.")
    tail = ("so the answer is not loose" if not less.met else
            "so a tighter limit met it too this time (a busy machine's runs vary; the search's "
            "bracket above is the answer)")
    return (f"25 % less, {limit_words(less.limit)}: {figures(less)}: {verdict(less)}; {tail}.")
