"""``cluster --prometheus``: a row's figures from the node agent's counters as Prometheus kept
them. On the host, a real Prometheus (Debian's, on loopback) scrapes the real agent watching
a v1 group the test throttles: the row's periods, periods throttled, throttled time and wait
histogram are what the group's cpu.stat counted between the scrapes. The folding alone runs
on Prometheus's answers recorded the same way (tests/data/prometheus/, its make.py). Bad
input: one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from client.analysis.goal import LatencyGoal
from client.advise.cluster import row_of
from client.analysis.cluster import WorkloadLimits, pod_window
from client.analysis.cluster_prometheus import (FROM_AGENTS, LEFT_OUT, NOT_IN_PROMETHEUS,
                                                bucket_quantile, by_pod, combined, covers,
                                                departed_pods, increase, prometheus_row, rates)
from client.render.cluster import format_cluster, format_cluster_csv
from client.run.replay_input import read_recording
from client.run.prometheus import (AGENT_METRICS, Prometheus, PrometheusError, agent_series,
                                   open_prometheus)
from cpuquota.limit import NO_QUOTA
from tests.prometheus_support import Scraped, scraped_agent
from tests.support import exit_code_and_errors, free_port

DATA = Path(__file__).parent / "data" / "prometheus"
CLUSTER_DATA = Path(__file__).parent / "data" / "cluster"   # the agent's timelines
BUSY = WorkloadLimits("static/deployment/busy", 0.2, 0.2)


def recorded_prometheus() -> Prometheus:
    """A Prometheus that answers each query with the answer recorded for it."""
    answers = json.loads((DATA / "answers.json").read_text())

    def get(path: str, params: Mapping[str, str]) -> tuple[int, bytes]:
        return 200, json.dumps(answers[params["query"]]).encode()
    return Prometheus("recorded", get)


# ---- the folding, on recorded answers ----------------------------------------------------------

def test_a_recorded_answer_folds_into_what_cpu_stat_counted_between_the_scrapes() -> None:
    counted = json.loads((DATA / "counted.json").read_text())
    found = by_pod(agent_series(recorded_prometheus(), 'level="group"', counted["since_s"],
                                counted["at"]))
    row = prometheus_row(BUSY, "", ["busy"], found)
    before, after = counted["before"], counted["after"]
    assert row.periods == after["nr_periods"] - before["nr_periods"]
    assert row.periods_throttled == after["nr_throttled"] - before["nr_throttled"]
    assert row.throttled_ms == pytest.approx(
        (after["throttled_time"] - before["throttled_time"]) / 1e6, abs=1e-6)
    assert row.wait_p99_ms is not None and 0 < row.wait_p99_ms
    assert row.pods == 1 and row.window_s > 0


def test_a_counter_reset_counts_what_followed_it() -> None:
    assert increase([(0, 5), (1, 7), (2, 2), (3, 4)]) == 2 + 2 + 2   # reset at t=2: 0 -> 2
    assert rates([(0, 0), (2, 1), (3, 0.5)]) == [0.5, 0.5]


def test_a_histograms_quantile_is_interpolated_in_its_bucket_as_prometheus_does() -> None:
    buckets = {0.01: 0.0, 0.1: 100.0, float("inf"): 100.0}
    assert bucket_quantile(0.5, buckets) == pytest.approx(0.055)
    assert bucket_quantile(0.99, {0.1: 0.0, float("inf"): 10.0}) == 0.1   # highest bound
    assert bucket_quantile(0.99, {0.1: 0.0, float("inf"): 0.0}) is None   # nothing observed


def test_what_needs_each_period_is_left_out_with_the_reason() -> None:
    counted = json.loads((DATA / "counted.json").read_text())
    found = by_pod(agent_series(recorded_prometheus(), 'level="group"', counted["since_s"],
                                counted["at"]))
    row = prometheus_row(BUSY, "", ["busy", "gone"], found)
    assert row.delay_p99_now_ms is None and row.recommended_cpus is None
    assert row.predicted_delay_p99_ms is None and LEFT_OUT in row.notes
    assert row.missing == (f"/gone: {NOT_IN_PROMETHEUS} (no series of the node agent's "
                           "counters in the window)",)
    sources = row.to_dict()["sources"]
    assert "Prometheus" in sources["periods"] and "Prometheus" in sources["usage_p95_cpus"]
    assert sources["recommended_cpus"] == LEFT_OUT
    text = format_cluster([row], "cluster")
    assert "they need per-period data" in text
    assert "no limit" not in text   # a limited workload: its delay is not known, not absent
    nothing = prometheus_row(WorkloadLimits("static/deployment/none", 0.5, None), "",
                             ["none-1"], found)
    assert nothing.notes[0].startswith(NOT_IN_PROMETHEUS) and nothing.periods is None
    assert len(format_cluster_csv([row, nothing]).splitlines()) == 3   # the others still print


def test_the_agents_windows_give_what_needs_each_period_when_they_cover_it() -> None:
    counted = json.loads((DATA / "counted.json").read_text())
    found = by_pod(agent_series(recorded_prometheus(), 'level="group"', counted["since_s"],
                                counted["at"]))
    first = min(t for s in found[("", "busy")]["periods"] for t, _ in s.samples)
    recording = read_recording(CLUSTER_DATA / "shop_web-a.cgroup.csv")
    window = dataclasses.replace(
        pod_window("busy", recording.samples, recording.period_ns, recording.limits, 0),
        start_epoch_ns=int(first * 1e9))
    assert covers([window], "", ["busy", "gone"], found) is None
    late = dataclasses.replace(window, start_epoch_ns=int((first + 30) * 1e9))
    assert covers([late], "", ["busy"], found) == (
        "the agents' window of /busy starts 30 s after Prometheus's first sample of it")
    assert covers([], "", ["busy"], found) == "the agents have no window of /busy"
    agents = row_of(BUSY, [window], LatencyGoal(10.0))
    row = combined(prometheus_row(BUSY, "", ["busy"], found), agents)
    assert row.periods_throttled == counted["after"]["nr_throttled"]   # Prometheus's
    assert (row.recommended_cpus, row.delay_p99_now_ms) == (agents.recommended_cpus,
                                                            agents.delay_p99_now_ms)
    sources = row.to_dict()["sources"]
    assert sources["recommended_cpus"] == sources["added_delay"] == FROM_AGENTS
    assert "Prometheus" in sources["periods"] and LEFT_OUT not in row.notes


def test_pods_that_left_are_counted_by_the_names_their_controller_gave_them() -> None:
    found = {("shop", name): {} for name in (
        "web-5d8f9c7b6-x2k4q",          # a Deployment's pod that left
        "web-api-7b9d5c4f8-q2w4r",      # web-api's, not web's
        "agent-x7z2k",                  # a DaemonSet's
        "db-0", "db-1",                 # a StatefulSet's: db-0 is listed now
        "web-6c9d8f7b5-lm2n4")}         # listed now
    found[("other", "web-5d8f9c7b6-aaaaa")] = {}   # another namespace
    workloads = [("shop", "Deployment", "web"), ("shop", "Deployment", "web-api"),
                 ("shop", "DaemonSet", "agent"), ("shop", "StatefulSet", "db")]
    web, web_api, agent, db = departed_pods(workloads, [("shop", "db-0"),
                                                        ("shop", "web-6c9d8f7b5-lm2n4")], found)
    assert web == ["web-5d8f9c7b6-x2k4q"] and web_api == ["web-api-7b9d5c4f8-q2w4r"]
    assert agent == ["agent-x7z2k"] and db == ["db-1"]


# ---- a real Prometheus scraping the real agent -------------------------------------------------

@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    with scraped_agent(tmp_path_factory.mktemp("scraped")) as got:
        yield got


@pytest.mark.root
def test_the_rows_counters_are_what_cpu_stat_counted_between_the_scrapes(
        scraped: Scraped) -> None:
    now = time.time()
    found = by_pod(agent_series(open_prometheus(scraped.base), 'level="group"',
                                now - scraped.start + 5, now))
    row = prometheus_row(BUSY, "", ["busy"], found)
    before, after = scraped.before, scraped.after
    assert row.periods == after["nr_periods"] - before["nr_periods"]
    assert row.periods_throttled == after["nr_throttled"] - before["nr_throttled"]
    assert row.throttled_ms == pytest.approx(
        (after["throttled_time"] - before["throttled_time"]) / 1e6, abs=1e-6)
    # the agent watched the group from before its first throttle: one wait per period
    assert f"histogram: {row.periods_throttled} periods" in " ".join(row.notes)
    usage = found[("", "busy")]["usage_seconds"][0].samples
    used = sum(r * (b[0] - a[0]) for r, a, b in zip(rates(usage), usage, usage[1:]))
    assert used == pytest.approx((scraped.usage_ns[1] - scraped.usage_ns[0]) / 1e9, abs=1e-6)
    assert row.usage_p95_cpus is not None and row.vpa_cpus is not None
    idle = prometheus_row(WorkloadLimits("static/deployment/idle", 0.2, None), "", ["idle"],
                          found)
    assert (idle.periods, idle.periods_throttled, idle.wait_p99_ms) == (0, 0, None)
    # a group with no quota (exclusive CPUs: limits.cpu 2, no quota): the agent exports that,
    # no counter of throttling, and the row claims none and is listed apart
    assert "periods" not in found[("", "free")] and found[("", "free")]["no_quota"]
    free = prometheus_row(WorkloadLimits("static/deployment/free", 2.0, 2.0), "", ["free"],
                          found)
    assert (free.periods, free.periods_throttled, free.throttled_ms) == (None, None, None)
    assert free.no_quota is not None and free.no_quota.startswith(NO_QUOTA)
    assert "exclusive CPUs" in free.no_quota and free.window_s > 0


@pytest.mark.root
def test_a_query_prometheus_refuses_is_its_own_error_text(scraped: Scraped) -> None:
    with pytest.raises(PrometheusError) as refused:
        open_prometheus(scraped.base).samples("throttle_lab_cpu{", 60, time.time())
    message = str(refused.value)
    assert message.startswith(f"Prometheus at {scraped.base} refused the query "
                              "throttle_lab_cpu{[60s]: ")
    assert "parse error" in message and "\n" not in message


@pytest.mark.root
def test_every_metric_cluster_reads_is_one_the_agent_exports(scraped: Scraped) -> None:
    import httpx

    text = httpx.get(scraped.agent + "/metrics", timeout=10).text
    for name in AGENT_METRICS.values():
        assert f"\n{name}{{" in text, name


# ---- bad input ---------------------------------------------------------------------------------

def test_an_unreachable_prometheus_is_one_line_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"   # nothing listens
    code, err = exit_code_and_errors(["cluster", "-A", "--prometheus", url], tmp_path,
                                     monkeypatch, capsys)
    assert code == 2 and err.startswith(f"http-timing: Prometheus at {url} unreachable: "), err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "raw-data").exists()


@pytest.mark.parametrize("argv, expected", [
    (["--prometheus", "prom:9090"], "--prometheus prom:9090: expected a URL"),
    (["--prometheus", "k8s:monitoring"], "expected a URL (http://HOST:9090) or k8s:"),
    (["--prometheus", "http://127.0.0.1:9", "--picture", "pictures"],
     "--picture draws each period, which Prometheus does not keep"),
    (["--prometheus", "k8s:monitoring/prometheus:9090"], "no kubeconfig"),
])
def test_bad_prometheus_input_is_one_line_and_exit_2(
        argv: list[str], expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, err = exit_code_and_errors(["cluster", *argv], tmp_path, monkeypatch, capsys)
    assert code == 2 and expected in err, err
    assert len(err.splitlines()) == 1, err
    assert not (tmp_path / "pictures").exists()
