"""``--timeline k8s:NS/POD`` without a cluster: the reference's syntax, and the one-line errors
of a malformed reference and of a machine with no usable kubeconfig (the fetch itself runs
against the real node in tests/test_agent_node.py)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from client.run.agent_timeline import PodRef, parse_pod_ref
from tests.import_support import write_documented
from tests.support import usage_error


def test_pod_references() -> None:
    assert parse_pod_ref("raw-data/t.cgroup.csv") is None
    assert parse_pod_ref("k8s:throttle-lab/limited-5d8f") == PodRef("throttle-lab", "limited-5d8f")
    ref = parse_pod_ref("k8s:ns/pod/burn-service")
    assert ref == PodRef("ns", "pod", "burn-service") and str(ref) == "k8s:ns/pod/burn-service"
    for bad in ("k8s:", "k8s:ns", "k8s:ns/", "k8s:NS/pod", "k8s:ns/pod/c/d", "k8s:ns/p_d"):
        with pytest.raises(ValueError, match="k8s:NAMESPACE/POD"):
            parse_pod_ref(bad)


def test_bad_references_and_no_kubeconfig_are_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time_ns()
    write_documented("jmeter-csv", [(now, now + 5_000_000, 200)], "http://127.0.0.1:1/x",
                     tmp_path / "r.jtl")
    line = usage_error(["import", "r.jtl", "--timeline", "k8s:Bad/pod"], tmp_path, monkeypatch,
                       capsys)
    assert "k8s:NAMESPACE/POD" in line
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    line = usage_error(["import", "r.jtl", "--timeline", "k8s:ns/pod"], tmp_path, monkeypatch,
                       capsys)
    assert "kubeconfig" in line and "k8s:ns/pod" in line
    assert not (tmp_path / "raw-data").exists()   # nothing written
