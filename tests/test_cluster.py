"""``http-timing cluster`` and ``advise --passive --k8s``, the parts that need no cluster: the
workloads folded from the API's JSON by the owner chain, a row's figures from the node agent's
timelines (tests/data/cluster/, written by its make.py in the agent's format), the order of
the rows, and bad input (one line, exit 2). The end-to-end run on the project's node is
tests/test_cluster_kube.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from client.analysis.goal import LatencyGoal
from client.advise.cluster import row_of
from client.analysis.cluster import PodWindow, WorkloadLimits, per_period, pod_window, sort_rows
from client.commands import main as http_timing
from client.advise.cluster_rows import agents_keep
from client.commands.kubectl_plugin import main as kubectl_throttle
from client.commands.options import duration, instant
from client.data.timeline import read_timeline
from client.render.cluster import (CSV_COLUMNS, format_cluster, format_cluster_csv,
                                   save_cluster_picture)
from client.run.k8s_workloads import (WorkloadError, fold_pods,
                                      parse_workload_ref)
from client.run.kube_api import context_namespace, current_namespace
from client.run.replay_input import read_recording
from cpuquota.limit import NO_QUOTA
from tests.support import exit_code_and_errors, free_port

DATA = Path(__file__).parent / "data" / "cluster"
TARGET = LatencyGoal(10.0, None, None)   # the added delay's p99 at most 10 ms


def window(name: str) -> PodWindow:
    recording = read_recording(DATA / f"{name}.cgroup.csv")
    return pod_window(name.split("_", 1)[1], recording.samples, recording.period_ns,
                      recording.limits, recording.zero_epoch_ns)


def counted(name: str) -> tuple[int, int, int]:
    """The kernel's counters over the timeline: periods, periods throttled, throttled ns."""
    first, *_, last = read_timeline(DATA / f"{name}.cgroup.csv")
    return (last.nr_periods - first.nr_periods, last.nr_throttled - first.nr_throttled,
            last.throttled_ns - first.throttled_ns)


# ---- the workloads, by the owner chain --------------------------------------------------------

def obj(kind: str, name: str, namespace: str = "shop", *, owner: tuple[str, str] | None = None,
        cpu: list[str | None] | None = None, labels: dict[str, str] | None = None,
        **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1]}]
    containers = [{"name": f"c{i}", "resources": {} if c is None else
                   {"limits": {"cpu": c}, "requests": {"cpu": c}}}
                  for i, c in enumerate(cpu or [])]
    spec: dict[str, Any] = {"template": {"spec": {"containers": containers}}, "replicas": 2}
    if kind == "Pod":
        spec = {"nodeName": "node-1"}
    return {"metadata": meta, "spec": spec, "status": status}


RECORDED = {"throttle-lab/record": "true"}


def test_pods_fold_into_their_workload_by_the_owner_chain() -> None:
    workloads = [obj("Deployment", "web", cpu=["300m", "0.2"]),
                 obj("StatefulSet", "cache", cpu=["1"]),
                 obj("DaemonSet", "agent", cpu=["100m", None], desiredNumberScheduled=3)]
    replicasets = [obj("ReplicaSet", "web-5d8f", owner=("Deployment", "web")),
                   obj("ReplicaSet", "web-77aa", owner=("Deployment", "web"))]
    pods = [obj("Pod", "web-5d8f-x", owner=("ReplicaSet", "web-5d8f"), labels=RECORDED,
                phase="Running"),
            obj("Pod", "web-77aa-y", owner=("ReplicaSet", "web-77aa"), phase="Running"),
            obj("Pod", "web-5d8f-z", "other", owner=("ReplicaSet", "web-5d8f"), phase="Running"),
            obj("Pod", "cache-0", owner=("StatefulSet", "cache"), phase="Pending"),
            obj("Pod", "agent-q", owner=("DaemonSet", "agent"), phase="Running"),
            obj("Pod", "job-1", owner=("Job", "job"), phase="Running")]
    web, cache, agent = fold_pods(workloads, ["Deployment", "StatefulSet", "DaemonSet"],
                                  replicasets, pods)
    assert [p.name for p in web.pods] == ["web-5d8f-x", "web-77aa-y"]   # both ReplicaSets
    assert [p.recorded for p in web.pods] == [True, False]  # only the labelled one is recorded
    assert web.limit_cpus == pytest.approx(0.5) and web.replicas == 2   # summed over containers
    assert [p.name for p in cache.pods] == ["cache-0"] and not cache.pods[0].running
    assert agent.limit_cpus is None and agent.request_cpus is None   # a container without one
    assert agent.replicas == 3 and [p.name for p in agent.pods] == ["agent-q"]
    assert str(web.ref) == "shop/deployment/web"


