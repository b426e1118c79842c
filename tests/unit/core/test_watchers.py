"""Watchers: each listener has a queue of its own; publish never waits on one (core/watchers.py)."""

from __future__ import annotations

import anyio
import pytest

from zocratesd.core.watchers import YIELD_BACKLOG, Watchers
from zocratesd.updates import MessageChunk, Title, Update

pytestmark = pytest.mark.anyio


def chunk(n: int) -> MessageChunk:
    return MessageChunk("assistant", "e1", f"chunk {n}", "inv-1")


async def test_a_listener_that_never_reads_stalls_neither_publish_nor_the_others() -> None:
    w = Watchers()
    stuck = w.watch("s1", limit=10)  # never read
    heard: list[Update] = []
    reader = w.watch("s1")

    async def read() -> None:
        async for update in reader:
            heard.append(update)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            for n in range(100):
                await w.publish("s1", chunk(n))
            await reader.drained()
            assert heard == [chunk(n) for n in range(100)]  # everything, in order
            reader.close()
    assert stuck.overflowed and len(stuck) == 10 and stuck.dropped == 90
    assert stuck.offered == 100


async def test_overflow_ends_the_subscription_after_what_was_queued() -> None:
    w = Watchers()
    ready: list[bool] = []
    sub = w.watch("s1", limit=3, on_ready=lambda: ready.append(sub.overflowed))
    for n in range(5):
        await w.publish("s1", chunk(n))
    # on_ready: once for the first update (idle -> busy), once for the end by overflow.
    assert ready == [False, True]
    assert sub.overflowed and sub.ended and not sub.closed and sub.dropped == 2
    with anyio.fail_after(5):
        got = [u async for u in sub]  # what fitted, then the end of the stream
    assert got == [chunk(0), chunk(1), chunk(2)]
    await w.publish("s1", chunk(5))
    assert sub.dropped == 3  # still counted until it is closed
    sub.close()
    assert w.watching("s1") == 0


async def test_close_unwatches_and_ends_a_waiting_consumer() -> None:
    w = Watchers()
    sub = w.watch("s1")
    other = w.watch("s2")
    assert (w.watching("s1"), w.watching("s2")) == (1, 1)
    got: list[Update] = []

    async def read() -> None:
        async for update in sub:
            got.append(update)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await w.publish("s1", Title("T"))
            await w.publish("s2", Title("elsewhere"))
            await sub.drained()
            sub.close()  # the reader's `async for` ends
    assert got == [Title("T")]
    assert w.watching("s1") == 0
    await w.publish("s1", Title("after"))
    assert len(sub) == 0 and sub.offered == 1
    sub.close()  # idempotent
    assert other.take_nowait() == [Title("elsewhere")]
    with other:
        pass
    assert w.watching("s2") == 0


async def test_what_was_queued_before_close_stays_readable() -> None:
    w = Watchers()
    with w.watch("s1") as sub:
        await w.publish("s1", chunk(0))
    assert sub.closed
    with anyio.fail_after(5):
        assert [u async for u in sub] == [chunk(0)]


async def test_drained_waits_until_the_consumer_comes_back_for_more() -> None:
    w = Watchers()
    sub = w.watch("s1")
    for n in range(3):
        await w.publish("s1", chunk(n))
    batch = sub.take_nowait()
    assert batch == [chunk(0), chunk(1), chunk(2)]
    drained = anyio.Event()

    async def wait() -> None:
        await sub.drained()
        drained.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await anyio.sleep(0.05)
            assert not drained.is_set()  # taken, but not yet handled
            assert sub.take_nowait() == []  # back for more: the batch was handled
            await drained.wait()
    await sub.drained()  # nothing queued: returns at once


