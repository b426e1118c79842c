"""Steps 1 and 2 on a real sessions.db: empty sessions after 24 h, retention by age and by count,
busy sessions immune, every deletion under the session's lock through ADK."""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.runners import Runner
from maintworld import DAY, HOUR, World

from zocratesd.errors import SessionBusy
from zocratesd.maintenance import _select
from zocratesd.store import APP_NAME, USER_ID

pytestmark = pytest.mark.anyio


async def test_empty_session_immunity_edge_counts_from_create_time(world: World) -> None:
    young = await world.empty("23h59m")
    old = await world.empty("24h01m")
    world.age(young, created_ago=24 * HOUR - 60, updated_ago=30 * DAY)  # last update is irrelevant
    world.age(old, created_ago=24 * HOUR + 60, updated_ago=60)  # a rename a minute ago changes nothing
    report = await world.maintenance.run(startup=True)
    assert report["empty_deleted"] == 1 and report["retention_deleted"] == 0
    assert world.ids() == {young}
    assert world.events_of(old) == 0  # its seed event went with it


async def test_sessions_seen_before_are_judged_again_as_they_age(world: World) -> None:
    """Passes remember sessions seen with a message; one seen young and empty, or old and busy,
    is looked at again by the next pass."""
    used = await world.chat("used")
    opened = await world.empty("opened")
    busy = await world.empty("busy")
    world.age(used, created_ago=3 * DAY)
    world.age(busy, created_ago=3 * DAY)
    with world.daemon.locks.hold(busy, "prompt"):
        assert (await world.maintenance.run(startup=True))["empty_deleted"] == 0
    world.age(opened, created_ago=25 * HOUR)
    assert (await world.maintenance.run(startup=False))["empty_deleted"] == 2
    assert world.ids() == {used}


async def test_bookkeeping_events_do_not_make_a_session_non_empty(world: World) -> None:
    sid = await world.empty("opened, renamed, rewound, never used")
    await world.daemon.rename_session(sid, "renamed")
    runner = Runner(
        app=App(name=APP_NAME, root_agent=LlmAgent(name="coordinator", model="gemini-2.0-flash")),
        session_service=world.service,
    )
    seed_inv = world.sql("SELECT invocation_id FROM events WHERE session_id = ? ORDER BY timestamp DESC", (sid,))[0][0]
    await runner.rewind_async(user_id=USER_ID, session_id=sid, rewind_before_invocation_id=seed_inv)
    assert world.events_of(sid) == 3  # seed, rename, rewind marker: none has content
    used = await world.chat("used once")
    world.age(sid, created_ago=2 * DAY)
    world.age(used, created_ago=2 * DAY)
    report = await world.maintenance.run(startup=False)
    assert report["empty_deleted"] == 1
    assert world.ids() == {used}


async def test_any_content_part_counts_as_a_message(world: World) -> None:
    from adkevents import call

    sid = await world.empty("only a tool call")
    await _append(world, sid, [call("inv-1", "fc-1", "search_library", {"query": "x"})])
    world.age(sid, created_ago=3 * DAY)
    assert (await world.maintenance.run(startup=False))["empty_deleted"] == 0
    assert sid in world.ids()


async def test_retention_days_deletes_by_last_update_with_the_events(world: World) -> None:
    stale = await world.chat("181 days", turns=2)
    kept = await world.chat("179 days")
    world.age(stale, created_ago=400 * DAY, updated_ago=181 * DAY)
    world.age(kept, created_ago=400 * DAY, updated_ago=179 * DAY)
    report = await world.maintenance.run(startup=False)
    assert report == {**report, "empty_deleted": 0, "retention_deleted": 1}
    assert world.ids() == {kept}
    assert world.events_of(stale) == 0
    assert await world.service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=stale) is None


@pytest.mark.parametrize("disabled", [0, None])
async def test_retention_days_zero_or_null_disables_the_pass(world: World, disabled: Any) -> None:
    world.config.session_retention_days = disabled
    sid = await world.chat("ten years old")
    world.age(sid, created_ago=3700 * DAY, updated_ago=3650 * DAY)
    assert (await world.maintenance.run(startup=False))["retention_deleted"] == 0
    assert world.ids() == {sid}


async def test_max_saved_sessions_deletes_the_least_recently_updated(world: World) -> None:
    world.config.max_saved_sessions = 3
    sids = [await world.chat(f"chat {i}") for i in range(5)]
    # Creation order and update order differ: the cap goes by last update.
    for sid, updated_days in zip(sids, [1, 5, 2, 4, 3], strict=True):
        world.age(sid, created_ago=10 * DAY, updated_ago=updated_days * DAY)
    report = await world.maintenance.run(startup=False)
    assert report["retention_deleted"] == 2
    assert world.ids() == {sids[0], sids[2], sids[4]}


@pytest.mark.parametrize("disabled", [0, None])
async def test_max_saved_sessions_zero_or_null_disables_the_cap(world: World, disabled: Any) -> None:
    world.config.max_saved_sessions = disabled
    sids = {await world.chat(f"chat {i}") for i in range(4)}
    assert (await world.maintenance.run(startup=False))["retention_deleted"] == 0
    assert world.ids() == sids


