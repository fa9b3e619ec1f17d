"""Names of runs and limits in file names and headings, made in one place.

A limit is a :class:`cpuquota.limit.Limit`, or None for a run without one (a baseline).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from cpuquota.limit import Limit

__all__ = ["check_file_name", "compare_stem", "limit_tag", "limit_text", "run_name",
           "short_names", "sweep_stem"]

COMPARE_STEM_MAX = 80   # characters of a comparison's default file name, before its suffix


def limit_tag(limit: Limit | None) -> str:
    """``0.3``, ``1``, ``none``: a limit in file names and the ``--cpus`` list."""
    return "none" if limit is None else f"{limit.cpus:g}"


def limit_text(limit: Limit | None) -> str:
    """``0.3 CPU``, or ``no limit``: a run's limit in tables and headings."""
    return "no limit" if limit is None else f"{limit.cpus:g} CPU"


def sweep_stem(prefix: str, backend: str) -> str:
    """``<prefix>-<backend>`` (``<backend>`` without a prefix)."""
    return f"{prefix}-{backend}" if prefix else backend


def run_name(prefix: str, backend: str, limit: Limit | None) -> str:
    """``<prefix>-<backend>-<cpus>``, e.g. ``demo-kernel-0.3`` (``kernel-0.3`` without one)."""
    return f"{sweep_stem(prefix, backend)}-{limit_tag(limit)}"


def check_file_name(name: str, *, prefix: bool = False) -> str | None:
    """Why ``name`` cannot be a plain file name (a path, ``.``, ``..``), or None when it can.
    A prefix may be empty."""
    if os.sep in name or (os.altsep and os.altsep in name) or name in (".", ".."):
        return f"--name must be a plain file name{' prefix' if prefix else ''} (got {name!r})"
    if not prefix and name == "":
        return f"--name must be a plain file name (got {name!r})"
    return None


def short_names(names: Sequence[str]) -> list[str]:
    """The names without the prefix they all share (up to a ``-``):
    ``demo-20261125-093947-kernel-1``, ``...-0.3`` -> ``1``, ``0.3``; the names as they are
    when they share none or differ only there."""
    if len(names) < 2:
        return list(names)
    common = names[0]
    for name in names[1:]:
        while not name.startswith(common):
            common = common[:-1]
    cut = common.rfind("-") + 1
    short = [name[cut:] for name in names]
    return short if cut and all(short) and len(set(short)) == len(short) else list(names)


def compare_stem(stems: Sequence[str]) -> str:
    """``compare-<stems>``: the default name of a comparison of runs, their shared prefix once
    (``compare-s-inprocess-1-0.3-0.1``); when that is long, the first run and how many more
    (``compare-a-and-11-more``)."""
    short = short_names(stems)
    prefix = stems[0][:len(stems[0]) - len(short[0])] if stems else ""
    stem = "compare-" + prefix + "-".join(short)
    if len(stem) <= COMPARE_STEM_MAX or len(stems) < 2:
        return stem[:COMPARE_STEM_MAX]
    return f"compare-{stems[0][:COMPARE_STEM_MAX - 30]}-and-{len(stems) - 1}-more"
