"""JSON that every reader can parse: NaN and infinities become null (``json`` would write
``NaN``, which is not JSON)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["json_ready"]


def json_ready(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (dicts, lists, tuples walked)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value
