"""The benchmarks: scripts that measure speed and accuracy and print a table (never timed
assertions in tests: the machine is shared). Each is a module run from the repository's root::

    .venv/bin/python -m benchmarks.NAME [--help]

What they share (starting services through the client's targets registry, ``/metrics``,
calibration, ``wrk``, the entry point) is :mod:`benchmarks.support`.
"""

from __future__ import annotations

__all__: list[str] = []
