"""What every backend is made from: the options of ``sweep`` (and later commands) that are
about the target, not the load."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

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