@pytest.mark.parametrize("since, until, kept", [(3600, None, True), (3601, None, False),
                                               (600, 7000, True), (600, 6999, False)])
def test_the_agents_are_asked_for_a_window_that_begins_within_their_hour(
        since: float, until: float | None, kept: bool) -> None:
    """Now 10,000: a window is the agents' when it begins at 6,400 or later."""
    assert agents_keep(since, until, now=10_000) is kept


@pytest.mark.parametrize("text, kind", [("shop/deploy/web", "Deployment"),
                                        ("shop/StatefulSet/db", "StatefulSet"),
                                        ("shop/ds/agent", "DaemonSet")])
def test_a_workload_is_named_namespace_kind_name(text: str, kind: str) -> None:
    assert parse_workload_ref(text).kind == kind


@pytest.mark.parametrize("text", ["shop/web", "shop/job/x", "shop//web", "a/b/c/d"])
def test_other_names_are_refused_saying_the_form(text: str) -> None:
    with pytest.raises(WorkloadError, match="expected NAMESPACE/KIND/NAME"):
        parse_workload_ref(text)


def test_a_pod_level_limit_is_the_workloads_limit_where_it_binds() -> None:
    """KEP-2837: spec.template.spec.resources.limits.cpu, with or without container limits:
    the lower of the two levels is the one that binds (the pod's group's quota)."""
    only_pod = obj("Deployment", "web", cpu=[None, None])
    only_pod["spec"]["template"]["spec"]["resources"] = {"limits": {"cpu": "600m"},
                                                         "requests": {"cpu": "200m"}}
    both = obj("Deployment", "api", cpu=["500m", "500m"])
    both["spec"]["template"]["spec"]["resources"] = {"limits": {"cpu": "800m"}}
    above = obj("Deployment", "db", cpu=["200m"])
    above["spec"]["template"]["spec"]["resources"] = {"limits": {"cpu": "2"}}
    web, api, db = fold_pods([only_pod, both, above], ["Deployment"] * 3, [], [])
    assert (web.limit_cpus, web.request_cpus, web.limit_level) == (0.6, 0.2, "pod")
    assert (api.limit_cpus, api.limit_level) == (0.8, "pod")       # under the sum, 1 CPU
    assert (db.limit_cpus, db.limit_level) == (0.2, "containers")  # the container's binds
    none = fold_pods([obj("Deployment", "free", cpu=[None])], ["Deployment"], [], [])[0]
    assert (none.limit_cpus, none.limit_level) == (None, None)


# ---- a row from the timelines -----------------------------------------------------------------

def test_a_throttled_workload_counts_what_the_kernel_counted_in_its_pods() -> None:
    pods = [window("shop_web-a"), window("shop_web-c")]
    row = row_of(WorkloadLimits("shop/deployment/web", 0.5, 0.5), pods, TARGET)
    a, c = counted("shop_web-a"), counted("shop_web-c")
    assert (row.periods, row.periods_throttled) == (a[0] + c[0], a[1] + c[1])
    assert row.throttled_ms == (a[2] + c[2]) / 1e6
    assert row.pods == 2 and row.window_s == 20.0
    assert row.delay_p99_now_ms is not None and row.delay_p99_now_ms > TARGET.p99_ms
    assert row.recommended_cpus is not None and row.recommended_cpus > 0.5   # it needs more
    assert row.predicted_delay_p99_ms is not None
    assert row.predicted_delay_p99_ms <= TARGET.p99_ms   # the replay at the answer meets it
    assert any(note.startswith("estimated: ") for note in row.notes)   # throttled: estimated


