"""A run's ``--cgroup k8s:NS/POD`` for a pod whose group is not on this machine: once the run
is over, the pod's timeline for the run's window is fetched from its node's agent through the
API server's proxy (``client.run.agent_timeline``) and the requests are marked as ``import``
marks them (``client.run.importing.mark_imported``). The timeline is kept as the run's
``<name>.cgroup.csv`` on the run's own clock, from the last row at or before the first request
to the first at or after the last answer (:func:`across`: a run right after another, as
advise's, does not count the other's tail); the metadata's ``cgroup`` is the agent's, with
``source`` naming the agent and the node.

The agent writes its rows every 500 ms: the fetch waits (at most ``WAIT_S``) for a row past
the run's last answer, so the last requests' throttling is in the window.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from client.data.files import Run, rewrite_rows, write_metadata
from client.data.record import RawDataError
from client.data.timeline import CgroupSample, read_timeline, timeline_path
from client.data.timeline_meta import TimelineMetadata, read_timeline_metadata, timeline_meta_path
from client.run.agent_timeline import AgentLink, AgentTimelineError
from client.run.importing import mark_imported

__all__ = ["WAIT_S", "across", "mark_through_agent", "shift_timeline_text"]

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


def mark_through_agent(link: AgentLink, run: Run) -> Run:
    """The run with its requests marked from the agent's timeline of the pod, its files
    rewritten; ``AgentTimelineError`` when the timeline cannot be had, ``RawDataError`` when
    the run has no clock or the files cannot be written."""
    zero = (run.metadata.clock or {}).get("zero_epoch_ns")
    if not isinstance(zero, int) or not run.records:
        raise RawDataError(f"{run.path}: no request, or no clock to place them on the "
                           "agent's timeline")
    first = zero + min(r.start_ns for r in run.records)
    last = zero + max(r.end_ns for r in run.records)
    with tempfile.TemporaryDirectory(prefix="http-timing-agent-") as tmp:
        path, meta, _ = _fetch(link, Path(tmp), first - MARGIN_NS, last)
        assert meta.clock is not None
        text = across(shift_timeline_text(path.read_text(), meta.clock.zero_epoch_ns - zero),
                      first - zero, last - zero)
    kept = timeline_path(run.path)
    try:
        kept.write_text(text)
        timeline = read_timeline(kept)
        marked, outside = mark_imported(run.records, timeline, meta)
        cgroup = {**(meta.cgroup or {}), "spec": str(link.ref),
                  "source": f"the node agent {link.namespace}/{link.agent} on node "
                            f"{link.node}, through the API server's proxy",
                  "outside_timeline": outside}
        run.metadata.cgroup = cgroup
        rewrite_rows(run.path, marked)
        write_metadata(run.path.with_suffix(".json"), run.metadata)
    except OSError as exc:
        raise RawDataError(f"cannot write the marked run in {run.path.parent}: "
                           f"{exc.strerror or exc}") from None
    return Run(run.path, marked, run.metadata, timeline)
