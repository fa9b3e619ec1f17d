"""benchmarks/: a package of modules run as ``python -m benchmarks.NAME``, on one support
module (benchmarks.support). Each benchmark imports and answers ``--help``; none edits
``sys.path`` or imports from ``tests``; the support module starts burn-service through the
client's targets registry and stops it by its pid. (The benchmarks' figures are not asserted
here: they are measured by running them, on a quiet machine.)"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from benchmarks.support import burn_service, calibrate, scrape
from cpuquota.limit import Limit
from tests.support import gone

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "benchmarks"
NOT_BENCHMARKS = {"__init__", "support", "burner_server"}
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


def test_a_benchmark_runs_as_a_module_from_the_checkout() -> None:
    """The pure one (no server), as the README runs it: its tables, exit 0."""
    done = subprocess.run([sys.executable, "-m", "benchmarks.model_vs_original", "--seeds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "(a) the original's runs vs the model" in done.stdout
    assert "0.1 CPU + GC" in done.stdout and done.stderr == ""


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