async def test_both_thresholds_age_first_then_count(world: World) -> None:
    world.config.session_retention_days = 30
    world.config.max_saved_sessions = 2
    old = [await world.chat(f"old {i}") for i in range(2)]
    recent = [await world.chat(f"recent {i}") for i in range(3)]
    for i, sid in enumerate(old):
        world.age(sid, updated_ago=(40 + i) * DAY)
    for i, sid in enumerate(recent):
        world.age(sid, updated_ago=(3 - i) * DAY)  # recent[0] is the least recent of them
    empty = await world.empty()
    world.age(empty, created_ago=2 * DAY, updated_ago=2 * DAY)
    report = await world.maintenance.run(startup=False)
    # empty goes first (step 1); the two old ones by age; then one recent beyond the cap of 2.
    assert (report["empty_deleted"], report["retention_deleted"]) == (1, 3)
    assert world.ids() == set(recent[1:])


async def test_busy_sessions_are_immune_and_vacuum_is_deferred(world: World) -> None:
    empty = await world.empty()
    stale = await world.chat("stale", chars=20000)
    fresh = await world.chat("fresh")
    world.age(empty, created_ago=3 * DAY)
    world.age(stale, updated_ago=365 * DAY)
    before = world.db.stat().st_ino
    with world.daemon.locks.hold(empty, "prompt"), world.daemon.locks.hold(stale, "prompt"):
        report = await world.maintenance.run(startup=False)
        assert (report["empty_deleted"], report["retention_deleted"]) == (0, 0)
        assert report["vacuum"]["ran"] is False and report["vacuum"]["skipped_reason"] == "chat_in_progress"
        assert world.ids() == {empty, stale, fresh}
        assert world.db.stat().st_ino == before
    report = await world.maintenance.run(startup=False)
    assert (report["empty_deleted"], report["retention_deleted"]) == (1, 1)
    assert world.ids() == {fresh}


async def test_the_cap_skips_a_busy_oldest_session_and_takes_the_next(world: World) -> None:
    world.config.max_saved_sessions = 2
    a, b, c = [await world.chat(n) for n in "abc"]
    for sid, days in ((a, 3), (b, 2), (c, 1)):
        world.age(sid, updated_ago=days * DAY)
    with world.daemon.locks.hold(a, "prompt"):
        assert (await world.maintenance.run(startup=False))["retention_deleted"] == 1
    assert world.ids() == {a, c}


async def test_each_deletion_holds_the_session_lock_so_no_turn_can_start(world: World, monkeypatch: Any) -> None:
    sid = await world.empty()
    world.age(sid, created_ago=2 * DAY)
    seen: list[Any] = []
    real_delete = world.service.delete_session

    async def spy(**kw: Any) -> None:
        seen.append(world.daemon.locks.activity(kw["session_id"]))
        with pytest.raises(SessionBusy):  # a prompt arriving now is refused
            with world.daemon.locks.hold(kw["session_id"], "prompt"):
                pass
        await real_delete(**kw)

    monkeypatch.setattr(world.service, "delete_session", spy)
    assert (await world.maintenance.run(startup=False))["empty_deleted"] == 1
    assert seen == ["maintenance"]
    assert world.daemon.locks.busy_sessions() == frozenset()


async def test_a_session_that_stopped_qualifying_after_selection_is_kept(world: World, monkeypatch: Any) -> None:
    """Selection and deletion are separate steps; the re-check under the lock catches a turn that
    ended in between (here: a survey that is out of date by the time the lock is taken)."""
    used = await world.chat("answered just after the survey")
    touched = await world.chat("updated just after the survey")
    world.age(used, created_ago=2 * DAY)
    world.config.max_saved_sessions = 1
    real_survey = _select.survey

    def outdated(c: Any, empty_cut: float | None, stale_cut: float | None) -> Any:
        found = real_survey(c, empty_cut, stale_cut)
        ghost = _select.Candidate(used, "", "empty", empty_cut)
        return _select.Survey(empty=[ghost], stale=[], total=found.total, pages=found.pages)

    def outdated_oldest(c: Any, excess: int, skip: frozenset[str]) -> list[Any]:
        return [_select.Candidate(touched, "2000-01-01 00:00:00.000000", "oldest", None)]

    monkeypatch.setattr(_select, "survey", outdated)
    monkeypatch.setattr(_select, "oldest_candidates", outdated_oldest)
    report = await world.maintenance.run(startup=False)
    assert (report["empty_deleted"], report["retention_deleted"]) == (0, 0)
    assert world.ids() == {used, touched}


async def test_unparseable_times_keep_the_session(world: World) -> None:
    sid = await world.empty()
    world.sql("UPDATE sessions SET create_time = 'garbage', update_time = 'garbage' WHERE id = ?", (sid,))
    world.config.session_retention_days = 1
    report = await world.maintenance.run(startup=False)
    assert (report["empty_deleted"], report["retention_deleted"]) == (0, 0)
    assert world.ids() == {sid}


async def _append(world: World, sid: str, events: list[Any]) -> None:
    from adkevents import append_all

    await append_all(world.service, sid, events)
