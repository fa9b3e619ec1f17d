"""A run's ``--cgroup k8s:NS/POD`` for a pod whose group is not on this machine: once the run
is over, the pod's timeline for the run's window is fetched from its node's agent through the
API server's proxy (``client.run.agent_timeline``) and the requests are marked as ``import``
marks them (``client.run.importing.mark_imported``). The timeline is kept as the run's
``<name>.cgroup.csv`` on the run's own clock, from the last row at or before the first request
to the first at or after the last answer (:func:`across`: a run right after another, as
advise's, does not count the other's tail); the metadata's ``cgroup`` is the agent's, with
``source`` naming the agent and the node.

Several pods (a Deployment's, resized alike): each pod's timeline from its own node's agent,
cut across the run, then summed into one (:func:`mark_through_agents`,
``client.run.timeline_sum``), as a run here samples the pods' groups as one sum.

The agent writes its rows every 500 ms: the fetch waits (at most ``WAIT_S``) for a row past
the run's last answer, so the last requests' throttling is in the window.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from client.data.files import Run, write_metadata, write_rows, write_whole
from client.data.record import RawDataError
from client.data.timeline import (CgroupSample, read_timeline, timeline_columns,
                                  timeline_path, timeline_row)
from client.data.timeline_meta import TimelineMetadata, read_timeline_metadata, timeline_meta_path
from client.run.agent_timeline import AgentLink, AgentTimelineError
from client.run.importing import mark_imported
from client.run.timeline_sum import sum_timelines, whole_past

__all__ = ["WAIT_S", "across", "mark_through_agent", "mark_through_agents",
           "shift_timeline_text", "summed_cgroup"]

WAIT_S = 10.0        # how long to wait for the agent's rows to pass the run's end
MARGIN_NS = 3_000_000_000   # the window fetched begins this far before the first request
# (an idle pod's rows are a second apart: one before the run is in it)


def shift_timeline_text(text: str, shift_ns: int) -> str:
    """A timeline CSV with every row's ``t_ns`` (its first column) moved by ``shift_ns``."""
    lines = text.splitlines()
    out = lines[:1]
    for line in lines[1:]:
        if line.strip():
            t, _, rest = line.partition(",")
            out.append(f"{int(t) + shift_ns},{rest}")
    return "\n".join(out) + "\n"


def across(text: str, first_ns: int, last_ns: int) -> str:
    """A timeline CSV cut to the rows across [first_ns, last_ns] (its own clock): from the last
    row at or before ``first_ns`` to the first at or after ``last_ns`` (from its first row,
    to its last, where there is no such row)."""
    lines = text.splitlines()
    rows = [(int(line.partition(",")[0]), line) for line in lines[1:] if line.strip()]
    start = max((i for i, (t, _) in enumerate(rows) if t <= first_ns), default=0)
    end = min((i for i, (t, _) in enumerate(rows) if t >= last_ns), default=len(rows) - 1)
    return "\n".join(lines[:1] + [line for _, line in rows[start:end + 1]]) + "\n"


def _fetch(link: AgentLink, into: Path, lo_ns: int, hi_ns: int
           ) -> tuple[Path, TimelineMetadata, list[CgroupSample]]:
    """The window from ``lo_ns`` (Unix ns), once a row reaches ``hi_ns`` (or ``WAIT_S`` on)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        path = link.window(into, lo_ns / 1e9, None)
        meta = read_timeline_metadata(timeline_meta_path(path))
        if meta is None or meta.clock is None:
            raise AgentTimelineError(f"the agent {link.namespace}/{link.agent} sent no clock "
                                     "with the timeline")
        samples = read_timeline(path)
        if (samples and samples[-1].t_ns + meta.clock.zero_epoch_ns >= hi_ns) or \
                time.monotonic() > deadline:
            return path, meta, samples
        time.sleep(0.25)


def _across_run(link: AgentLink, run: Run, into: Path) -> tuple[str, TimelineMetadata]:
    """The pod's timeline across the run's requests, on the run's clock, and its metadata."""
    zero = (run.metadata.clock or {}).get("zero_epoch_ns")
    if not isinstance(zero, int) or not run.records:
        raise RawDataError(f"{run.path}: no request, or no clock to place them on the "
                           "agent's timeline")
    first = zero + min(r.start_ns for r in run.records)
    last = zero + max(r.end_ns for r in run.records)
    path, meta, _ = _fetch(link, into, first - MARGIN_NS, last)
    assert meta.clock is not None
    text = across(shift_timeline_text(path.read_text(), meta.clock.zero_epoch_ns - zero),
                  first - zero, last - zero)
    return text, meta


