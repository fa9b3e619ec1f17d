"""Instants as the tool writes them: ISO 8601 in UTC, as ``--until`` reads them back."""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["iso_utc"]


def iso_utc(unix_s: float) -> str:
    """Unix seconds as ``--until`` reads them back: ``2026-11-28T14:00:00+00:00``."""
    return datetime.fromtimestamp(unix_s, timezone.utc).isoformat(timespec="seconds")
