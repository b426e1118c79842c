"""store/thread.py: a connection's calls run in its own thread, one at a time and in order; a
cancelled caller never leaves a started call behind; the thread ends when idle or closed, and a
call made at that moment is never stranded."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from zocratesd.store import thread as thread_mod
from zocratesd.store.thread import ConnectionThread

pytestmark = pytest.mark.anyio


async def test_calls_run_in_its_thread_in_order_with_their_results_and_errors() -> None:
    worker = ConnectionThread("zocratesd-test-conn")
    seen: list[tuple[int, str, bool]] = []
    running = 0

    def call(n: int) -> int:
        nonlocal running
        running += 1
        try:
            assert running == 1  # never two at once
            time.sleep(0.002)
            seen.append((n, threading.current_thread().name, threading.current_thread() is threading.main_thread()))
            return n * 10
        finally:
            running -= 1

    results: dict[int, int] = {}

    async def one(n: int) -> None:
        results[n] = await worker.run(call, n)

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(one, n)
            await anyio.lowlevel.checkpoint()  # queued in this order
    assert [n for n, _, _ in seen] == list(range(20))
    assert {name for _, name, _ in seen} == {"zocratesd-test-conn"} and not any(main for _, _, main in seen)
    assert results == {n: n * 10 for n in range(20)}

    def fails() -> None:
        raise ValueError("bad row")

    with pytest.raises(ValueError, match="bad row"):
        await worker.run(fails)
    assert await worker.run(call, 21) == 210  # the thread survives a failed call
    worker.close()


async def test_a_cancelled_caller_waits_for_its_started_call_and_a_cancelled_one_never_starts() -> None:
    worker = ConnectionThread("zocratesd-test-conn")
    started = threading.Event()
    finished = threading.Event()

    def slow_write() -> str:
        started.set()
        time.sleep(0.2)
        finished.set()
        return "committed"

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def cancel_once_started() -> None:
                await anyio.to_thread.run_sync(started.wait)
                scope.cancel()

            tg.start_soon(cancel_once_started)
            answer = await worker.run(slow_write)
            # The cancellation goes on only after the write it had started is finished.
            finished_then = finished.is_set()
            await anyio.lowlevel.checkpoint()
            pytest.fail("the cancellation was lost")
    assert scope.cancelled_caught and finished_then and answer == "committed"

    ran: list[str] = []
    with anyio.CancelScope() as scope:
        scope.cancel()
        await worker.run(ran.append, "x")
    assert scope.cancelled_caught and ran == []
    assert await worker.run(lambda: "still serving") == "still serving"
    worker.close()


async def test_the_thread_ends_when_idle_or_closed_and_no_call_is_stranded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(thread_mod, "IDLE_EXIT_S", 0.05)
    worker = ConnectionThread("zocratesd-test-conn")
    assert not worker.alive
    first = await worker.run(threading.current_thread)
    assert worker.alive
    with anyio.fail_after(5):
        while worker.alive:
            await anyio.sleep(0.01)
    first.join(5)
    assert not first.is_alive()  # really gone
    assert await worker.run(threading.current_thread) is not first  # a new one serves the next call

    # close() with calls queued: they run first; calls made right after close() are served too,
    # by the same thread (which sees them before it ends) or a new one. A stranded call would
    # never answer (its wait is shielded): the task group would hang until pytest's timeout.
    gate = threading.Event()
    done: list[str] = []

    def call(name: str) -> None:
        if name == "queued":
            gate.wait()
        done.append(name)

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(worker.run, call, "queued")
        await anyio.sleep(0.02)
        worker.close()
        tg.start_soon(worker.run, call, "after close")
        worker.close()
        gate.set()
        tg.start_soon(worker.run, call, "after the second close")
    assert done == ["queued"] * 3 + ["after close", "after the second close"]
    with anyio.fail_after(5):
        while worker.alive:
            await anyio.sleep(0.01)
    assert await worker.run(lambda: 42) == 42
    worker.close()
