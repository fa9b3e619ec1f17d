"""kubenode's pure parts: the generated go.mod files, the config files, the step engine, the
docker-archive writer, and the pid files (with real processes). The node itself is
tests/test_kube_node.py."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from kubenode import build, files, host, images, proc
from kubenode.addons import COREFILE, coredns_manifests
from kubenode.__main__ import main as kubenode_main
from kubenode.config import DNS_SERVICE_IP, MAX_PODS, MAX_PODS_CEILING, Layout, layout
from kubenode.steps import Step, StepError, pending, run_down, run_up, updatable
from kubenode.traefik import (LOG_DIR_IN_POD, MANIFEST_ANNOTATION, manifest_digest,
                              traefik_manifests)

KUBE_GOMOD = """module k8s.io/kubernetes

go 1.24.0

require (
\tk8s.io/api v0.0.0
\tgithub.com/x/y v1.2.3 // indirect
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // a comment
\tgithub.com/x/y => github.com/x/y v1.2.4
)
"""

TRAEFIK_GOMOD = """module github.com/traefik/traefik/v3

go 1.24.0

replace (
\tgithub.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1-0.20200324110947-a37a7636d23e
\tgithub.com/gorilla/mux => github.com/containous/mux v0.0.0-20250523120546-41b6ec3aed59
)

replace github.com/mailgun/minheap => github.com/containous/minheap v0.0.0-20190809180810-6e71eb837595

