"""benchmarks/: a package of modules run as ``python -m benchmarks.NAME``, on one support
module (benchmarks.support). Each benchmark imports and answers ``--help``; none edits
``sys.path`` or imports from ``tests``; the support module starts burn-service through the
client's targets registry and stops it by its pid. (The benchmarks' figures are not asserted
here: they are measured by running them, on a quiet machine.)"""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from benchmarks.__main__ import CHOSEN, known
from benchmarks.records import (END, ENV, MARKER, PAGE, RESULTS, cgroup_version, cpu_model,
                                latest, machine, measures, printed_tables, rewritten,
                                superseded_by,
                                write_page, write_record)
from benchmarks.support import burn_service, calibrate, scrape
from cpuquota.limit import Limit
from tests.support import gone

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "benchmarks"
NOT_BENCHMARKS = {"__init__", "__main__", "support", "records", "burner_server", "fake_kube",
                  "prometheus_server"}
BENCHMARKS = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in NOT_BENCHMARKS)
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py"))


def imported_names(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
    return names


def touches_sys_path(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Attribute) and node.attr == "path"
               and isinstance(node.value, ast.Name) and node.value.id == "sys"
               for node in ast.walk(tree))


def test_every_script_is_a_module_of_the_package() -> None:
    assert (PACKAGE / "__init__.py").exists()
    assert "parallel_drain" in BENCHMARKS and len(BENCHMARKS) >= 15
    # scripts/ holds shell only, and the docs site's MkDocs hooks (mkdocs.yml names them)
    assert {p.name for p in (ROOT / "scripts").glob("*.py")} <= {"mkdocs_hooks.py"}


@pytest.mark.parametrize("name", MODULES)
def test_no_sys_path_edits_and_nothing_from_tests(name: str) -> None:
    tree = ast.parse((PACKAGE / f"{name}.py").read_text(), filename=f"{name}.py")
    assert not touches_sys_path(tree)
    for module in imported_names(tree):
        top = module.split(".")[0]
        assert top != "tests", f"{name} imports {module}"
        assert top not in MODULES, f"{name} imports {module}: say benchmarks.{module}"


@pytest.mark.parametrize("name", BENCHMARKS)
def test_each_benchmark_imports_and_answers_help(name: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ") and "--help" in out
    assert f"python -m benchmarks.{name}" in (module.__doc__ or ""), "its usage line"


def test_a_benchmark_runs_as_a_module_from_the_checkout(tmp_path: Path) -> None:
    """The pure one (no server), as the README runs it: its tables, exit 0, no record; under
    ``make bench`` (``$BENCH_RECORDS`` set) the same tables and one dated record of them."""
    command = [sys.executable, "-m", "benchmarks.model_vs_original", "--seeds", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != ENV})
    assert done.returncode == 0, done.stderr
    assert "(a) the original's runs vs the model" in done.stdout
    assert "0.1 CPU + GC" in done.stdout and done.stderr == ""

    kept = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, ENV: str(tmp_path)})
    assert kept.returncode == 0, kept.stderr
    [path] = tmp_path.glob("model_vs_original-*Z.json")
    record = json.loads(path.read_text())
    assert record["output"] == kept.stdout == done.stdout   # what it printed, kept whole
    assert record["command"] == "python -m benchmarks.model_vs_original --seeds 1"
    assert record["figures"]["seeds"] == 1 and len(record["figures"]["b"]) == 3


def test_make_bench_chooses_benchmarks_that_exist() -> None:
    assert set(CHOSEN) <= set(known()) == set(BENCHMARKS)
    makefile = (ROOT / "Makefile").read_text()
    assert "bench: $(BIN)/.installed\n\t$(BIN)/python -m benchmarks $(BENCH)\n" in makefile


def test_an_unknown_benchmark_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.__main__ import main
    with pytest.raises(SystemExit) as exited:
        main(["no_such_thing"])
    assert exited.value.code == 2
    assert "no such benchmark: no_such_thing" in capsys.readouterr().err