def test_a_workload_throttled_throughout_gets_no_recommendation_and_why() -> None:
    """As `advise --passive --k8s` answers it (exit 3): every pod sat throttled in nearly
    every period, so no stretch shows the CPU the quota hid."""
    pods = [window("shop_web-a"), window("shop_web-b")]
    a, b = counted("shop_web-a"), counted("shop_web-b")
    assert a[1] >= a[0] - 1 and b[1] >= b[0] - 1, (a, b)   # throttled throughout
    row = row_of(WorkloadLimits("shop/deployment/web", 0.5, 0.5), pods, TARGET)
    assert (row.periods, row.periods_throttled) == (a[0] + b[0], a[1] + b[1])
    assert row.recommended_cpus is None and row.recommended_range is None
    assert any("no unthrottled stretch" in note for note in row.notes), row.notes


def test_a_workload_with_no_limit_makes_no_throttling_claim() -> None:
    row = row_of(WorkloadLimits("shop/statefulset/cache", None, None), [window("shop_cache-0")],
                 TARGET)
    assert row.periods is None and row.periods_throttled is None
    assert row.throttled_ms is None and row.delay_p99_now_ms is None
    assert any(note.startswith(NO_QUOTA + " (no limit") for note in row.notes)
    assert row.no_quota is not None and row.no_quota.startswith(NO_QUOTA)
    assert row.recommended_cpus is not None   # the limit its window would have met
    assert NO_QUOTA in format_cluster([row], "cluster")


def test_exclusive_cpus_a_limit_with_no_quota_are_listed_apart_with_no_claim() -> None:
    """The template says 2 CPUs, the agent recorded no quota on the pod's group (the static
    CPU manager's exclusive CPUs): no throttling figure, no recommended limit, and the row is
    listed apart from the throttled ones, in the text, the CSV and the JSON."""
    exclusive = row_of(WorkloadLimits("shop/statefulset/cache", 2.0, 2.0),
                       [window("shop_cache-0")], TARGET)
    assert (exclusive.periods, exclusive.periods_throttled, exclusive.throttled_ms,
            exclusive.delay_p99_now_ms) == (None, None, None, None)
    assert exclusive.recommended_cpus is None and exclusive.predicted_delay_p99_ms is None
    assert exclusive.no_quota is not None and "exclusive CPUs" in exclusive.no_quota
    assert not any(n.startswith("no recommendation") for n in exclusive.notes)
    web = row_of(WorkloadLimits("shop/deployment/web", 0.5, 0.5),
                 [window("shop_web-a"), window("shop_web-b")], TARGET)
    assert web.no_quota is None
    text = format_cluster(sort_rows([exclusive, web]), "cluster").splitlines()
    apart = next(i for i, line in enumerate(text) if line.startswith(NO_QUOTA))
    assert apart > next(i for i, line in enumerate(text) if line.startswith("shop/deployment/web"))
    # the table apart has no column of throttling, and nothing of the row says a figure of it
    assert "THROTTLED" not in text[apart + 1] and text[apart + 2].startswith(
        "shop/statefulset/cache")
    assert "PERIODS THROTTLED" in text[2]
    assert not any(line.startswith("shop/statefulset/cache ") for line in text[:apart])
    csv = format_cluster_csv([exclusive]).splitlines()
    assert csv[1].split(",")[7:11] == ["", "", "", ""]   # periods, throttled, ms, delay
    assert "exclusive CPUs" in csv[1]


def test_usage_rules_read_each_pods_seconds() -> None:
    row = row_of(WorkloadLimits("shop/deployment/worker", 1.0, None), [window("shop_worker-a")],
                 TARGET)
    assert row.usage_p95_cpus == pytest.approx(0.2)   # 20 ms of every 100 ms
    assert row.vpa_cpus == pytest.approx(0.2 * 1.15)
    assert row.periods_throttled == 0 and row.delay_p99_now_ms == 0.0


def test_a_replica_count_that_moved_is_predicted_per_replica_and_says_so() -> None:
    moved = row_of(WorkloadLimits("shop/deployment/api", 0.3, None),
                   [window("shop_api-a"), window("shop_api-b")], TARGET)
    assert any("replicas moved in the window (1 to 2 pods" in n and "per replica" in n
               for n in moved.notes)
    steady = row_of(WorkloadLimits("shop/deployment/web", 0.5, None),
                    [window("shop_web-a"), window("shop_web-b")], TARGET)
    assert not any("replicas moved" in n for n in steady.notes)


