"""Names of runs and limits in file names and headings, made in one place.

A limit is a :class:`cpuquota.limit.Limit`, or None for a run without one (a baseline).
"""

from __future__ import annotations

import os

from cpuquota.limit import Limit

__all__ = ["check_file_name", "limit_tag", "limit_text", "run_name", "sweep_stem"]


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
