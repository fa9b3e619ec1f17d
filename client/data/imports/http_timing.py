"""http-timing's own runs: its CSV (``<name>.csv``, with ``<name>.json`` beside it when there)
or the original script's text lines; any file a run-file reader (``client.data.readers``)
recognises. A run made without ``--cgroup`` (from a laptop) is marked afterwards from the
service's timeline (``record``'s, or the node agent's).

Times: ``start_ns`` counts from the run's zero. The run's JSON says where that zero is on the
wall clock: ``clock.zero_epoch_ns`` (read at the zero itself), else ``started_at`` (taken
before the warm-up: tens of ms early; the clock check says by how much). Without either the
starts are relative and need ``--start``. Each request is kept whole (scheduled send, server
timings, replica, target); only the throttling columns are the import's.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

from client.data.files import read_run
from client.data.imports.base import EPOCH, RELATIVE, Imported, ImportedRequest
from client.data.metadata import RunMetadata
from client.data.readers import READERS

__all__ = ["HttpTimingRun", "run_zero_epoch_ns"]

def run_zero_epoch_ns(metadata: RunMetadata) -> tuple[int | None, str]:
    """Where the run's zero is on the wall clock (Unix ns), and how it is known; None (and
    why) when the run's JSON does not say."""
    clock = metadata.clock or {}
    zero = clock.get("zero_epoch_ns")
    if isinstance(zero, int) and not isinstance(zero, bool):
        return zero, "by the run's clock (its zero on the wall clock, read at the zero)"
    if metadata.started_at:
        try:
            started = datetime.fromisoformat(metadata.started_at)
        except ValueError:
            started = None
        if started is not None and started.tzinfo is not None:
            return (round(started.timestamp() * 1e6) * 1000,
                    "by the run's started_at (taken before its warm-up: tens of ms early; "
                    "see the clock check)")
    return None, "no clock in its JSON (or no JSON beside it)"


class HttpTimingRun:
    name = "http-timing"
    description = ("http-timing's own run: its CSV (and NAME.json beside it) or the original "
                   "script's text (start: the run's clock, on the wall clock by its JSON)")

    def recognises(self, head: bytes) -> bool:
        return any(reader.recognises(head) for reader in READERS.values())

    def read(self, path: Path) -> Imported:
        run = read_run(path)
        zero, how = run_zero_epoch_ns(run.metadata)
        base = 0 if zero is None else zero
        requests = [ImportedRequest(r.start_ns + base, r.latency_ns, r.status, r.error,
                                    kept=replace(r, cgroup_throttled_ns=None, cgroup_nr_throttled=None,
                                                 cgroup_held_ns=None)) for r in run.records]
        return Imported(self.name, RELATIVE if zero is None else EPOCH, requests,
                        url=run.metadata.url, notes=[f"{path}: placed {how}"])
