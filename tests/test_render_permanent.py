"""``client.render.permanent``: how to keep an answer, per kind of target."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from client.render.permanent import (cgroup_permanent, docker_permanent, kubernetes_permanent,
                                     permanent_lines, systemd_unit)
from cpuquota.limit import Limit


def test_systemd_units_are_found_in_the_group_path() -> None:
    assert systemd_unit("/system.slice/myapp.service") == "myapp.service"
    assert systemd_unit("/user.slice/user-0.slice/session-3.scope/x") == "session-3.scope"
    assert systemd_unit("/throttle-lab-1") is None
    lines = cgroup_permanent(Path("/sys/fs/cgroup/system.slice/myapp.service"), 2,
                             "/system.slice/myapp.service", Limit(0.45))
    assert lines[0] == "systemd unit myapp.service: CPUQuota=45%"
    assert "systemctl set-property myapp.service CPUQuota=45%" in lines[1]
    assert "[Service]" in lines[2]
    period = cgroup_permanent(Path("/x"), 2, "/system.slice/a.service", Limit(0.2, 50))
    assert "CPUQuotaPeriodSec=50ms" in period[0]


def test_a_plain_group_gets_its_quota_file() -> None:
    v1 = cgroup_permanent(Path("/sys/fs/cgroup/cpu/app"), 1, "/app", Limit(0.45))
    assert "echo 45000 > /sys/fs/cgroup/cpu/app/cpu.cfs_quota_us" in v1[0]
    v2 = cgroup_permanent(Path("/sys/fs/cgroup/app"), 2, "/app", Limit(0.45))
    assert "echo '45000 100000' > /sys/fs/cgroup/app/cpu.max" in v2[0]


def test_docker_and_compose() -> None:
    lines = docker_permanent("web", Limit(0.45))
    assert lines[0].startswith("container web: docker update --cpus 0.45 web")
    assert "docker run --cpus 0.45" in lines[1] and 'cpus: "0.45"' in lines[2]
    assert permanent_lines("docker", {"name": "web"}, Limit(0.45)) == lines
    assert permanent_lines("nothing", {}, Limit(0.45)) == []


def test_kubernetes_patch_and_kustomize() -> None:
    lines = kubernetes_permanent("shop", "api", "app", Limit(0.45))
    patch = lines[1].split("-p ", 1)[1].strip("'")
    assert json.loads(patch) == {"spec": {"template": {"spec": {"containers": [
        {"name": "app", "resources": {"limits": {"cpu": "450m"}}}]}}}}
    assert "kubectl patch deployment api -n shop" in lines[1]
    assert "                cpu: 450m" in lines and "      name: api" in lines


def test_a_pods_answer_is_its_deployments_patch() -> None:
    names = {"namespace": "shop", "pod": "api-7d9-x2", "container": "app", "qos": "Burstable",
             "owner": "api", "request_millicores": 300}
    above = permanent_lines("k8s", names, Limit(0.45))     # above the request: limit only
    assert above == kubernetes_permanent("shop", "api", "app", Limit(0.45))
    below = permanent_lines("k8s", names, Limit(0.2))      # below it: the request moves too
    patch = json.loads(below[1].split("-p ", 1)[1].strip("'"))
    assert patch["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}}
    kustomize = yaml.safe_load("\n".join(line[4:] for line in below[3:]))
    assert kustomize["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "200m"}, "requests": {"cpu": "200m"}}
    guaranteed = permanent_lines("k8s", {**names, "qos": "Guaranteed"}, Limit(0.45))
    assert "requests.cpu 450m" in guaranteed[0]
    bare = permanent_lines("k8s", {**names, "owner": None}, Limit(0.45))
    assert bare[0].startswith("pod shop/api-7d9-x2 (no Deployment)")
