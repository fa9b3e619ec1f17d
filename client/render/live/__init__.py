"""The live page of a run (``--live``): :class:`LivePage` serves it while the run goes;
:func:`watched_live` feeds it a group alone, :func:`show_live_end` a run's end."""

from __future__ import annotations

from client.render.live.server import DEFAULT_HOST, DEFAULT_PORT, LiveError, LivePage
from client.render.live.session import show_live_end, watched_live

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "LiveError", "LivePage", "show_live_end",
           "watched_live"]
