"""A pod of several containers named without ``--container`` (``advise``/``sweep --cgroup
k8s:NS/POD``, ``--k8s``): where exactly one container has a CPU limit of its own, or one alone
of those with a limit serves the target URL's port, it is the one resized, said in one line;
else one line lists the containers and asks for ``--container``. One container, or a
pod-level limit, needs no pick. Against the fake API server (benchmarks/fake_kube.py) for the
pod read as the command reads it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.fake_kube import Cluster, fake_kube
from client.advise import AdviseError
from client.advise.services import _picked, _port
from client.run.limiters import LimiterError
from client.run.limiters.kubernetes import pick_container
from tests.test_run_limiters_pod_level import pod_level_pod


def containers(*specs: tuple[str, str | None, int | None]) -> dict[str, Any]:
    """A pod of containers (name, its cpu limit or None, the port it serves or None)."""
    pod = pod_level_pod()
    del pod["spec"]["resources"]
    pod["spec"]["containers"] = [
        {"name": name, "image": "x", "resources": {} if cpu is None else {
            "limits": {"cpu": cpu}}, **({"ports": [{"containerPort": port}]} if port else {})}
        for name, cpu, port in specs]
    return pod


def test_the_only_container_with_a_cpu_limit_is_picked_and_said() -> None:
    pod = containers(("app", "500m", 8080), ("proxy", None, 15001))
    assert pick_container(pod, 15001) == ("app", (
        "pod shop/api-1 has 2 containers (app, proxy): resizing app, the only one with a CPU "
        "limit (--container NAME for another)"))


def test_the_only_limited_container_serving_the_port_is_picked() -> None:
    pod = containers(("app", "500m", 8080), ("sidecar", "100m", 9090))
    name, line = pick_container(pod, 8080)
    assert name == "app" and line is not None and "serves port 8080" in line, line
    with pytest.raises(LimiterError) as neither:
        pick_container(pod, 7000)
    assert str(neither.value) == (
        "pod shop/api-1 has 2 containers (app, sidecar); app, sidecar have a CPU limit, and "
        "not one of them alone serves port 7000: say which with --container NAME")


def test_no_pick_needed_for_one_container_or_a_pod_level_limit() -> None:
    assert pick_container(containers(("app", "500m", None)), 80) == (None, None)
    pod_level = containers(("app", None, None), ("proxy", "100m", None))
    pod_level["spec"]["resources"] = {"limits": {"cpu": "1"}}
    assert pick_container(pod_level, 80) == (None, None)
    with pytest.raises(LimiterError, match=r"\(a, b\); none has a CPU limit: say which"):
        pick_container(containers(("a", None, 80), ("b", None, None)), 80)


def test_the_port_a_url_reaches() -> None:
    assert [_port(u) for u in ("http://10.0.0.1:7800/x", "http://h/", "https://h/",
                               "ftp://h/")] == [7800, 80, 443, None]


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    cluster = Cluster()
    with fake_kube(cluster, tmp_path) as config:
        monkeypatch.setenv("KUBECONFIG", str(config))
        yield cluster


def test_the_command_reads_the_pod_and_says_its_pick(served: Cluster) -> None:
    served.pods["shop/api-1"] = containers(("app", "500m", 8080), ("proxy", None, 15001))
    said: list[str] = []
    assert _picked("k8s:shop/api-1", 8080, said.append) == "app"
    assert len(said) == 1 and said[0].startswith("pod shop/api-1 has 2 containers"), said
    assert _picked("k8s:shop/api-1/proxy", 8080, said.append) is None   # named: no pick
    assert _picked("cgroup:/x", 8080, said.append) is None and len(said) == 1
    assert _picked("k8s:shop/gone", 8080, said.append) is None   # the limiter says why
    served.pods["shop/api-1"] = copy.deepcopy(containers(("a", None, None), ("b", None, None)))
    with pytest.raises(AdviseError, match="say which with --container NAME"):
        _picked("k8s:shop/api-1", 8080, said.append)