replace github.com/local/thing => ./local/thing
"""


def test_kube_gomod_replaces_each_staging_module_with_its_published_version() -> None:
    text = build.kube_gomod(KUBE_GOMOD, "v1.37.2")
    assert "require k8s.io/kubernetes v1.37.2" in text
    assert "\tk8s.io/api => k8s.io/api v0.37.2" in text
    assert "\tk8s.io/client-go => k8s.io/client-go v0.37.2" in text
    assert "github.com/x/y" not in text  # only the staging lines
    assert "go 1.24.0" in text


def test_kube_gomod_refuses_a_gomod_without_staging_lines() -> None:
    with pytest.raises(build.BuildError):
        build.kube_gomod("module x\n\ngo 1.22\n")


def test_traefik_gomod_keeps_the_published_replaces_only() -> None:
    text = build.traefik_gomod(TRAEFIK_GOMOD, "v3.6.12")
    assert "require github.com/traefik/traefik/v3 v3.6.12" in text
    assert text.count("=>") == 3
    assert "minheap => github.com/containous/minheap" in text
    assert "./local" not in text


def test_kube_ldflags_set_the_version_the_node_reports() -> None:
    flags = build.kube_ldflags("v1.37.2")
    assert "k8s.io/component-base/version.gitVersion=v1.37.2" in flags
    assert "gitMajor=1" in flags and "gitMinor=37" in flags


def test_configs_say_what_the_node_needs(tmp_path: Path) -> None:
    tomllib = pytest.importorskip("tomllib")
    lay = Layout(cache=tmp_path / "cache", state=tmp_path / "state")
    containerd = tomllib.loads(files.containerd_toml(lay))
    assert containerd["version"] == 4   # containerd 2.3+'s: no migration at start
    runtime = containerd["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["containerd"]["default_runtime_name"] == "runc"
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    # the node's own shim and runc from the cache, not the host's (Docker's containerd 1.6)
    assert runc["runtime_path"] == str(lay.containerd_dir / "containerd-shim-runc-v2")
    assert runc["options"]["BinaryName"] == str(lay.runc_bin)
    assert str(lay.runc_bin).startswith(str(lay.cache))
    images = containerd["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == files.PAUSE_IMAGE
    assert containerd["plugins"]["io.containerd.nri.v1.nri"]["disable"] is True
    assert containerd["plugins"]["io.containerd.internal.v1.opt"]["path"].startswith(str(lay.state))
    assert containerd["root"].startswith(str(lay.state))
    # version 4: the sockets are the server plugins' (a [grpc] section is ignored: the host's
    # /run/containerd/containerd.sock then)
    assert "grpc" not in containerd and "ttrpc" not in containerd
    for server in ("grpc", "ttrpc"):
        address = containerd["plugins"][f"io.containerd.server.v1.{server}"]["address"]
        assert address.startswith(str(lay.state))
    kubelet = json.loads(files.kubelet_config(lay))
    assert kubelet["cgroupDriver"] == "cgroupfs"
    assert kubelet["cgroupRoot"] == "/tlnode"
    assert kubelet["clusterDNS"] == [DNS_SERVICE_IP]
    assert "failCgroupV1" not in kubelet            # a cgroup v2 host: the kubelet's default
    assert json.loads(files.kubelet_config(lay, cgroup_v1=True))["failCgroupV1"] is False
    # the static CPU manager only where asked (tests/test_exclusive_cpus_kube.py)
    assert "cpuManagerPolicy" not in kubelet and "systemReserved" not in kubelet
    static = json.loads(files.kubelet_config(lay, static_cpus=True))
    assert (static["cpuManagerPolicy"], static["systemReserved"]) == ("static", {"cpu": "100m"})
    proxy = json.loads(files.kube_proxy_config(lay))
    assert proxy["conntrack"] == {"maxPerCore": 0}
    assert proxy["mode"] == "iptables"
    assert files.KUBELET_SYSCTLS["kernel/panic_on_oops"] == "1"
    admin = json.loads(files.kubeconfig(lay, "admin"))
    assert admin["users"][0]["user"]["client-key"].endswith("pki/admin.key")


def test_max_pods_is_the_kubelets_default_unless_the_environment_sets_another(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    monkeypatch.delenv("THROTTLE_LAB_KUBE_MAX_PODS", raising=False)
    assert json.loads(files.kubelet_config(layout()))["maxPods"] == MAX_PODS == 150
    monkeypatch.setenv("THROTTLE_LAB_KUBE_MAX_PODS", "520")
    assert json.loads(files.kubelet_config(layout()))["maxPods"] == 520
    for bad in ("many", "0", str(MAX_PODS_CEILING + 1), "-3"):
        monkeypatch.setenv("THROTTLE_LAB_KUBE_MAX_PODS", bad)
        assert kubenode_main(["status"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"THROTTLE_LAB_KUBE_MAX_PODS={bad}:" in err, err


def test_coredns_answers_nxdomain_outside_the_cluster_in_a_block_of_its_own() -> None:
    blocks = COREFILE.split("\n}\n")
    assert "kubernetes cluster.local" in blocks[0] and "template" not in blocks[0]
    assert blocks[1].lstrip().startswith(".:53") and "rcode NXDOMAIN" in blocks[1]
    items = json.loads(coredns_manifests())["items"]
    service = next(i for i in items if i["kind"] == "Service")
    assert service["spec"]["clusterIP"] == DNS_SERVICE_IP


def test_the_metrics_api_is_served_by_the_host_process_on_the_nodes_address(
        tmp_path: Path) -> None:
    """metrics-server's wiring: the APIService's Service has no selector and its one
    EndpointSlice names the address and port metrics-server listens on (the port names match,
    as the aggregator's resolver asks), the API server dials endpoints and carries a front
    proxy, metrics-server's certificates are the pki's, and down stops it (its undo)."""
    from kubenode import daemons, pki
    from kubenode.addons import METRICS_APISERVICE, metrics_server_manifests
    from kubenode.config import METRICS_SERVER_PORT, NODE_ADDR
    from kubenode.context import Node
    from kubenode.node import KUBECONFIGS, STEPS

    items = {i["kind"]: i for i in json.loads(metrics_server_manifests("Q0E="))["items"]}
    service, slice_ = items["Service"], items["EndpointSlice"]
    assert "selector" not in service["spec"]
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == \
        service["metadata"]["name"]
    assert slice_["endpoints"][0]["addresses"] == [NODE_ADDR]
    assert [(p["name"], p["port"]) for p in slice_["ports"]] == \
        [(service["spec"]["ports"][0]["name"], METRICS_SERVER_PORT)]
    api = items["APIService"]
    assert api["metadata"]["name"] == METRICS_APISERVICE and api["spec"]["caBundle"] == "Q0E="
    assert api["spec"]["service"]["name"] == service["metadata"]["name"]
    node = Node(Layout(cache=tmp_path / "cache", state=tmp_path / "state"))
    server = daemons.apiserver_cmd(node)
    assert "--enable-aggregator-routing=true" in server
    proxy = server[server.index("--proxy-client-cert-file") + 1]
    assert Path(proxy).name == "front-proxy-client.crt"
    assert server[server.index("--requestheader-allowed-names") + 1] == "front-proxy-client"
    names = {c.name: c for c in pki.CERTS}
    assert names["front-proxy-client"].subject.endswith("CN=front-proxy-client")
    assert "DNS:metrics-server.kube-system.svc" in names["metrics-server-serving"].sans
    metrics = daemons.metrics_server_cmd(node)
    assert metrics[0] == str(node.lay.metrics_server_bin)
    assert metrics[metrics.index("--bind-address") + 1] == NODE_ADDR
    assert metrics[metrics.index("--secure-port") + 1] == str(METRICS_SERVER_PORT)
    assert Path(metrics[metrics.index("--tls-cert-file") + 1]).name == \
        "metrics-server-serving.crt"
    assert "metrics-server" in KUBECONFIGS
    step = next(s for s in STEPS if s.name == "metrics-server")
    assert step.undo is not None and not step.update
    order = [s.name for s in STEPS]
    assert order.index("kubelet") < order.index("metrics-server")
    assert order.index("build metrics-server") < order.index("state directory")


def test_steps_run_what_is_missing_and_undo_in_reverse() -> None:
    done: set[str] = {"a"}
    calls: list[str] = []

    def step(name: str) -> Step[set[str]]:
        return Step(name, check=lambda s: name in s,
                    do=lambda s: (calls.append("do " + name), s.add(name)) and None,
                    undo=lambda s: (calls.append("undo " + name), s.discard(name)) and None)

    steps = [step("a"), step("b"), step("c")]
    assert pending(steps, done) == ["b", "c"]
    seconds = run_up(steps, done)
    assert calls == ["do b", "do c"] and set(seconds) == {"b", "c"}
    run_down(steps, done)
    assert calls[2:] == ["undo c", "undo b", "undo a"] and not done


def test_only_update_steps_pending_may_be_done_on_a_running_node() -> None:
    state = {"daemon", "addon"}
    steps = [Step("daemon", lambda s: "daemon" in s, lambda s: s.add("daemon")),
             Step("addon", lambda s: "addon" in s, lambda s: s.add("addon"), update=True)]
    assert updatable(steps, state) == []
    state.discard("addon")
    assert updatable(steps, state) == ["addon"]
    state.discard("daemon")
    assert updatable(steps, state) is None


def test_a_step_that_does_not_reach_its_check_is_an_error_naming_it() -> None:
    steps = [Step("never", check=lambda s: False, do=lambda s: None)]
    with pytest.raises(StepError, match="never"):
        run_up(steps, None)


def test_down_runs_every_undo_and_reports_the_failures_together() -> None:
    ran: list[str] = []

    def fail(_: object) -> None:
        ran.append("fail")
        raise OSError("busy")

    steps = [Step("first", lambda s: True, lambda s: None, lambda s: ran.append("first")),
             Step("broken", lambda s: True, lambda s: None, fail)]
    with pytest.raises(StepError, match="broken: busy"):
        run_down(steps, None, log=lambda _: None)
    assert ran == ["fail", "first"]


def test_single_binary_archive_is_a_docker_archive(tmp_path: Path) -> None:
    binary = tmp_path / "pause"
    binary.write_bytes(b"\x7fELF not really")
    archive = images.single_binary_archive(binary, "throttle-lab-pause:1", tmp_path / "a.tar",
                                           entrypoint=["/pause"])
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        entry = manifest[0]
        assert entry["RepoTags"] == ["throttle-lab-pause:1"]
        layer = tar.extractfile(entry["Layers"][0]).read()  # type: ignore[union-attr]
        config = json.load(tar.extractfile(entry["Config"]))  # type: ignore[arg-type]
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/pause"]
    with tarfile.open(fileobj=__import__("io").BytesIO(layer)) as inner:
        member = inner.getmember("pause")
        assert member.mode == 0o755 and inner.extractfile(member).read() == binary.read_bytes()  # type: ignore[union-attr]


def test_a_daemon_is_stopped_by_its_pid_file_and_a_reused_pid_is_left_alone(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    pid = proc.start_daemon(["sleep", "300"], pidfile=pidfile, logfile=tmp_path / "sleep.log")
    assert proc.read_pidfile(pidfile) == (pid, proc.start_time(pid))
    # A pid file whose start time is another process's: not ours, never signalled.
    other = tmp_path / "other.pid"
    other.write_text(f"{pid} {proc.start_time(pid) + 1}\n")  # type: ignore[operator]
    assert proc.read_pidfile(other) is None
    proc.stop_pidfile(other)
    assert proc.alive(pid)
    proc.stop_pidfile(pidfile)
    assert not proc.alive(pid) and not pidfile.exists()


def test_start_daemon_leaves_no_child_behind(tmp_path: Path) -> None:
    """The daemon is started through a helper that exits: it is not this process's child."""
    pid = proc.start_daemon([sys.executable, "-c", "import time; time.sleep(60)"],
                            pidfile=tmp_path / "p.pid", logfile=tmp_path / "p.log")
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert ppid != __import__("os").getpid()
    finally:
        proc.stop_pidfile(tmp_path / "p.pid")
    deadline = time.monotonic() + 5
    while proc.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not proc.alive(pid)


def test_run_raises_with_the_commands_output() -> None:
    with pytest.raises(RuntimeError, match="exited 3"):
        proc.run(["sh", "-c", "echo nope >&2; exit 3"])
    assert proc.run(["true"]).returncode == 0
    assert isinstance(subprocess.CompletedProcess, type)


def test_the_overlay_changes_only_the_ingress_class_and_the_jobs_hold(tmp_path: Path) -> None:
    import yaml

    from kubenode.overlay import write_overlay

    root = Path(__file__).resolve().parent.parent
    overlay = write_overlay(tmp_path / "o", root / "k8s", hold_for_copy=600)
    doc = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert (overlay / doc["resources"][0]).resolve() == (root / "k8s").resolve()
    ingress, job = doc["patches"]
    assert ingress["target"] == {"kind": "Ingress"}
    assert yaml.safe_load(ingress["patch"]) == [
        {"op": "replace", "path": "/spec/ingressClassName", "value": "traefik"}]
    env = yaml.safe_load(job["patch"])["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "HOLD_FOR_COPY", "value": "600"}]
    plain = yaml.safe_load((write_overlay(tmp_path / "p", root / "k8s") / "kustomization.yaml")
                           .read_text())
    assert len(plain["patches"]) == 1


def test_traefik_logs_json_to_the_state_dir_and_carries_its_manifests_digest(
        tmp_path: Path) -> None:
    items = json.loads(traefik_manifests(tmp_path / "traefik"))["items"]
    deployment = next(i for i in items if i["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    assert "--accesslog.format=json" in args
    assert f"--accesslog.filepath={LOG_DIR_IN_POD}/access.log" in args
    assert spec["volumes"] == [{"name": "access-log", "hostPath": {
        "path": str(tmp_path / "traefik"), "type": "DirectoryOrCreate"}}]
    assert spec["containers"][0]["volumeMounts"][0]["mountPath"] == LOG_DIR_IN_POD
    digest = deployment["metadata"]["annotations"][MANIFEST_ANNOTATION]
    assert digest == manifest_digest(tmp_path / "traefik") != manifest_digest(tmp_path / "x")


def test_down_removes_every_mount_point_it_made_and_names_one_that_is_not_empty(
        tmp_path: Path) -> None:
    """A mount point someone else filled (dockerd's shims put /run/containerd/s on the host)
    must not keep the node's other mount points on the host (/var/lib/kubelet and /var/lib/cni
    left after /run/containerd could not be removed)."""
    from kubenode.context import Node
    from kubenode.node import STEPS

    lay = Layout(cache=tmp_path / "cache", state=tmp_path / "state")
    node = Node(lay, lambda _: None)
    made = [tmp_path / "host" / name for name in ("kubelet", "containerd", "cni")]
    for path in made:
        path.mkdir(parents=True)
    (made[1] / "s").mkdir()               # someone else's
    node.p("made-mountpoints").parent.mkdir(parents=True, exist_ok=True)
    node.p("made-mountpoints").write_text("".join(f"{p}\n" for p in made))
    step = next(s for s in STEPS if s.name == "mount points")
    assert step.undo is not None
    with pytest.raises(OSError, match="containerd"):
        step.undo(node)
    assert [p.exists() for p in made] == [False, True, False]


def test_cgroup_v1_is_what_the_kernel_mounts_at_sys_fs_cgroup() -> None:
    """A v2 host has one cgroup2 filesystem at /sys/fs/cgroup (statfs: cgroup2fs); anything
    else is v1, where the kubelet 1.35+ runs only with ``failCgroupV1: false``."""
    fs_type = subprocess.run(["stat", "-f", "-c", "%T", "/sys/fs/cgroup"], capture_output=True,
                             text=True, check=True).stdout.strip()
    assert host.cgroup_v1() is (fs_type != "cgroup2fs")


def test_an_imported_images_containerd_name_is_the_cris_normalisation() -> None:
    """The node's checks look images up by the name the CRI gives an imported tag: an
    unqualified one under Docker Hub's domain, a qualified one as it is."""
    from kubenode.images import ctr_ref
    assert ctr_ref("throttle-lab:latest") == "docker.io/library/throttle-lab:latest"
    assert ctr_ref("traefik/whoami:v1") == "docker.io/traefik/whoami:v1"
    assert ctr_ref("localhost/pause:3.10") == "localhost/pause:3.10"
    assert ctr_ref("example.test:5000/a/b:1") == "example.test:5000/a/b:1"


def test_a_kubelet_that_refuses_cgroup_v1_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    """The kubelet 1.37.2's own words (pkg/kubelet/apis/config/validation) in its log, the
    daemon gone: ``wait`` raises one line naming failCgroupV1 and the way out; another exit
    keeps the log's last lines."""
    from kubenode.context import Node

    node = Node(Layout(cache=tmp_path / "cache", state=tmp_path / "state"))
    node.p("logs").mkdir(parents=True)
    node.p("logs", "kubelet.log").write_text(
        "I1202 flags...\nE1202 run.go:72] \"command failed\" err=\"failed to validate kubelet "
        "configuration, error: kubelet is configured to not run on a host using cgroup v1. "
        "cgroup v1 support is unsupported and will be removed in a future release\"\n")
    with pytest.raises(RuntimeError) as refused:
        node.wait("kubelet", lambda: False, 5, daemon="kubelet")
    said = str(refused.value)
    assert "\n" not in said and "failCgroupV1: false" in said and "cgroup v2" in said, said
    node.p("logs", "kubelet.log").write_text("E1202 something else broke\n")
    with pytest.raises(RuntimeError, match="kubelet exited: E1202 something else broke"):
        node.wait("kubelet", lambda: False, 5, daemon="kubelet")
