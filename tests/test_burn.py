"""service.burn: the CPU burn loop, its checkpoints and its numbers."""

from __future__ import annotations

import pytest

from service.burn import CHECK_EVERY, DEFAULT_ITERATIONS, burn


def test_checkpoints_come_every_chunk_and_after_the_last() -> None:
    calls: list[int] = []
    result = burn(2 * CHECK_EVERY + 5, lambda: calls.append(1))
    assert result.iterations == 2 * CHECK_EVERY + 5
    assert len(calls) == 3  # two full chunks and the rest
    assert burn(0, lambda: calls.append(1)).iterations == 0 and len(calls) == 3


def test_cpu_and_wall_are_measured() -> None:
    result = burn(DEFAULT_ITERATIONS)
    assert result.cpu_ns > 0 and result.wall_ns > 0
    # a paused loop: wall time includes the pause, CPU time does not
    import time

    paused = burn(CHECK_EVERY, lambda: time.sleep(0.02))
    assert paused.wall_ns >= 20_000_000 > paused.cpu_ns


def test_negative_iterations_are_refused() -> None:
    with pytest.raises(ValueError, match="iterations must be >= 0"):
        burn(-1)
