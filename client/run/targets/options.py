"""What every backend is made from: the options of ``sweep`` (and later commands) that are
about the target, not the load."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cpuquota.limit import Limit

__all__ = ["DEFAULT_IMAGE", "TargetOptions"]

DEFAULT_IMAGE = "throttle-lab:latest"  # docker/compose.yaml's default; THROTTLE_LAB_IMAGE wins


def _image() -> str:
    return os.environ.get("THROTTLE_LAB_IMAGE") or DEFAULT_IMAGE


@dataclass(frozen=True)
class TargetOptions:
    image: str = field(default_factory=_image)   # the docker backend's image
    # more burn-service flags, after the backend's own (of a flag given twice, the last wins:
    # ("--log-level", "info") turns the access log back on), e.g. ("--max-concurrent", "8")
    service_args: tuple[str, ...] = ()
    # seconds to wait for a started service's /healthz (--start-timeout); None: by its limit
    start_timeout: float | None = None

    def health_timeout(self, limit: Limit | None) -> float:
        """Seconds to wait for ``/healthz``: ``start_timeout`` when given, else 30 s plus what
        a tight quota adds to the service's start-up (its imports cost ~1 s of CPU)."""
        if self.start_timeout is not None:
            return self.start_timeout
        return 30 + 1.5 / limit.cpus if limit is not None else 30