def test_the_machine_a_record_names(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD  EPYC 7B13\n\n"
                                      "processor\t: 1\nmodel name\t: AMD  EPYC 7B13\n")
    assert cpu_model(tmp_path / "cpuinfo") == "AMD EPYC 7B13"
    (tmp_path / "v1" / "cpu,cpuacct").mkdir(parents=True)
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "cgroup.controllers").write_text("cpu io memory\n")
    assert cgroup_version(tmp_path / "v1") == 1
    assert cgroup_version(tmp_path / "v2") == 2
    assert cgroup_version(tmp_path / "none") is None
    here = machine()
    assert here["cores"] == os.cpu_count() and len(here["load_average"]) == 3


FAKE_MACHINE = {"cpu": "Fake CPU", "cores": 2, "kernel": "6.1.0", "cgroup": 1,
                "load_average": [0.5, 0.4, 0.3]}


def started(hour: int) -> datetime:
    return datetime(2030, 1, 2, hour, 4, 5, tzinfo=timezone.utc)


def fake_record(directory: Path, name: str, hour: int, output: str) -> Path:
    return write_record(directory, name, {"rows": [1, 2]}, output=output,
                        command=["python", "-m", f"benchmarks.{name}"], started=started(hour),
                        before=FAKE_MACHINE)


def test_a_record_is_dated_json_named_by_the_benchmark(tmp_path: Path) -> None:
    path = fake_record(tmp_path / "results", "kernel_quota", 3, "| quota |\n")
    assert path == tmp_path / "results" / f"kernel_quota-{started(3):%Y%m%dT%H%M%S}Z.json"
    record = json.loads(path.read_text())
    assert record["benchmark"] == "kernel_quota"
    assert record["date"] == started(3).isoformat()
    assert record["machine"] == FAKE_MACHINE and len(record["load_average_after"]) == 3
    assert record["output"] == "| quota |\n" and record["figures"] == {"rows": [1, 2]}


def test_the_page_shows_the_latest_record_of_each_benchmark(tmp_path: Path) -> None:
    fake_record(tmp_path, "kernel_quota", 3, "old table\n")
    fake_record(tmp_path, "kernel_quota", 5, "| quota | p99 ms |\n|---|---|\n| 0.3 | 76 |\n")
    fake_record(tmp_path, "parallel_burn", 4, "| threads |\n")
    (tmp_path / "notes.json").write_text("[1, 2]")   # not a record: left out
    assert sorted(latest(tmp_path)) == ["kernel_quota", "parallel_burn"]

    page = tmp_path / "benchmarks.md"
    page.write_text(f"# Benchmarks\n\nintro\n\n{MARKER}\nstale\n{END}\n\n## By hand\n")
    assert write_page(page, tmp_path)
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\nintro\n\n") and text.endswith(f"{END}\n\n## By hand\n")
    assert "stale" not in text and "old table" not in text
    assert "### `benchmarks.kernel_quota`" in text and "### `benchmarks.parallel_burn`" in text
    assert "| 0.3 | 76 |" in text
    assert f"*{started(5):%Y-%m-%d %H:%M:%S} UTC, Fake CPU (2 cores), kernel 6.1.0, cgroup v1" \
        in text   # the latest record's date and machine
    assert "load average 0.50 before" in text
    assert not write_page(page, tmp_path)   # written once: the same page again

    assert rewritten("no marker here\n", latest(tmp_path)) == "no marker here\n"


def test_the_page_shows_each_record_s_tables_with_the_lines_before_them() -> None:
    printed = ("load average before: 0.1\n\n### the title\n(a) the caption\n"
               "| limit | p99 ms |\n|---|---|\n| 0.3 | 76 |\n\nbetween\n\n| b |\n|---|\n"
               "| 1 |\nthe verdict after the last table\nload average after: 0.2\n")
    assert printed_tables(printed) == (
        "load average before: 0.1\n\nthe title\n(a) the caption\n\n"
        "| limit | p99 ms |\n|---|---|\n| 0.3 | 76 |\n\nbetween\n\n| b |\n|---|\n| 1 |")
    assert printed_tables("run   p50\n0.3   5.1\n") == "```text\nrun   p50\n0.3   5.1\n```"


