"""The live page of a run (``--live``): :class:`LivePage` serves it while the run goes."""

from __future__ import annotations

from client.render.live.server import DEFAULT_HOST, DEFAULT_PORT, LiveError, LivePage

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "LiveError", "LivePage"]
