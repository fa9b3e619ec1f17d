"""throttle-lab's CPU-burn service: FastAPI on uvicorn, with ways to limit its own CPU."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
