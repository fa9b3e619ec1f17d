"""Who spent the quota in a real JVM: Debian's Tomcat, started here on loopback in a group of
0.1 CPU (far below the share even a busy machine leaves it), serves a JSP page (the Jasper
compiler and the JIT at work). ``report`` names its thread groups, and the CPU it gives each
name is what the threads' own schedstat counters, read by the test at the run's start and
end, say."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from client.data.threads import fold_name
from client.run.cgroup_sampler import THREADS_EVERY
from tests.support import BIN, free_port, http_timing, require, require_kernel_quota

pytestmark = pytest.mark.root

CPUS = 0.1
CATALINA = Path("/usr/share/tomcat10/bin/catalina.sh")
EXAMPLES = Path("/usr/share/tomcat10-examples/examples")
PAGE = "/examples/jsp/jsp2/el/basic-arithmetic.jsp"
INSTALL = "install it with `sudo scripts/install-system-deps.sh`"


@dataclass(frozen=True)
class Tomcat:
    base_url: str
    pid: int
    group: Path


def catalina_base(where: Path, port: int) -> Path:
    """A CATALINA_BASE of its own: the packaged conf, one connector on 127.0.0.1:``port``, no
    shutdown port, the examples webapp."""
    conf = next(p for p in (Path("/etc/tomcat10"), Path("/usr/share/tomcat10/etc"))
                if (p / "server.xml").exists())
    base = where / "catalina"
    for sub in ("logs", "temp", "work", "webapps", "conf/Catalina/localhost"):
        (base / sub).mkdir(parents=True)
    for name in ("server.xml", "web.xml", "context.xml", "catalina.properties",
                 "logging.properties", "tomcat-users.xml", "jaspic-providers.xml"):
        if (conf / name).exists():
            shutil.copy(conf / name, base / "conf" / name)
    server = (base / "conf" / "server.xml").read_text()
    server = server.replace('port="8080"', f'port="{port}" address="127.0.0.1"')
    server = server.replace('<Server port="8005"', '<Server port="-1"')
    (base / "conf" / "server.xml").write_text(server)
    (base / "conf" / "Catalina" / "localhost" / "examples.xml").write_text(
        f'<Context path="/examples" docBase="{EXAMPLES}"><Resources allowLinking="true"/>'
        "</Context>\n")
    return base


@contextmanager
def tomcat_in_group(where: Path, cpus: float) -> Iterator[Tomcat]:
    """Tomcat (``catalina.sh run``) in a new group from its first instruction, started with no
    quota (at 0.1 CPU a slow machine took over 300 s) and given ``cpus`` once its examples
    answer; stopped by its pid and the group removed, also on failure."""
    from cpuquota.cgroupfs import locate_cpu_controller
    from cpuquota.limit import Limit
    from service.cgroup import create_group, empty_group, remove_group, set_quota

    port = free_port()
    base = catalina_base(where, port)
    env = dict(os.environ, CATALINA_HOME=str(CATALINA.parent.parent), CATALINA_BASE=str(base),
               CATALINA_TMPDIR=str(base / "temp"))
    group = create_group(None)
    proc: subprocess.Popen[bytes] | None = None
    try:
        with open(where / "catalina.out", "wb") as out:
            proc = subprocess.Popen(["sh", "-c", f'echo $$ > "{group}/cgroup.procs" && exec '
                                     f'"{CATALINA}" run'], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300   # a JVM with no quota starts in seconds
        while True:
            assert proc.poll() is None, (where / "catalina.out").read_text()[-2000:]
            try:
                if httpx.get(url + "/examples/index.html", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Tomcat did not answer"
            time.sleep(0.2)
        set_quota(group, locate_cpu_controller().version, Limit(cpus))
        yield Tomcat(url, proc.pid, group)
    finally:
        if proc is not None:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)   # in case a test left it stopped
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        empty_group(group)
        remove_group(group)


def schedstat(pid: int) -> dict[int, tuple[str, int]]:
    """Each live thread's folded name and CPU (ns), read by the test itself."""
    out: dict[int, tuple[str, int]] = {}
    for where in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = fold_name((where / "comm").read_text().rstrip("\n"))
            out[int(where.name)] = (name, int((where / "schedstat").read_text().split()[0]))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def process_ns(pid: int) -> int:
    """The JVM's CPU (ns), its ended threads' included: the kernel's clock for the process
    (the group holds nothing else)."""
    from client.run.process_usage import process_cpu_clock

    return time.clock_gettime_ns(process_cpu_clock(pid))


