"""Why a measured run differs from the quota model, in sentences (pure)."""

from __future__ import annotations

import math

from client.analysis.model import Prediction
from client.analysis.report import Report
from cpuquota.limit import Limit

__all__ = ["explain"]


def explain(report: Report, prediction: Prediction, limit: Limit) -> list[str]:
    """Sentences on how the measured run compares with the model, and why it is worse.

    ``prediction``: the model run with the same limit and the run's service time.
    """
    detection = report.detection
    predicted = prediction.to_dict()
    m_mean, p_mean = report.summary.mean_ms, predicted["mean_ms"]
    m_thr, p_thr = detection.throttled_fraction, predicted["throttled_fraction"]
    m_rps, p_rps = detection.throughput_rps, predicted["throughput_rps"]
    if not all(isinstance(v, (int, float)) and math.isfinite(v)
               for v in (m_mean, m_thr, m_rps)):
        return ["not enough successful requests to compare with the model"]
    assert isinstance(m_mean, (int, float)) and isinstance(m_thr, (int, float))
    assert isinstance(m_rps, (int, float))
    lines: list[str] = []
    worse = (m_mean > 1.2 * p_mean + 1 or m_rps < 0.85 * p_rps or m_thr > p_thr + 0.05)
    better = (m_mean < 0.8 * p_mean - 1 and m_rps > 1.15 * p_rps) or m_thr < p_thr - 0.1
    marked = "slow" if detection.marked_as == "slow" else "delayed by throttling"
    summary = (f"mean {m_mean:.1f} ms measured vs {p_mean:.1f} ms predicted, {100 * m_thr:.0f} % "
               f"of requests {marked} vs {100 * p_thr:.0f} %, {m_rps:.1f} vs {p_rps:.1f} "
               "requests/s")
    service = prediction.workload.service_ms
    if worse:
        lines.append(f"The run did worse than the model: {summary}.")
        idle = detection.idle_fraction
        if idle is not None and idle > 0.1:
            lines.append(f"The requests were not sent back to back ({100 * idle:.0f} % of the run "
                         "had none in flight: an excerpt, or a slow client), so the quota each "
                         "request was charged cannot be read from the throughput.")
        elif (charged := detection.charged_ms(limit.cpus)) is not None:
            # Quota-bound: every period's quota is spent, so quota per request = rate / rps.
            if charged > 1.1 * service:
                extra = charged - service
                lines.append(
                    f"At {limit.cpus:g} CPU the group may run {limit.cpus * 1000:g} ms of CPU "
                    f"per second; it completed {m_rps:.1f} requests per second, so each request "
                    f"was charged about {charged:.1f} ms of quota, while its work needs "
                    f"{service:.2f} ms ({detection.service_source}). About {extra:.1f} ms per "
                    f"request ({100 * extra / charged:.0f} % of the quota) went to something "
                    "else in the group: the runtime's own threads (garbage collection, JIT, "
                    "timers, logging), HTTP handling outside the work, or other processes in "
                    "the container.")
        if detection.server_cpu_ms is not None:
            wall = (f", wall {detection.server_wall_ms:.2f} ms"
                    if detection.server_wall_ms is not None else "")
            lines.append(f"The server measured {detection.server_cpu_ms:.2f} ms of CPU per "
                         f"request inside the handler{wall}; quota spent outside the handler "
                         "is invisible to it but not to the kernel.")
        else:
            lines.append("This capture has no server-side CPU per request (Server-Timing "
                         "cpu); the service time is taken from the unthrottled "
                         "latencies, which include the network and the client.")
        m_stall, p_stall = detection.stall_ms, predicted["stall_ms"]
        if isinstance(m_stall, (int, float)) and p_stall and m_stall > 1.3 * p_stall:
            lines.append(f"Stalls are longer than the model's ({m_stall:.0f} vs {p_stall:.0f} "
                         "ms): a request waited more than one period, as when CPU spent "
                         "elsewhere uses up the next period's quota before the request runs.")
        if (detection.inferred_period
                and abs(detection.period_ms - limit.period_ms) > 0.1 * limit.period_ms):
            lines.append(f"Stalls recur every {detection.period_ms:g} ms, not every "
                         f"{limit.period_ms:g} ms: the limit in force may not be the one given.")
    elif better:
        lines.append(f"The run did better than the model: {summary}. Burst credit, a limit "
                     "that was not in force, or less CPU per request than assumed.")
    else:
        lines.append(f"The run agrees with the model: {summary}.")
    return lines
