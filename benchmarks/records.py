"""Dated benchmark records: written as JSON under ``benchmarks/results/``, shown in
docs/benchmarks.md.

A record is one run of one benchmark: ``benchmarks/results/<name>-<UTC start>.json`` with the
date, the command, the commit, the machine (CPU model from ``/proc/cpuinfo``, cores, kernel,
cgroup version, load average before and after), what it printed and its figures. The page's
part between ``<!-- generated: benchmark records -->`` and ``<!-- end generated -->`` shows the
latest record of each benchmark (:func:`write_page`): what the benchmark measures (its module's
docstring, first paragraph), the record's date, machine and command, and the tables it printed
(the whole output stays in the record); for a benchmark another supersedes
(:func:`superseded_by`), only where its latest record is. Standard library only.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["END", "ENV", "MARKER", "PAGE", "RESULTS", "cgroup_version", "cpu_model",
           "latest", "machine", "measures", "printed_tables", "record_path", "rewritten",
           "section", "superseded_by", "write_page", "write_record"]

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAGE = HERE.parent / "docs" / "benchmarks.md"
ENV = "BENCH_RECORDS"   # the directory records go to; set by ``python -m benchmarks``
MARKER = "<!-- generated: benchmark records -->"
END = "<!-- end generated -->"
STAMP = "%Y%m%dT%H%M%SZ"


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The first ``model name`` of ``/proc/cpuinfo`` (else the platform's processor)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or "unknown"


def cgroup_version(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """2 for the unified hierarchy, 1 for v1's controllers, None without cgroups."""
    if (root / "cgroup.controllers").exists():
        return 2
    if (root / "cpu").exists() or (root / "cpu,cpuacct").exists():
        return 1
    return None


def machine() -> dict[str, Any]:
    """Where a benchmark runs: CPU model, cores, kernel, cgroup version, load average now."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "kernel": platform.release(),
            "cgroup": cgroup_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def record_path(directory: Path, name: str, started: datetime) -> Path:
    """``<directory>/<name>-<UTC start>.json``."""
    return directory / f"{name}-{started.astimezone(timezone.utc).strftime(STAMP)}.json"


def write_record(directory: Path, name: str, figures: Mapping[str, Any], *, output: str,
                 command: Sequence[str], started: datetime,
                 before: Mapping[str, Any]) -> Path:
    """The run's record written (``before``: :func:`machine` when it started); its path."""
    ended = datetime.now(timezone.utc)
    record = {"benchmark": name,
              "date": started.astimezone(timezone.utc).isoformat(timespec="seconds"),
              "ended": ended.isoformat(timespec="seconds"),
              "command": " ".join(command), "commit": _commit(),
              "machine": dict(before),
              "load_average_after": [round(x, 2) for x in os.getloadavg()],
              "output": output, "figures": dict(figures)}
    directory.mkdir(parents=True, exist_ok=True)
    path = record_path(directory, name, started)
    path.write_text(json.dumps(record, indent=1, default=_plain) + "\n")
    return path


def _plain(value: Any) -> Any:
    """A figure JSON does not know: a dataclass as its fields, anything else as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def latest(directory: Path) -> dict[str, dict[str, Any]]:
    """The latest record of each benchmark in ``directory``, by name (a file that does not read
    as a record is left out)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            name, date = record["benchmark"], record["date"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if name not in out or date >= out[name]["date"]:
            out[name] = record
    return out


def _date(record: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(record["date"]))


def _when_and_where(record: Mapping[str, Any]) -> str:
    m = record.get("machine", {})
    date = str(record["date"]).replace("T", " ").replace("+00:00", " UTC")
    cgroup = f"cgroup v{m['cgroup']}" if m.get("cgroup") else "no cgroup"
    load = m.get("load_average") or []
    after = record.get("load_average_after") or []
    said = [f"*{date}, {m.get('cpu', 'unknown CPU')} ({m.get('cores')} cores), kernel "
            f"{m.get('kernel')}, {cgroup}"]
    if load:
        said.append(f", load average {load[0]:.2f} before")
    if after:
        said.append(f" and {after[0]:.2f} after")
    if record.get("commit"):
        said.append(f", commit {record['commit']}")
    return "".join(said) + ".*"


def measures(name: str, package: Path = HERE) -> str:
    """What benchmark ``name`` measures: the first paragraph of its module's docstring, on one
    line ("" for a module that is not there or has none)."""
    try:
        doc = ast.get_docstring(ast.parse((package / f"{name}.py").read_text()))
    except (OSError, SyntaxError, ValueError):
        return ""
    return " ".join((doc or "").split("\n\n")[0].split())


def superseded_by(name: str, package: Path = HERE) -> str | None:
    """The benchmark that supersedes ``name``: its module's ``SUPERSEDED_BY = "OTHER"`` (None
    where it says none, or is not there). The page then shows where its latest record is, not
    its tables."""
    try:
        tree = ast.parse((package / f"{name}.py").read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "SUPERSEDED_BY"
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            return node.value.value
    return None


def printed_tables(output: str) -> str:
    """What a benchmark printed, up to its last Markdown table, as Markdown: each table a block
    of its own, the lines before it as text (a heading's ``#`` left out). Output without a
    table is shown whole, as text."""
    lines = output.strip("\n").splitlines()
    last = max((i for i, line in enumerate(lines) if line.startswith("|")), default=None)
    if last is None:
        return "\n".join(["```text", *lines, "```"])
    blocks: list[list[str]] = []
    for line in lines[:last + 1]:
        kind = "table" if line.startswith("|") else "text"
        if not line.strip():
            blocks.append([])
        elif blocks and blocks[-1] and blocks[-1][0].startswith("|") == (kind == "table"):
            blocks[-1].append(line if kind == "table" else line.lstrip("#").strip())
        else:
            blocks.append([line if kind == "table" else line.lstrip("#").strip()])
    return "\n\n".join("\n".join(block) for block in blocks if block)


def section(records: Mapping[str, Mapping[str, Any]]) -> str:
    """The generated part: per benchmark (by name), what it measures, its latest record's date,
    machine and command, and the tables it printed."""
    if not records:
        return "No records yet: `make bench` writes them."
    out: list[str] = []
    for name in sorted(records):
        record = records[name]
        said = measures(name)
        out += [f"### `benchmarks.{name}`", "", *([said, ""] if said else [])]
        successor = superseded_by(name)
        if successor:
            out += [f"Superseded by `benchmarks.{successor}`; its latest record "
                    f"`{RESULTS.name}/{record_path(Path(), name, _date(record)).name}`.", ""]
        else:
            out += [_when_and_where(record), "", f"`{record.get('command', '')}`", "",
                    printed_tables(str(record.get("output", ""))), ""]
    return "\n".join(out).strip("\n")


def rewritten(text: str, records: Mapping[str, Mapping[str, Any]]) -> str:
    """``text`` with the part after :data:`MARKER` (to its end marker, or a new one) made from
    ``records``; text without the marker is returned as it is."""
    start = text.find(MARKER)
    if start < 0:
        return text
    head = start + len(MARKER)
    end = text.find(END, head)
    tail = text[end + len(END):] if end >= 0 else text[head:]
    return f"{text[:head]}\n\n{section(records)}\n\n{END}{tail}"


def write_page(page: Path = PAGE, directory: Path = RESULTS) -> bool:
    """docs/benchmarks.md's generated part rewritten from the latest records; True if it
    changed."""
    text = page.read_text()
    now = rewritten(text, latest(directory))
    if now != text:
        page.write_text(now)
    return now != text

