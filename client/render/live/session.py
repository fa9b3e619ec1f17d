"""The live page around a command's work: the group alone for ``watch --live`` and
``record --live`` (:func:`watched_live`: sampled for the page, its last minute), and a run's
end (:func:`show_live_end`: its final picture and files).

Each takes the page or None (no ``--live``: nothing is done), so a command calls them the same
with or without one::

    with live_page(opts) as live:                         # client.commands.common
        recorded = measure(spec, observers=observers, watcher=live).recorded
        ...                                               # the report, the picture
        show_live_end(live, recorded, report.detection, picture)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from client.analysis.detect import Detection
from client.data.metadata import RunMetadata
from client.render.live.server import LivePage
from client.run.cgroup_sampler import DEFAULT_INTERVAL, CgroupSampler
from client.run.service_group import ServiceGroup
from client.run.record import RecordedRun

__all__ = ["show_live_end", "watched_live"]


@contextmanager
def watched_live(live: LivePage | None, target: ServiceGroup, command: str = "watch",
                 files: Sequence[Path] = ()) -> Iterator[None]:
    """``watch --live`` and ``record --live``: the group sampled for the page (as a run's
    ``--cgroup`` is, many times a period, no file) while inside; the page's end, with
    ``files``' names (``record``'s timeline and metadata), when left. A group whose counters
    cannot be read is a ``ServiceGroupError`` (one line) before anything is shown."""
    if live is None:
        yield
        return
    sampler = CgroupSampler(target, None, DEFAULT_INTERVAL)
    sampler.start()
    live.run_started(RunMetadata(name=f"{command} {target.group}",
                                 command=["http-timing", command],
                                 cgroup={**target.to_metadata(), "usage": sampler.usage}),
                     sampler.samples)   # the sampler keeps its usage note up to date
    try:
        yield
    finally:
        sampler.stop()
        live.show_end([], None, list(files))


def show_live_end(live: LivePage | None, recorded: RecordedRun, detection: Detection | None,
                  picture: Path | None) -> None:
    """The run's final picture and its files' names on the page (nothing without one)."""
    if live is not None:
        live.show_end(recorded.run.records, detection, recorded.files(picture),
                      interrupted=recorded.interrupted, picture=picture)
