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


def test_the_c_burn_costs_what_the_python_burn_costs() -> None:
    """One iteration of hash_burn is calibrated to one of burn: generous bounds (a shared
    machine); the benchmark-free check is that both are ~the same order."""
    from service.burn import bytes_per_iteration, hash_burn

    assert bytes_per_iteration() >= 64
    python = min(burn(20000).cpu_ns for _ in range(3))
    c = min(hash_burn(20000).cpu_ns for _ in range(3))
    assert 0.4 < c / python < 2.5


def test_a_parallel_burn_uses_one_cpu_per_thread_at_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from service.burn import burn_parallel

    with ThreadPoolExecutor(max_workers=3) as pool:
        one = burn_parallel(20000, 1, pool.submit)
        twos = [burn_parallel(20000, 2, pool.submit) for _ in range(3)]
        assert one.threads == 1 and all(two.threads == 2 for two in twos)
        assert all(two.cpu_ns > 1.5 * one.cpu_ns for two in twos)  # twice the work
        import os

        # really at once: more CPU than wall time. Another process busy on the other CPU
        # serialises the two threads for a while, so up to 20 tries; a burn that holds the
        # GIL (or runs its threads one after the other) never gets above 1.0.
        if (os.cpu_count() or 1) >= 2:
            best = max(two.cpu_ns / two.wall_ns for two in twos)
            for _ in range(20):
                if best > 1.2:
                    break
                two = burn_parallel(20000, 2, pool.submit)
                best = max(best, two.cpu_ns / two.wall_ns)
            assert best > 1.2, best
    with pytest.raises(ValueError, match="threads must be >= 1"):
        burn_parallel(1, 0, pool.submit)