def wait_for(condition: object, what: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while not condition():   # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.mark.timeout(1200)   # 120 JSP requests at 0.1 CPU: over 300 s on a slow machine
def test_the_report_names_the_jvms_threads_with_their_kernel_counters(tmp_path: Path) -> None:
    """The JVM is stopped (SIGSTOP) while the test and the tool take their first readings, and
    again once the last request was answered: the tool's last reading may come just before
    that, so a name may differ by what the group can use between two of its readings (the
    quota's share of ``THREADS_EVERY``), besides what the tool did not see at all."""
    require_kernel_quota()
    require(CATALINA.exists() and EXAMPLES.is_dir(), f"tomcat10 and tomcat10-examples are not "
            f"installed: {INSTALL}")
    requests = 120
    raw = tmp_path / "raw-data"
    with tomcat_in_group(tmp_path, CPUS) as tomcat:
        os.kill(tomcat.pid, signal.SIGSTOP)
        before, usage_before = schedstat(tomcat.pid), process_ns(tomcat.pid)
        run = subprocess.Popen(
            [str(BIN / "http-timing"), "--url", tomcat.base_url + PAGE, "--requests",
             str(requests), "--concurrency", "2", "--cgroup", f"pid:{tomcat.pid}",
             # at 0.1 CPU the JSP's first compile may take longer than the default 30 s a
             # request: this run is about the threads' counters, not latency
             "--timeout", "600", "--name", "jvm", "--quiet", "--no-plot"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            threads_csv = raw / "jvm.threads.csv"
            wait_for(lambda: threads_csv.exists() and "(total)" in threads_csv.read_text(),
                     "the tool's first reading of the threads")
            os.kill(tomcat.pid, signal.SIGCONT)
            wait_for(lambda: (raw / "jvm.csv").exists() and
                     len((raw / "jvm.csv").read_text().splitlines()) > requests,
                     "the run's last request")
            os.kill(tomcat.pid, signal.SIGSTOP)
            after, usage_after = schedstat(tomcat.pid), process_ns(tomcat.pid)
            _out, err = run.communicate(timeout=120)
        finally:
            if run.poll() is None:
                run.terminate()
                run.communicate()
            os.kill(tomcat.pid, signal.SIGCONT)
    assert run.returncode == 0, (err, _out[-2000:])
    data = json.loads(http_timing("report", "raw-data/jvm.csv", "--json", cwd=tmp_path).stdout)
    by_name = {entry["name"]: entry for entry in data["cpu_by_thread"]}
    # the JVM's thread groups: the JIT's compilers, the connector's threads, the VM's own
    assert any(name.startswith(("C1 Compiler", "C2 Compiler")) for name in by_name), by_name
    assert any(name.startswith("http-nio-") for name in by_name), by_name

    # what each name's threads used by their own counters (threads that ended are the
    # tool's "java (ended threads)"; the test leaves their names out)
    spent: dict[str, int] = {}
    ended: set[str] = {name for tid, (name, _ns) in before.items() if tid not in after}
    for tid, (name, ns) in after.items():
        spent[name] = spent.get(name, 0) + ns - before.get(tid, (name, 0))[1]
    seen_by_tool = sum(entry["cpu_ns"] for entry in data["cpu_by_thread"])
    unseen = (usage_after - usage_before) - seen_by_tool   # the readings' edges
    grain = max(unseen, 0) + CPUS * THREADS_EVERY * 1e9   # and one reading's worth at most
    for name, entry in by_name.items():
        if name in spent and name not in ended:
            assert entry["cpu_ns"] == pytest.approx(spent[name], abs=grain), name
    assert sum(entry["share"] for entry in by_name.values()) == pytest.approx(1.0)
    assert data["cgroup"]["nr_throttled"] > 0
    text = http_timing("report", "raw-data/jvm.csv", cwd=tmp_path).stdout
    top = data["cpu_by_thread"][0]["name"]
    assert f"cpu by thread: {top} " in text
