"""VerticalPodAutoscalers as ``advise`` and ``cluster`` read them (``client.run.k8s_vpa``), on
the API's JSON: which modes update, which policies leave the CPU limit alone, the one line
that stops advise, and the row's mode. Against the real API (a VPA object under a CRD the
test installs): tests/test_vpa_kube.py."""

from __future__ import annotations

from typing import Any

import pytest

from client.analysis.cluster import ClusterRow
from client.render.cluster import CSV_COLUMNS, format_cluster, format_cluster_csv
from client.run.k8s_vpa import Vpa, parse_vpas, vpa_modes, vpa_refusal


def vpa(name: str, target: str, mode: str | None = None, kind: str = "Deployment",
        policy: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}}
    if mode is not None:
        spec["updatePolicy"] = {"updateMode": mode}
    if policy is not None:
        spec["resourcePolicy"] = {"containerPolicies": [{"containerName": "*", **policy}]}
    return {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": name, "namespace": "shop"}, "spec": spec}


@pytest.mark.parametrize("mode, updating", [
    ("Auto", True), ("Recreate", True), ("InPlaceOrRecreate", True), (None, True),   # Auto
    ("Off", False), ("Initial", False)])
def test_the_updating_modes_are_the_ones_whose_updater_acts(mode: str | None,
                                                            updating: bool) -> None:
    (found,) = parse_vpas([vpa("web", "web", mode)])
    assert found.mode == (mode or "Auto") and found.updating is updating


@pytest.mark.parametrize("policy", [{"mode": "Off"}, {"controlledValues": "RequestsOnly"},
                                    {"controlledResources": ["memory"]}])
def test_a_policy_that_leaves_the_cpu_limit_alone_does_not_update_it(
        policy: dict[str, Any]) -> None:
    (found,) = parse_vpas([vpa("web", "web", "InPlaceOrRecreate", policy=policy)])
    assert not found.updating and "leaves the CPU limit alone" in found.words()
    (kept,) = parse_vpas([vpa("web", "web", "Auto", policy={"controlledResources": ["cpu"]})])
    assert kept.updating


def test_the_refusal_is_one_line_naming_the_vpa_its_mode_and_the_way_on() -> None:
    modes = vpa_modes(parse_vpas([vpa("web-vpa", "web", "InPlaceOrRecreate"),
                                  vpa("db-vpa", "db", "InPlaceOrRecreate", kind="StatefulSet"),
                                  vpa("idle", "api", "Off")]))
    found = modes[("shop", "Deployment", "web")]
    line = vpa_refusal(found)
    assert line.startswith("shop/deployment/web is under VPA shop/web-vpa (updateMode "
                           "InPlaceOrRecreate): the VPA will change the limit again")
    assert "--despite-vpa" in line and "\n" not in line
    assert modes[("shop", "StatefulSet", "db")].updating   # the kind is part of the target
    assert ("shop", "Deployment", "db") not in modes
    assert not modes[("shop", "Deployment", "api")].updating


def test_an_updating_vpa_wins_over_an_idle_one_on_the_same_target() -> None:
    modes = vpa_modes(parse_vpas([vpa("a", "web", "Off"), vpa("b", "web", "Recreate")]))
    assert modes[("shop", "Deployment", "web")].name == "b"


def test_cluster_shows_the_vpa_mode_in_the_row() -> None:
    row = ClusterRow("shop/deployment/web", 0.5, 0.5, 1, 10.0, 0.3, 0.35, 100, 5, 12.0, 3.0,
                     0.6, 1.0, 0, vpa_mode="InPlaceOrRecreate")
    text = format_cluster([row], "cluster").splitlines()
    assert "VPA MODE" in text[2]
    assert "InPlaceOrRecreate" in text[3].split()
    csv = format_cluster_csv([row]).splitlines()
    assert csv[1].split(",")[CSV_COLUMNS.index("vpa_mode")] == "InPlaceOrRecreate"
    assert row.to_dict()["vpa_mode"] == "InPlaceOrRecreate"
    assert Vpa("shop", "x", "Deployment", "web", "Off", True).words() == \
        "VPA shop/x (updateMode Off)"