def _agent(link: AgentLink) -> str:
    return f"the node agent {link.namespace}/{link.agent} on node {link.node}"


def _kept(run: Run, text: str, meta: TimelineMetadata, cgroup: dict[str, Any]) -> Run:
    """The run with its requests marked from the timeline ``text`` (kept as its
    ``<name>.cgroup.csv``), its files rewritten."""
    kept = timeline_path(run.path)
    try:
        write_whole(kept, text)
        timeline = read_timeline(kept)
        marked, outside = mark_imported(run.records, timeline, meta)
        run.metadata.cgroup = {**cgroup, "outside_timeline": outside}
        write_rows(run.path, marked)
        write_metadata(run.path.with_suffix(".json"), run.metadata)
    except OSError as exc:
        raise RawDataError(f"cannot write the marked run in {run.path.parent}: "
                           f"{exc.strerror or exc}") from None
    return Run(run.path, marked, run.metadata, timeline)


def _summed_level(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """One quota level of several pods as that of their sum: the quota and CPUs summed."""
    quotas = [q for q in (level.get("quota_us") for level in levels) if isinstance(q, int)]
    quota = sum(quotas) if len(quotas) == len(levels) else None
    period = levels[0].get("period_us")
    cpus = (round(quota / period, 6) if quota is not None and isinstance(period, int)
            and period > 0 else None)
    out = {**levels[0], "quota_us": quota, "cpus": cpus}
    if isinstance(out.get("group"), str):
        out["group"] = f"{out['group']} (+{len(levels) - 1} pod(s): the sum)"
    return out


def summed_cgroup(pods: list[dict[str, Any]]) -> dict[str, Any]:
    """Several pods' timeline ``cgroup`` metadata (the agents') as that of their sum, as
    ``client.run.service_group.combine_pods`` makes it: each level's quota summed (two pods
    at 0.1 CPU: 0.2 CPU), the groups named as the sum, every pod's path in ``paths``."""
    out = _summed_level(pods)
    if isinstance(out.get("quota_group"), str):
        out["quota_group"] = f"{out['quota_group']} (+{len(pods) - 1} pod(s): the sum)"
    levels = [c.get("levels") for c in pods]
    lists = [lv for lv in levels if isinstance(lv, list)]
    count = len(lists[0]) if lists else 0
    alike = len(lists) == len(pods) and all(len(lv) == count for lv in lists)
    out["levels"] = [_summed_level([lv[k] for lv in lists]) for k in range(count)] if alike \
        else []
    out["paths"] = [c.get("path") for c in pods]
    out["pressure"] = False   # a stall summed over groups is no group's pressure
    return out


def mark_through_agent(link: AgentLink, run: Run) -> Run:
    """The run with its requests marked from the agent's timeline of the pod, its files
    rewritten; ``AgentTimelineError`` when the timeline cannot be had, ``RawDataError`` when
    the run has no clock or the files cannot be written."""
    with tempfile.TemporaryDirectory(prefix="http-timing-agent-") as tmp:
        text, meta = _across_run(link, run, Path(tmp))
    return _kept(run, text, meta, {
        **(meta.cgroup or {}), "spec": str(link.ref),
        "source": f"{_agent(link)}, through the API server's proxy"})


def mark_through_agents(spec: str, links: Sequence[AgentLink], run: Run) -> Run:
    """The run with its requests marked from the sum of several pods' timelines (``spec``:
    the workload they make up), each pod's from its own node's agent and cut across the run
    (``client.run.timeline_sum``); errors as :func:`mark_through_agent`."""
    timelines, metas = [], []
    with tempfile.TemporaryDirectory(prefix="http-timing-agent-") as tmp:
        for k, link in enumerate(links):
            text, meta = _across_run(link, run, Path(tmp) / str(k))
            cut = Path(tmp) / f"{k}.cgroup.csv"
            write_whole(cut, text)
            timelines.append(read_timeline(cut))
            metas.append(meta)
    end = max(r.end_ns for r in run.records)   # on the run's clock, as the rows are
    summed = whole_past(sum_timelines(timelines), end)
    if not summed:
        raise AgentTimelineError(f"{spec}: a pod's agent has no row across the run")
    header = timeline_columns(False, len(summed[0].levels), bool(summed[0].quotas))
    text = (",".join(header) + "\n"
            + "".join(timeline_row(s) for s in summed))
    agents = ", ".join(_agent(link) for link in links)
    return _kept(run, text, metas[0], {
        **summed_cgroup([meta.cgroup or {} for meta in metas]),
        "spec": spec, "pods": [str(link.ref) for link in links],
        "source": f"the sum over {len(links)} pods: {agents}, through the API server's proxy"})
