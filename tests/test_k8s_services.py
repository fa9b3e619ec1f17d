"""``advise --passive --k8s NS/KIND/NAME --replicas``: the Services that select the workload's
pods say how its requests are spread (``client.run.k8s_services``). One Service of a cluster
IP without session affinity: kube-proxy's spread, as ``--spread`` says. None, several, a
headless one or one with ``sessionAffinity: ClientIP``: one line, exit 2, unless ``--spread``
is given, and then the answer says the spread was assumed. Pure on the API's JSON, and the
command against the fake API server and agent (benchmarks/fake_kube.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fake_kube import Cluster, fake_kube
from client.commands import main as http_timing
from client.run.k8s_services import list_services, selecting, selects, spreading
from client.run.k8s_workloads import WorkloadError, WorkloadRef, fold_pods
from tests.test_cluster_agents import WINDOW, pod, workload

REF = WorkloadRef("shop", "Deployment", "web")
LABELS = {"app": "web", "tier": "front"}
SERVICES = "/api/v1/namespaces/shop/services"


def service(name: str, selector: dict[str, str] | None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop"},
            "spec": {"clusterIP": "10.96.0.7", "sessionAffinity": "None",
                     **({} if selector is None else {"selector": selector}), **spec}}


def test_a_selector_selects_pods_with_all_its_labels_and_an_empty_one_none() -> None:
    assert selects({"app": "web"}, LABELS) and selects(LABELS, LABELS)
    assert not selects({"app": "web", "tier": "back"}, LABELS)
    assert not selects({"app": "api"}, LABELS)
    assert not selects({}, LABELS) and not selects(None, LABELS)   # endpoints by hand
    found = selecting(LABELS, [service("a", {"app": "web"}), service("b", {"app": "api"}),
                               service("c", None)])
    assert [s["metadata"]["name"] for s in found] == ["a"]


@pytest.mark.parametrize(("services", "unknown"), [
    ([], "no Service in namespace shop selects the pods of shop/deployment/web (where its "
         "requests come from is not known)"),
    ([service("other", {"app": "api"})], "no Service in namespace shop selects"),
    ([service("web", {"app": "web"}, sessionAffinity="ClientIP")],
     "Service shop/web has sessionAffinity: ClientIP (each client stays on one pod): the "
     "split depends on how many clients there are"),
    ([service("web", {"app": "web"}, clusterIP="None")],
     "Service shop/web is headless (clusterIP: None): clients pick pods from DNS"),
    ([service("web", {"app": "web"}), service("web-admin", {"tier": "front"})],
     "2 Services select the pods of shop/deployment/web (shop/web, shop/web-admin)"),
])
def test_what_the_services_cannot_tell(services: list[dict[str, Any]], unknown: str) -> None:
    told = spreading(REF, LABELS, services)
    assert told.service is None and told.unknown is not None and unknown in told.unknown


def test_one_service_of_a_cluster_ip_without_affinity_tells_it() -> None:
    told = spreading(REF, LABELS, [service("web", {"app": "web"}),
                                   service("api", {"app": "api"}, clusterIP="None")])
    assert told == type(told)("shop/web", None)


def test_the_template_labels_are_kept_through_the_list_and_no_other() -> None:
    from client.run.k8s_workloads import _slim

    obj = labelled("web")
    obj["metadata"]["labels"] = {"owner": "team-a"}
    obj["spec"]["template"]["metadata"]["annotations"] = {"big": "x" * 1000}
    slim = _slim(obj)
    assert slim["spec"]["template"]["metadata"] == {"labels": LABELS}
    assert slim["metadata"]["labels"] == {}
    (folded,) = fold_pods([slim], ["Deployment"], [], [])
    assert dict(folded.labels) == LABELS


class Forbidden(Exception):
    status = 403


class Refusing:
    server = "https://api.example:6443"

    def get_json(self, path: str, timeout: float) -> Any:
        raise Forbidden()


def test_a_user_who_may_not_list_services_gets_one_line_naming_it() -> None:
    with pytest.raises(WorkloadError) as got:
        list_services("shop", Refusing())
    assert str(got.value) == ("no permission: list services in namespace shop (the Role in "
                              "k8s/advise-rbac.yaml grants what advise needs)")


def labelled(name: str) -> dict[str, Any]:
    found = workload("Deployment", name)
    found["spec"]["template"]["metadata"] = {"labels": dict(LABELS)}
    return found


def cluster(services: list[dict[str, Any]]) -> Cluster:
    return Cluster({
        "/apis/apps/v1/namespaces/shop/deployments": [labelled("web")],
        "/apis/apps/v1/namespaces/shop/statefulsets": [],
        "/apis/apps/v1/namespaces/shop/daemonsets": [],
        "/apis/apps/v1/namespaces/shop/replicasets": [
            {"metadata": {"name": "web-5d", "namespace": "shop",
                          "ownerReferences": [{"kind": "Deployment", "name": "web"}]}}],
        "/api/v1/namespaces/shop/pods": [pod("web-5d-a", "web-5d", "node-1")],
        SERVICES: services}, {"node-1": "new"}, {"shop/web-5d-a": WINDOW})


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    fake = cluster([])
    with fake_kube(fake, tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        monkeypatch.chdir(tmp_path)
        yield fake


ARGS = ["advise", "--passive", "--k8s", "shop/deployment/web", "--p99", "30", "--since",
        "600", "--replicas", "1,2"]


@pytest.mark.parametrize(("services", "unknown"), [
    ([], "no Service in namespace shop selects the pods of shop/deployment/web"),
    ([service("web", {"app": "web"}, sessionAffinity="ClientIP")], "sessionAffinity: ClientIP"),
    ([service("web", {"app": "web"}, clusterIP="None")], "is headless (clusterIP: None)"),
    ([service("web", {"app": "web"}), service("front", {"tier": "front"})],
     "2 Services select the pods of shop/deployment/web (shop/web, shop/front)"),
])
def test_replicas_stop_with_one_line_where_the_spread_cannot_be_told(
        kube: Cluster, services: list[dict[str, Any]], unknown: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    kube.lists[SERVICES] = services
    assert http_timing(ARGS) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and unknown in err, err
    assert "give --spread random" in err and "Traceback" not in err
    # stopped before any window was fetched
    assert not any("/proxy/" in path for path, _ in kube.asked), kube.asked


def test_spread_given_goes_on_and_says_it_was_assumed(
        kube: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    kube.lists[SERVICES] = [service("web", {"app": "web"}, sessionAffinity="ClientIP")]
    code = http_timing([*ARGS, "--spread", "round-robin", "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 3), err
    spread = json.loads(out)["spread"]
    assert spread["given"] is True
    assert ("--spread round-robin assumed over what the Service does: Service shop/web has "
            "sessionAffinity: ClientIP") in spread["says"]
    assert http_timing([*ARGS, "--spread", "random"]) in (0, 3)
    assert "--spread random assumed over what the Service does" in capsys.readouterr().out


def test_one_plain_service_answers_as_before_and_names_it(
        kube: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    kube.lists[SERVICES] = [service("web", {"app": "web"}), service("api", {"app": "api"})]
    code = http_timing([*ARGS, "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 3), err
    answer = json.loads(out)
    assert [r["replicas"] for r in answer["replicas"]] == [1, 2]
    assert answer["spread"]["given"] is False and answer["spread"]["how"] == "even"
    assert "through Service shop/web (a cluster IP, no session affinity)" in \
        answer["spread"]["says"]