def test_rows_are_sorted_by_what_throttling_costs_now_unlimited_last() -> None:
    rows = [row_of(WorkloadLimits(name, cpus, None), [window(p) for p in pods], TARGET)
            for name, cpus, pods in (
                ("shop/statefulset/cache", None, ["shop_cache-0"]),
                ("shop/deployment/worker", 1.0, ["shop_worker-a"]),
                ("shop/deployment/web", 0.5, ["shop_web-a", "shop_web-b"]),
                ("shop/deployment/api", 0.3, ["shop_api-a", "shop_api-b"]))]
    ordered = sort_rows(rows)
    costs = [r.throttled_ms for r in ordered[:-1]]
    assert costs == sorted(costs, reverse=True)   # the most throttled time first
    assert ordered[-1].workload == "shop/statefulset/cache"   # no limit: no cost to rank
    csv = format_cluster_csv(ordered).splitlines()
    assert csv[0].split(",") == list(CSV_COLUMNS) and len(csv) == 5
    assert json.dumps(ordered[0].to_dict(), allow_nan=False)   # JSON as it is printed


# ---- the command line -------------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [("90", 90), ("90s", 90), ("10m", 600),
                                           ("1h30m", 5400), ("1.5m", 90), ("7d", 604800),
                                           ("1d12h", 129600)])
def test_since_takes_a_duration(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text, seconds", [("1795874400", 1795874400),
                                           ("1795874400.5", 1795874400.5),
                                           ("2026-11-28T14:00:00Z", 1795874400),
                                           ("2026-11-28T15:00:00+01:00", 1795874400)])
def test_until_takes_unix_seconds_or_a_zoned_iso_time(text: str, seconds: float) -> None:
    assert instant(text) == seconds


@pytest.mark.parametrize("argv, expected", [
    (["cluster", "--since", "soon"], "expected a duration such as 90s, 10m, 1h, 7d"),
    (["cluster", "--until", "2026-11-28T14:00:00"], "an ISO 8601 time with its zone"),
    (["cluster", "--until", "nan"], "expected unix seconds or an ISO 8601 time"),
    (["cluster", "--until", "1795874400"],
     "the window of --since 600 s to --until 2026-11-28T14:00:00+00:00 begins more than 1h "
     "ago, before what the node agents are asked for: add --prometheus URL"),
    (["cluster", "--until", "4102444800"], "--until 2100-01-01T00:00:00+00:00 is in the future"),
    (["cluster", "--prometheus", "http://127.0.0.1:9", "--until", "4102444800"],
     "--until 2100-01-01T00:00:00+00:00 is in the future"),
    (["cluster", "-n", "shop", "-A"], "not allowed with argument"),
    (["cluster", "--p99", "5", "--max-delay-ms", "5"], "not allowed with argument"),
    (["cluster"], "no kubeconfig"),
    (["advise", "--passive", "--p99", "50", "--k8s", "shop/deploy/web", "--duration", "5"],
     "--duration goes with --passive --cgroup"),
    (["advise", "--passive", "--p99", "50", "--timeline", "t.cgroup.csv", "--since", "5m"],
     "--since goes with --passive --k8s"),
    (["advise", "--passive", "--p99", "50", "--k8s", "shop/job/x"],
     "expected NAMESPACE/KIND/NAME"),
    (["advise", "--passive", "--p99", "50", "--timeline", "t.cgroup.csv", "--until", "1"],
     "--until goes with --passive --k8s"),
    (["advise", "--passive", "--p99", "50", "--k8s", "shop/deploy/web", "--since", "x"],
     "expected a duration"),
    (["advise", "--passive", "--p99", "50", "--k8s", "shop/deploy/web", "--until",
      "2100-01-01T00:00:00Z"], "--until 2100-01-01T00:00:00+00:00 is in the future"),
    (["advise", "--passive", "--p99", "50", "--k8s", "shop/deploy/web"], "no kubeconfig"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], expected: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, err = exit_code_and_errors(argv, tmp_path, monkeypatch, capsys)
    assert code == 2 and expected in err, err
    assert len(err.strip().splitlines()) == 1 + err.startswith("usage:"), err
    assert not (tmp_path / "raw-data").exists()   # nothing fetched, nothing written


def test_kubectl_throttle_runs_http_timings_commands(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    assert kubectl_throttle(["--version"]) == 0
    assert capsys.readouterr().out.startswith("http-timing ")   # the program's version
    with pytest.raises(SystemExit) as stopped:
        kubectl_throttle([])   # no command: the help, listing cluster
    assert stopped.value.code == 0
    assert "  cluster   " in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["help"], ["cluster", "--help"],
                                  ["help", "advise"], ["help", "run"]])
def test_kubectl_throttles_help_names_it_as_it_is_called(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        kubectl_throttle(argv)
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl throttle")
    assert "usage: http-timing" not in out and "(see http-timing" not in out
    with pytest.raises(SystemExit):
        http_timing(argv)   # http-timing itself is named as before
    assert capsys.readouterr().out.startswith("usage: http-timing")


def test_kubectl_throttles_mistakes_name_it_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert kubectl_throttle(["clustr"]) == 2
    assert capsys.readouterr().err == ("kubectl throttle: 'clustr' is not a command; did you "
                                       "mean 'cluster'? (see kubectl throttle --help)\n")
    with pytest.raises(SystemExit) as stopped:
        kubectl_throttle(["cluster", "--since", "soon"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.startswith("kubectl throttle cluster: argument --since")


# ---- the namespace without -n: the kubeconfig's, as kubectl ---------------------------------

def kubeconfig(current: str | None, contexts: dict[str, str | None],
               server: str = "https://127.0.0.1:1") -> dict[str, Any]:
    """A kubeconfig whose contexts (name -> namespace, None: none) share one cluster."""
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u",
                                                **({"namespace": ns} if ns else {})}}
                     for name, ns in contexts.items()]}
    if current is not None:
        doc["current-context"] = current
    return doc


