"""The packaging for real: a fresh venv with a plain ``pip install .`` (no extras) is the client
and the core, without the web server; burn-service then says in one line which extra to install.

The venv is made here from a copy of the sources (so the checkout gets no build/ or egg-info),
shared by the tests of this module and removed at the end. pip uses its cache and the index
(CI has PyPI); without them it skips on a laptop and fails under CI=true.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT, require, require_kernel_quota

pytestmark = pytest.mark.timeout(600)

SOURCES = ("pyproject.toml", "README.md", "cpuquota", "service", "client")
OFFLINE = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
           "No matching distribution found")
RUN = "kernel-0.3"  # a committed run; its report is pinned in tests/golden/


@dataclass(frozen=True)
class Venv:
    bin: Path

    def run(self, *argv: str, cwd: Path = ROOT,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return subprocess.run([str(self.bin / argv[0]), *argv[1:]], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def client_venv() -> Iterator[Venv]:
    folder = Path(tempfile.mkdtemp(prefix="throttle-lab-packaging-"))
    try:
        src = folder / "src"
        src.mkdir()
        for name in SOURCES:
            path = ROOT / name
            if path.is_dir():
                shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, src / name)
        t0 = time.monotonic()
        # No pip inside (ensurepip is slow): this Python's pip installs into it (--python),
        # without byte-compiling (several times faster here; what is installed is the same).
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")],
                       check=True, capture_output=True, timeout=120)
        venv = Venv(folder / "venv" / "bin")
        pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv.bin / "python"),
                              "install", "--quiet", "--disable-pip-version-check", "--no-compile",
                              str(src)], cwd=folder, capture_output=True, text=True, timeout=540)
        output = pip.stdout + pip.stderr
        if pip.returncode != 0:
            require(not any(sign in output for sign in OFFLINE),
                    f"pip install . needs the package index or pip's cache: {output[-300:]}")
        assert pip.returncode == 0, output
        print(f"\nfresh venv with pip install . (no extras): {time.monotonic() - t0:.1f} s")
        yield venv
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_plain_install_is_the_client_without_the_web_server(client_venv: Venv) -> None:
    have = client_venv.run("python", "-c", "import importlib.util as u, sys; print(' '.join("
                           "m for m in sys.argv[1:] if u.find_spec(m)))", "httpx", "numpy",
                           "matplotlib", "rich", "cpuquota", "client", "fastapi", "uvicorn",
                           "prometheus_client", "jinja2", "starlette")
    assert have.stdout.split() == ["httpx", "numpy", "matplotlib", "rich", "cpuquota", "client"]
    fastapi = client_venv.run("python", "-c", "import fastapi")
    assert fastapi.returncode != 0
    assert "ModuleNotFoundError: No module named 'fastapi'" in fastapi.stderr


def test_http_timing_help_and_report_on_a_committed_run(client_venv: Venv) -> None:
    help_ = client_venv.run("http-timing", "--help")
    assert help_.returncode == 0, help_.stderr
    assert "usage: http-timing" in help_.stdout
    report = client_venv.run("http-timing", "report", f"raw-data/{RUN}.csv")
    assert report.returncode == 0, report.stderr
    assert report.stdout == (ROOT / "tests" / "golden" / f"report-{RUN}.txt").read_text()


@pytest.mark.parametrize("args", [(), ("--cpus", "0.3")])
def test_burn_service_says_in_one_line_which_extra_to_install(client_venv: Venv,
                                                              args: tuple[str, ...]) -> None:
    result = client_venv.run("burn-service", *args)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("burn-service needs the service extra (not installed: fastapi, "
                               "uvicorn, prometheus-client, jinja2)")
    assert "pip install '.[service]'" in lines[0]


@pytest.mark.parametrize("command", ["sweep", "advise"])
def test_sweep_and_advise_relay_the_line_when_burn_service_lacks_its_extra(
        client_venv: Venv, command: str, tmp_path: Path) -> None:
    """They start burn-service as a process: its one line reaches the user, no traceback."""
    args = ["--cpus", "0.5"] if command == "sweep" else ["--p99", "50"]
    result = client_venv.run("http-timing", command, "--backend", "inprocess", "--requests", "5",
                             *args, "--data-dir", str(tmp_path / "raw-data"),
                             "--pictures-dir", str(tmp_path / "pictures"), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("http-timing: the service exited with 1 before it was healthy: ")
    assert "burn-service needs the service extra" in lines[0]
    assert "pip install '.[service]'" in lines[0]


def test_cpu_quota_needs_no_extra(client_venv: Venv) -> None:
    """cpu-quota is the standard library and cpuquota: it works from a plain install."""
    help_ = client_venv.run("cpu-quota", "--help")
    assert help_.returncode == 0, help_.stderr
    assert "usage: cpu-quota" in help_.stdout
    require_kernel_quota()
    run = client_venv.run("cpu-quota", "--cpus", "0.5", "--", "python", "-c", "print('inside')")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "inside\n"
    assert "removed" in run.stderr


def make_plan(target: str, venv: Path) -> list[str]:
    """The commands `make TARGET` runs on a fresh clone (no venv yet), printed, not run."""
    require(shutil.which("make") is not None, "make is not installed")
    plan = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
                          capture_output=True, text=True, timeout=30, check=True)
    return plan.stdout.splitlines()


def project_installs(plan: list[str]) -> list[str]:
    """The extras of each `pip install -e '.[EXTRAS]'` in the plan, in order."""
    return re.findall(r"pip install .*-e '\.\[([a-z,]+)\]'", "\n".join(plan))


def test_make_demo_installs_the_client_and_the_service_only(tmp_path: Path) -> None:
    assert project_installs(make_plan("demo", tmp_path / "venv")) == ["service"]
    assert not (tmp_path / "venv").exists()  # -n: nothing was made


@pytest.mark.parametrize("target", ["test", "venv", "docs", "lint", "kube-node"])
def test_the_other_targets_add_the_test_extras_on_top_of_the_demos(tmp_path: Path,
                                                                   target: str) -> None:
    installs = project_installs(make_plan(target, tmp_path / "venv"))
    assert installs[:2] == ["service", "service,test"], installs
