"""client.data.jsonsafe: JSON without NaN."""

from __future__ import annotations

import math

from client.data.jsonsafe import json_ready


def test_json_ready_has_no_nan() -> None:
    assert json_ready({"a": math.nan, "b": [1.0, math.inf], "c": (2, "x")}) == {
        "a": None, "b": [1.0, None], "c": [2, "x"]}
