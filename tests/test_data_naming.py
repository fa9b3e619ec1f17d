"""client.data.naming: run and limit names in files and headings."""

from __future__ import annotations

from client.data.naming import check_file_name, limit_tag, limit_text, run_name, sweep_stem
from cpuquota.limit import Limit


def test_names() -> None:
    assert limit_tag(Limit(0.3)) == "0.3" and limit_tag(Limit(1.0)) == "1"
    assert limit_tag(None) == "none"
    assert limit_text(Limit(0.3)) == "0.3 CPU" and limit_text(None) == "no limit"
    assert run_name("demo", "kernel", Limit(0.3)) == "demo-kernel-0.3"
    assert run_name("", "inprocess", Limit(1.0)) == "inprocess-1"
    assert run_name("x", "docker", None) == "x-docker-none"
    assert sweep_stem("", "docker") == "docker"


def test_file_names() -> None:
    assert check_file_name("run-1") is None and check_file_name("", prefix=True) is None
    assert "plain file name" in (check_file_name("a/b") or "")
    assert "plain file name prefix" in (check_file_name("..", prefix=True) or "")
    assert check_file_name("") is not None
