"""Several pods of one Deployment as one target: their groups summed level by level
(``client.run.service_group.combine_pods``, ``client.run.cgroup_sampler.PodsReader``) from
fixture files, and their limits set alike (``client.run.limiters.pods.PodsLimiter``) against
scripted APIs. The same on the real node: tests/test_commands_advise_k8s_pods.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from client.data.timeline import read_timeline
from client.run.cgroup_sampler import CgroupSampler, PodsReader, open_reader, read_sample
from client.run.service_group import ServiceGroup, ServiceGroupError, combine_pods, resolve_cgroup
from client.run.limiters import LimiterError
from client.run.limiters.kubernetes import KubernetesLimiter
from client.run.limiters.pods import PodsLimiter
from cpuquota.limit import Limit
from tests.cgroup_fixtures import (V2_STAT, change_in_place, fake_proc, mount_line, v1_group,
                                   v2_group)
from tests.test_run_limiters_kubernetes import ScriptedApi, pod


def v2_pods(tmp_path: Path) -> tuple[list[ServiceGroup], list[Path]]:
    """Two pods below a kubepods slice with a 4 CPU quota: each a pod group with a 0.2 CPU
    quota and a container group without the cpu controller; their counters differ."""
    top = tmp_path / "cg2"
    proc = fake_proc(tmp_path / "proc", [mount_line(29, "/", top, "cgroup2", "rw")])
    kubepods = v2_group(top / "kubepods.slice", "400000 100000", stat=V2_STAT.replace(
        "nr_throttled 30", "nr_throttled 0").replace("throttled_usec 2071000",
                                                     "throttled_usec 0"))
    targets, pods = [], []
    for k, (periods, throttled, usec, usage) in enumerate(((31, 30, 2071000, 900000),
                                                           (50, 4, 12000, 250000))):
        stat = (f"usage_usec {usage}\nuser_usec {usage}\nsystem_usec 0\nnr_periods {periods}\n"
                f"nr_throttled {throttled}\nthrottled_usec {usec}\nnr_bursts 0\nburst_usec 0\n")
        group = v2_group(kubepods / f"pod{k}.slice", "20000 100000", stat=stat)
        container = v2_group(group / "ctr.scope", cpu_max=None)
        (container / "cpu.stat").write_text(f"usage_usec {usage}\n")
        pods.append(group)
        targets.append(resolve_cgroup(str(container), proc=proc))
    return targets, pods


def test_the_pods_groups_are_summed_level_by_level(tmp_path: Path) -> None:
    targets, pod_dirs = v2_pods(tmp_path)
    target = combine_pods("k8s:shop/deployment/api", targets)
    assert target.limit is not None and target.limit.quota_us == 40000   # 2 x 0.2 CPU
    assert [level.limit.quota_us for level in target.levels] == [40000, 800000]
    assert not target.pressure and isinstance(open_reader(target), PodsReader)
    each = [read_sample(t) for t in targets]
    summed = read_sample(target)
    assert summed.usage_ns == sum(s.usage_ns for s in each) == 1_150_000_000
    assert (summed.nr_periods, summed.nr_throttled, summed.throttled_ns) == \
        (81, 34, 2_083_000_000)
    assert summed.levels == ((62, 0, 0),)        # the slice above both, counted twice
    assert summed.quotas == ((40000, 100000), (800000, 100000))
    assert (summed.pressure_some_ns, summed.pressure_full_ns) == (None, None)
    meta = target.to_metadata()
    assert [p["path"] for p in meta["pods"]] == [str(t.directory) for t in targets]
    assert meta["quota_us"] == 40000 and "the sum over 2 pods of" in meta["usage"]["counter"]
    # the sampler writes the sums; a pod resized shows in the next sample
    csv_path = tmp_path / "run.cgroup.csv"
    with CgroupSampler(target, csv_path, interval=0.005) as sampler:
        sampler.start()
        change_in_place(pod_dirs[1] / "cpu.max", "50000 100000\n")   # read at any moment
        # the second sample from now was read after the write, however busy the machine
        taken = len(sampler.samples)
        deadline = time.monotonic() + 60
        while (len(sampler.samples) < taken + 2 and sampler.error is None
               and time.monotonic() < deadline):
            time.sleep(0.005)
    assert sampler.error is None, sampler.error
    assert read_timeline(csv_path) == sampler.samples
    assert sampler.samples[-1].quotas[0] == (70000, 100000)


def test_pods_whose_groups_differ_are_not_summed(tmp_path: Path) -> None:
    targets, _ = v2_pods(tmp_path)
    top = tmp_path / "cpu"
    proc = fake_proc(tmp_path / "proc1", [mount_line(30, "/", top, "cgroup", "rw,cpu,cpuacct")])
    other = resolve_cgroup(str(v1_group(top / "kubepods" / "x", cpuacct_usage=1)), proc=proc)
    with pytest.raises(ServiceGroupError, match="the pods' groups differ"):
        combine_pods("k8s:shop/deployment/api", [targets[0], other])
    with pytest.raises(ServiceGroupError, match="no pod"):
        combine_pods("k8s:shop/deployment/api", [])


def pod_limiter(tmp_path: Path, name: str, limit: str = "500m") -> tuple[KubernetesLimiter,
                                                                          ScriptedApi]:
    top = tmp_path / name / "cpu"
    v1_group(top, quota_us=-1)
    group = v1_group(top / "kubepods" / "app", quota_us=round(float(limit[:-1]) * 100),
                     cpuacct_usage=1)
    proc = fake_proc(tmp_path / name / "proc",
                     [mount_line(30, "/", top, "cgroup", "rw,cpu,cpuacct")])
    document = pod(limit=limit)
    document["metadata"]["name"] = name
    document["status"]["containerStatuses"][0]["containerID"] = f"containerd://{name}-id"
    api = ScriptedApi(document, group)
    return KubernetesLimiter(resolve_cgroup(str(group), proc=proc), api, "shop", name, "app",
                             to_json=lambda obj: obj, timeout=2), api


def test_every_pod_is_resized_alike_and_put_back_alike(tmp_path: Path) -> None:
    (a, api_a), (b, api_b) = pod_limiter(tmp_path, "api-1"), pod_limiter(tmp_path, "api-2")
    limiter = PodsLimiter("shop/api", [a, b])
    assert limiter.names["pods"] == ["api-1", "api-2"] and "2 pods" in limiter.description
    was = limiter.read()
    assert was is not None and was.quota_us == 50000
    limiter.apply(Limit(0.3))
    assert len(api_a.patches) == len(api_b.patches) == 1
    assert a.read() == b.read() == limiter.read()
    assert limiter.read().quota_us == 30000        # type: ignore[union-attr]
    hint = limiter.restore_hint(was)
    assert hint.count("kubectl patch pod") == 2
    assert "kubectl patch pod api-1 -n shop" in hint and "kubectl patch pod api-2 -n shop" in hint
    assert limiter.unchanged() == (
        "pod shop/api-1, container app: restart count 0 and container id api-1-id unchanged; "
        "pod shop/api-2, container app: restart count 0 and container id api-2-id unchanged")
    # one pod left at another limit (a restore cut short): no common limit, both set again
    b.apply(Limit(0.5))
    assert limiter.read() is None
    limiter.apply(Limit(0.5))
    assert len(api_a.patches) == 2 and len(api_b.patches) == 2   # b was already there
    assert a.read() == b.read()


def test_pods_at_different_limits_are_refused_in_one_line(tmp_path: Path) -> None:
    (a, _), (b, _) = pod_limiter(tmp_path, "api-1"), pod_limiter(tmp_path, "api-2", "300m")
    with pytest.raises(LimiterError, match="different cpu limits now \\(api-1 0.5 CPU, api-2 "
                       "0.3 CPU\\): a rollout under way"):
        PodsLimiter("shop/api", [a, b])
