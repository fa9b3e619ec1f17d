"""service.workers.WorkerPool: calls run in its threads, a client in sequence keeps its thread,
concurrent calls get a thread each, and closing ends them all."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.workers import WorkerPool


def _ident() -> int:
    return threading.get_ident()


def test_results_errors_and_the_calling_thread() -> None:
    pool = WorkerPool("t")

    async def main() -> tuple[int, int]:
        assert await pool.run(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(KeyError, match="x"):
            await pool.run(lambda: {}["x"])
        return await pool.run(_ident), threading.get_ident()

    try:
        worker, loop_thread = asyncio.run(main())
    finally:
        pool.close()
    assert worker != loop_thread


def test_a_client_in_sequence_keeps_its_thread() -> None:
    # what boundary mode's per-thread budget relies on: no thread-start race spreads one
    # client's requests over several budgets
    pool = WorkerPool("t")

    async def main() -> set[int]:
        return {await pool.run(_ident) for _ in range(200)}

    try:
        assert len(asyncio.run(main())) == 1 and pool.threads == 1
    finally:
        pool.close()


def test_concurrent_calls_get_a_thread_each_then_the_last_idle_one_serves() -> None:
    pool = WorkerPool("t")
    gate = threading.Barrier(3, timeout=10)

    def meet() -> int:
        gate.wait()          # all three must be running at once
        return threading.get_ident()

    async def main() -> tuple[list[int], int]:
        together = await asyncio.gather(*(pool.run(meet) for _ in range(3)))
        return list(together), await pool.run(_ident)

    try:
        together, after = asyncio.run(main())
    finally:
        pool.close()
    assert len(set(together)) == 3 and pool.threads == 3 and after in together


def test_close_ends_every_thread() -> None:
    pool = WorkerPool("closing")

    async def main() -> None:
        await asyncio.gather(*(pool.run(_ident) for _ in range(4)))

    asyncio.run(main())
    threads = [t for t in threading.enumerate() if t.name.startswith("closing_")]
    assert threads
    pool.close()
    for t in threads:
        t.join(timeout=10)
        assert not t.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(pool.run(_ident))
