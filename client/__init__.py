"""http-timing: time requests one by one, keep every request as raw data, plot and explain them."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
