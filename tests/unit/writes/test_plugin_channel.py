"""The plugin's mailbox (zocratesd/writes/plugin.py): every open poll hears of a call, and a daemon
that stops answers its open polls at once. The shim around it is tested in tests/e2e/test_writes_shim.py."""

from __future__ import annotations

import anyio
import pytest

from zocratesd.writes.operations import Change, TagItems
from zocratesd.writes.plugin import PluginChannel, PluginRequest

pytestmark = pytest.mark.anyio

TAG = TagItems(items=("LEWIS202",), tags=("later",))


async def _poll(channel: PluginChannel, got: list[PluginRequest | None], wait_s: float = 20.0) -> None:
    got.append(await channel.poll(wait_s, plugin_version="0.1.0", zotero_version="9.0.6"))


async def test_with_two_polls_open_a_call_is_taken_by_one_and_the_other_still_hears_the_next() -> None:
    channel = PluginChannel()
    got: list[PluginRequest | None] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(_poll, channel, got)
        tg.start_soon(_poll, channel, got)
        await anyio.wait_all_tasks_blocked()  # both polls wait
        tg.start_soon(channel.plan, TAG)
        await anyio.wait_all_tasks_blocked()
        assert [r["call"] for r in got if r] == ["plan"]
        assert channel.answer(got[0]["id"], {"result": {"change": {}}})  # type: ignore[index]
        # The poll opened before that call was not left waiting on an event nobody sets any more.
        tg.start_soon(channel.apply, TAG, Change())
        await anyio.wait_all_tasks_blocked()
        assert [r["call"] for r in got if r] == ["plan", "apply"]
        assert channel.answer(got[1]["id"], {"result": {}})  # type: ignore[index]


async def test_release_answers_every_open_poll_with_nothing_and_hands_out_no_call() -> None:
    channel = PluginChannel()
    got: list[PluginRequest | None] = []
    with anyio.fail_after(10):  # a hang guard: unreleased, the polls would wait 20 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(_poll, channel, got)
            tg.start_soon(_poll, channel, got)
            await anyio.wait_all_tasks_blocked()
            channel.release_polls()
    assert got == [None, None] and channel.released
    # A call made while the daemon stops is not handed to a poll that comes meanwhile: it stays
    # queued in the journal for the next daemon.
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(channel.plan, TAG)
            await anyio.wait_all_tasks_blocked()
            await _poll(channel, got)
            tg.cancel_scope.cancel()
    assert got == [None, None, None]
