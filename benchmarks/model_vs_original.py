"""The quota model (``http-timing predict``) against the original's recorded runs.

    .venv/bin/python -m benchmarks.model_vs_original [--network-ms 0.8] [--seeds 20]

(a) **Prediction vs observation.** The original (ace-container-cpu, ``docker run --cpus X``,
    ~5 ms requests, sequential) recorded the rows marked *observed* (from
    /work/shared/notes/anchors.md). Each is followed by the model: the 1 CPU latency as the
    CPU per request (naive), and the same with ``--network-ms`` of it spent outside the quota
    (client and network: the kernel charges only what runs in the container). At 0.1 CPU a
    third model row takes the quota the original's throughput says each request was charged
    (0.1 CPU × 1000 ms / requests per second): the runtime's own CPU is what closes the gap.
(b) **Detection against known truth.** Synthetic sequential captures under a quota (the
    accounting core on a fake clock, with jitter, network time and, at 0.1 CPU, the runtime's
    garbage-collector bursts spending quota), printed as the original's text lines would be
    (whole ms), then read back: how many throttled requests the detector finds vs the truth,
    and the period it infers. Over ``--seeds`` captures per case.

Pure computation (no server, no clock): the numbers are the same on every machine.
"""

from __future__ import annotations

import argparse
import random

from benchmarks.support import keep_record, run_main
from client.analysis.detect import detect
from client.analysis.model import Scenario, predict
from client.data.formats.legacy import format_line, parse_legacy_text
from client.data.record import RequestRecord
from cpuquota.account import QuotaAccount

MS = 1_000_000
# anchors.md: the original's runs (n, p50, p90, p99, mean, requests > 20 ms)
OBSERVED = {1.0: (290, 5.1, 5.5, 8.3, 5.2, 0), 0.3: (100, 5.3, 66.9, 71.3, 14.6, 14),
            0.1: (100, 98.0, 197.0, 300.0, 95.5, 78)}


def prediction_row(label: str, w: Scenario) -> list[str]:
    d = predict(w).to_dict()
    slow = sum(1 for r in predict(w).records if r.latency_ns > 20 * MS)
    return [label, str(d["count"]), f"{d['p50_ms']:.1f}", f"{d['p90_ms']:.1f}",
            f"{d['p99_ms']:.1f}", f"{d['mean_ms']:.1f}", f"{slow}",
            f"{100 * d['throttled_fraction']:.0f} %"]


def table_a(network_ms: float) -> list[list[str]]:
    rows = []
    fast = OBSERVED[1.0][1]
    for cpus, (n, p50, p90, p99, mean, slow) in OBSERVED.items():
        rows.append([f"{cpus:g} CPU observed", str(n), f"{p50:g}", f"{p90:g}", f"{p99:g}",
                     f"{mean:g}", str(slow), "-"])
        rows.append(prediction_row(f"  model {fast:g} ms CPU",
                                   Scenario(service_ms=fast, cpus=cpus, requests=n)))
        rows.append(prediction_row(
            f"  model {fast - network_ms:g} + {network_ms:g} ms net",
            Scenario(service_ms=fast - network_ms, cpus=cpus, overhead_ms=network_ms,
                     requests=n)))
        if cpus == 0.1:
            charged = cpus * 1000 / (1000 / mean)  # quota per request from the throughput
            rows.append(prediction_row(
                f"  model {charged:.1f} ms charged",
                Scenario(service_ms=charged, cpus=cpus, requests=n)))
    return rows


def capture(cpus: float, service_ms: float, seed: int, *, gc_ms: float = 0.0,
            gc_chance: float = 0.0, n: int = 100) -> tuple[list[RequestRecord], int]:
    rng = random.Random(seed)
    account = QuotaAccount(round(cpus * 100 * MS), 100 * MS)
    t, lines, truth = 0, [], 0
    for i in range(n):
        if gc_chance and rng.random() < gc_chance:
            account.charge(round(gc_ms * MS * rng.uniform(0.5, 1.5)), t)
        r = account.run(round(service_ms * MS * rng.uniform(0.95, 1.08)),
                        t + round(0.4 * MS * rng.uniform(0.7, 1.3)))
        end = r.end_ns + round(0.4 * MS * rng.uniform(0.7, 1.3))
        lines.append(format_line(RequestRecord(i, t, end - t, 200)))
        truth += r.paused_ns > 0
        t = end + rng.randint(50_000, 300_000)
    return parse_legacy_text(lines), truth


def table_b(seeds: int) -> list[list[str]]:
    rows = []
    cases = {"1 CPU": (1.0, 5.0, {}), "0.3 CPU": (0.3, 4.3, {}),
             "0.1 CPU + GC": (0.1, 4.5, {"gc_ms": 10.0, "gc_chance": 0.5})}
    for label, (cpus, service, extra) in cases.items():
        exact = wrong = 0
        periods = []
        for seed in range(seeds):
            records, truth = capture(cpus, service, seed, **extra)  # type: ignore[arg-type]
            d = detect(records)
            exact += d.throttled_count == truth
            wrong += abs(d.throttled_count - truth)
            if d.period_source == "inferred from stalls":
                periods.append(d.period_ms)
        period = (f"{min(periods):.1f}-{max(periods):.1f} ms ({len(periods)}/{seeds})"
                  if periods else "default 100 ms")
        rows.append([label, str(seeds), f"{exact}/{seeds}", f"{wrong / seeds:.2f}", period])
    return rows


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(row, widths))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--network-ms", type=float, default=0.8)
    parser.add_argument("--seeds", type=int, default=20)
    opts = parser.parse_args(argv)
    print("(a) the original's runs vs the model (latencies in ms)")
    a = table_a(opts.network_ms)
    print_table(["run", "n", "p50", "p90", "p99", "mean", ">20ms", "throttled"], a)
    print()
    print("(b) detection on synthetic text captures with known truth")
    b = table_b(opts.seeds)
    print_table(["case", "captures", "count exact", "mean |error|", "period inferred"], b)
    keep_record("model_vs_original", {"network_ms": opts.network_ms, "seeds": opts.seeds,
                                      "a": a, "b": b})
    return 0


if __name__ == "__main__":
    run_main(main)