def test_a_superseded_benchmark_shows_where_its_record_is_not_its_tables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "old.py").write_text('"""Old."""\nSUPERSEDED_BY = "new"\n')
    (tmp_path / "new.py").write_text('"""New."""\n')
    assert superseded_by("old", tmp_path) == "new"
    assert superseded_by("new", tmp_path) is None and superseded_by("gone", tmp_path) is None
    fake_record(tmp_path, "old", 3, "| old table |\n|---|\n")
    import benchmarks.records as records

    monkeypatch.setattr(records, "superseded_by", lambda name: superseded_by(name, tmp_path))
    text = records.section(latest(tmp_path))
    assert "old table" not in text and "Superseded by `benchmarks.new`" in text
    assert "Fake CPU" not in text   # nor its machine: the record has it
    assert f"results/old-{started(3).astimezone(timezone.utc):%Y%m%dT%H%M%SZ}.json" in text
    assert superseded_by("passive_vs_live") == "advise_matrix"


def test_what_a_benchmark_measures_is_its_docstring_s_first_paragraph(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text('"""What it measures,\n  on two lines.\n\nMore."""\n')
    (tmp_path / "bare.py").write_text("x = 1\n")
    assert measures("slow", tmp_path) == "What it measures, on two lines."
    assert measures("bare", tmp_path) == "" and measures("gone", tmp_path) == ""
    assert measures("kernel_quota").startswith("What a real kernel CPU quota does")


def test_the_page_is_committed_as_the_records_write_it() -> None:
    """docs/benchmarks.md's generated part is what benchmarks/results/ and the benchmarks'
    docstrings give: ``python -m benchmarks --page-only`` rewrites it."""
    text = PAGE.read_text()
    assert MARKER in text and END in text
    assert rewritten(text, latest(RESULTS)) == text, \
        "docs/benchmarks.md is out of date: run python -m benchmarks --page-only"


def test_burn_service_starts_through_the_registry_and_stops_by_its_pid() -> None:
    with burn_service(Limit(0.5), "--max-counter", "123", backend="inprocess",
                      access_log=True) as service:
        assert service.pid is not None
        limits = httpx.get(service.base_url + "/limits", timeout=10).json()
        assert limits["inprocess"]["cpu_limit_percent"] == 50 and limits["max_counter"] == 123
        assert calibrate(service.base_url, 2.0, probe=1000, requests=3) > 0
        metrics = scrape(service.base_url)
        assert metrics["throttle_lab_burn_cpu_seconds_total"] > 0
        assert any(key.startswith("throttle_lab_http_requests_total{") for key in metrics)
        assert "GET /limits" in service.log()   # the access log is on
    assert gone(service.pid)


def test_a_service_that_cannot_be_set_is_one_line() -> None:
    with pytest.raises(SystemExit, match="at most 1 CPU"):
        with burn_service(Limit(2.0), backend="inprocess"):
            pass


def test_cluster_scale_s_thousand_pods_fit_a_two_cpu_node_s_requests() -> None:
    """benchmarks.cluster_scale pins its pods to their nodes, so each node's kubelet admits
    them against its allocatable CPU: a thousand one-pod workloads over two 2-CPU nodes ask
    at most 2 CPUs a node (at 5m each, 400 a node were admitted, the rest were OutOfcpu), the
    throttling ones come first, and every pod is labelled for the agent."""
    from benchmarks.cluster_scale import BUSY_LIMIT, RECORD_LABEL, workloads

    items = workloads(1000, 5, ["node-a", "node-b"], host_network=True)
    asked: dict[str, int] = {}
    for doc in items:
        spec = doc["spec"]["template"]["spec"]
        cpu = spec["containers"][0]["resources"]["requests"]["cpu"]
        asked[spec["nodeName"]] = asked.get(spec["nodeName"], 0) + int(cpu.removesuffix("m"))
        assert doc["spec"]["template"]["metadata"]["labels"][RECORD_LABEL[0]] == RECORD_LABEL[1]
    assert len(items) == 1000 and sorted(asked) == ["node-a", "node-b"]
    assert max(asked.values()) <= 2000, asked
    assert [d["metadata"]["name"] for d in items[:5]] == [f"busy-{i:03d}" for i in range(5)]
    assert all(d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"]
               == BUSY_LIMIT for d in items[:5])
    assert not any("hostNetwork" in d["spec"]["template"]["spec"] for d in items[:5])
