"""client.data.naming: run and limit names in files and headings."""

from __future__ import annotations

from client.data.naming import (check_file_name, compare_stem, limit_tag, limit_text, run_name,
                                short_names, sweep_stem)
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


def test_a_comparison_is_named_after_its_runs() -> None:
    assert short_names(["demo-kernel-1", "demo-kernel-0.3"]) == ["1", "0.3"]
    assert short_names(["a", "b"]) == ["a", "b"] and short_names(["x-1", "x-1"]) == ["x-1", "x-1"]
    assert compare_stem(["s-inprocess-1", "s-inprocess-0.3", "s-inprocess-0.1"]) == (
        "compare-s-inprocess-1-0.3-0.1")                  # the shared prefix once
    assert compare_stem(["free", "throttled"]) == "compare-free-throttled"
    many = compare_stem([f"run-20261127-1010{i:02d}" for i in range(12)])
    assert many == "compare-run-20261127-101000-and-11-more"
    assert len(compare_stem(["x" * 200])) <= 80