async def test_handled_ends_the_wait_before_the_consumer_comes_back_unless_more_is_queued() -> None:
    """ACP's writer says a batch is handled once it is queued on the connection, while it still
    waits for the write: a prompt's answer then goes out after the turn's updates, not after
    the client read them."""
    w = Watchers()
    sub = w.watch("s1")
    await w.publish("s1", chunk(0))
    assert sub.take_nowait() == [chunk(0)]
    drained = anyio.Event()

    async def wait() -> None:
        await sub.drained()
        drained.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait)
            await w.publish("s1", chunk(1))  # queued meanwhile: handled() does not cover it
            sub.handled()
            await anyio.sleep(0.05)
            assert not drained.is_set()
            assert sub.take_nowait() == [chunk(1)]
            sub.handled()
            await drained.wait()


async def test_on_ready_fires_when_idle_only_and_a_failing_hook_drops_only_its_listener() -> None:
    w = Watchers()
    calls: list[str] = []
    sub = w.watch("s1", on_ready=lambda: calls.append("ready"))

    def boom() -> None:
        raise RuntimeError("face bug")

    bad = w.watch("s1", on_ready=boom)
    await w.publish("s1", chunk(0))
    await w.publish("s1", chunk(1))  # still busy (not taken): no second call
    assert calls == ["ready"] and bad.closed and w.watching("s1") == 1
    assert sub.take_nowait() == [chunk(0), chunk(1)]
    await w.publish("s1", chunk(2))  # the consumer is handling its batch: not idle yet
    assert calls == ["ready"]
    assert sub.take_nowait() == [chunk(2)]
    assert sub.take_nowait() == []  # idle again
    await w.publish("s1", chunk(3))
    assert calls == ["ready", "ready"]


async def test_publish_to_a_session_nobody_watches_is_a_no_op() -> None:
    w = Watchers()
    with anyio.fail_after(10):
        await w.publish("nobody", chunk(0))
    assert w.watching("nobody") == 0


async def test_take_waits_for_updates_returns_all_queued_and_ends_with_the_subscription() -> None:
    w = Watchers()
    sub = w.watch("s1", limit=3)
    batches: list[list[Update]] = []

    async def writer() -> None:  # as ACP's SessionFeed: one task for the subscription's whole life
        while batch := await sub.take():
            batches.append(batch)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            await anyio.sleep(0.01)
            assert batches == []  # nothing queued: it waits
            sub.offer(chunk(0))
            sub.offer(chunk(1))  # both queued before it runs: one batch
            await sub.drained()
            await w.publish("s1", chunk(2))
            await sub.drained()
            for n in range(3, 8):  # the writer does not run meanwhile: 3 fit, the 4th overflows
                sub.offer(chunk(n))
        # After what fitted, the end by overflow ends the writer (it returned []).
    assert batches == [[chunk(0), chunk(1)], [chunk(2)], [chunk(3), chunk(4), chunk(5)]]
    assert sub.overflowed and sub.dropped == 2
    sub.close()
    closed = w.watch("s1")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(closed.take)
            await anyio.sleep(0.01)
            closed.close()  # a waiting take() returns [] and its task ends
    assert await closed.take() == [] and w.watching("s1") == 0


async def test_publish_lets_a_waiting_consumer_run_at_once_and_a_busy_one_take_a_batch_later() -> None:
    w = Watchers()
    sub = w.watch("s1")
    heard: list[Update] = []

    async def read() -> None:
        async for update in sub:
            heard.append(update)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await anyio.sleep(0.01)
            for n in range(3):  # a turn that awaits nothing else: each update is heard as published
                await w.publish("s1", chunk(n))
                assert heard == [chunk(k) for k in range(n + 1)]
            sub.close()
    # offer() says when the consumer should run now: it waits, or its backlog is long.
    busy = w.watch("s2")
    assert busy.take_nowait() == []
    waiting: list[bool] = []

    async def take() -> None:
        waiting.append(True)
        await busy.take()

    async with anyio.create_task_group() as tg:
        tg.start_soon(take)
        await anyio.sleep(0.01)
        assert waiting and busy.offer(chunk(0))  # it was waiting for this
    # Not waiting now (it took chunk 0 and has not come back): no need to run until the backlog grows.
    assert [busy.offer(chunk(n)) for n in range(1, YIELD_BACKLOG + 1)] == [False] * (YIELD_BACKLOG - 1) + [True]
