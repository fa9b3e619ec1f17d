"""``advise --passive --hpa-target``: the HPA's replicas per minute, the p99 they give, the
highest target that keeps the goal (:func:`format_hpa`, from
``client.advise.hpa.HpaAnswer.to_dict``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["format_hpa"]


def _ms(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.1f}"


def format_hpa(answer: Mapping[str, Any]) -> str:
    hpa, predicted, target = answer["hpa"], answer["predicted"], answer["target"]
    goal = ", ".join(f"{k} <= {v:g} ms" for k, v in (("p99", target["p99_ms"]),
                                                    ("p90", target.get("p90_ms"))) if v)
    lines = [f"advise --passive, the HPA ({hpa['source']}): target "
             f"{hpa['target_cpu_utilization_pct']} % of the CPU request, min {hpa['min']}, max "
             f"{hpa['max']}; each replica limit {hpa['limit_cpus']:g} CPU, request "
             f"{hpa['request_cpus']:g} CPU, ready {hpa['ready_after_s']:g} s after it is made",
             f"replay of {answer['timeline']}: a window of {answer['window']['seconds']:.0f} s; "
             f"goal {goal}", f"judged by {answer['judged_by']}"]
    if answer.get("pooled"):
        lines.append(answer["pooled"]["says"])
    lines.append("")
    header = ["minute", "replicas", "most", "ready at its end"]
    rows = [[str(m["minute"]), str(m["replicas"]), str(m["most"]), str(m["ready_at_end"])]
            for m in answer["per_minute"]]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    p99 = predicted.get("p99_ms", predicted.get("added_delay_p99_ms"))
    what = "p99" if "p99_ms" in predicted else "added delay p99"
    lines += ["", f"predicted {what} {_ms(p99)} ms, {predicted['periods_throttled']} of "
              f"{predicted['periods']} periods throttled: "
              + ("meets the goal" if predicted["met"] else
                 f"misses it ({', '.join(predicted['missed'])})"),
              f"highest target: {answer['highest_target_says']}",
              "(predicted by the replay, not measured)"]
    return "\n".join(lines)