@pytest.mark.parametrize("docs, context, namespace", [
    ([kubeconfig("prod", {"prod": "shop", "dev": "sandbox"})], None, "shop"),
    ([kubeconfig("prod", {"prod": "shop", "dev": "sandbox"})], "dev", "sandbox"),
    ([kubeconfig("prod", {"prod": None})], None, "default"),   # the context names none
    ([kubeconfig(None, {"prod": "shop"})], None, "default"),   # no current context
    ([kubeconfig(None, {}), kubeconfig("dev", {"dev": "sandbox"})], None, "sandbox"),
    ([kubeconfig("prod", {"prod": "shop"}), kubeconfig("dev", {"prod": "other"})], None,
     "shop"),   # merged as kubectl merges $KUBECONFIG: the first file to set a key wins
])
def test_without_n_the_namespace_is_the_current_contexts(
        docs: list[dict[str, Any]], context: str | None, namespace: str) -> None:
    assert context_namespace(docs, context) == namespace


def test_cluster_reads_the_kubeconfigs_namespace_when_not_told_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    server = f"https://127.0.0.1:{free_port()}"   # nothing listens: the list is refused
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump(kubeconfig(None, {}, server)))
    second.write_text(yaml.safe_dump(kubeconfig("prod", {"prod": "shop"}, server)))
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    assert current_namespace() == "shop"
    code, err = exit_code_and_errors(["cluster"], tmp_path, monkeypatch, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"lost the API server at {server}: list deployments shop/" in err
    code, err = exit_code_and_errors(["cluster", "-n", "web"], tmp_path, monkeypatch, capsys)
    assert code == 2 and "list deployments web/" in err   # -n still wins
    first.write_text("clusters: [")
    code, err = exit_code_and_errors(["cluster"], tmp_path, monkeypatch, capsys)
    assert code == 2 and err.startswith(f"http-timing: {first}: the kubeconfig cannot be read")
    assert len(err.splitlines()) == 1, err


# ---- the picture ------------------------------------------------------------------------------

def test_per_period_keeps_the_records_usage_and_marks_its_throttles() -> None:
    pod = window("shop_web-a")
    starts, cpus, throttled = per_period(pod)
    period_s = pod.demand.period_ns / 1e9
    assert sum(cpus) * period_s == pytest.approx(pod.demand.usage_ns / 1e9)   # all CPU placed
    assert starts == sorted(starts) and len(starts) == len(cpus) == len(throttled)
    assert sum(throttled) >= counted("shop_web-a")[1] - 1   # each period the kernel counted


def test_the_picture_shows_each_pod_against_both_limits(tmp_path: Path) -> None:
    pods = [window("shop_web-a"), window("shop_web-b")]
    row = row_of(WorkloadLimits("shop/deployment/web", 0.5, None), pods, TARGET)
    out = save_cluster_picture(row, pods, tmp_path / "pictures" / "shop_deployment_web.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
