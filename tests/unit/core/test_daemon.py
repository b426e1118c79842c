"""The core `Daemon`, in-process: sessions, turns and what their watchers hear, busy refusals,
cancel, rewind, research checkpoints, replay and storage stats.

Each test runs a real Daemon on a fresh data dir with the offline model and a small passage
library given as `zocrates-data/library_passages.jsonl` (the file a daemon without a Zotero index
searches). The research budget is one round, so a question of two aspects pauses at a checkpoint.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from turngate import Gate

from zocratesd.config import ZocratesConfig
from zocratesd.core.context import PromptContext
from zocratesd.core.daemon import LIBRARY_PASSAGES_FILE, Daemon
from zocratesd.core.validation import TITLE_FROM_PROMPT_CHARS, title_from_prompt
from zocratesd.errors import CheckpointNotPending, InvalidInput, NotFound, SessionBusy, SessionNotFound
from zocratesd.limits import MAX_INTERRUPT_ID_CHARS, MAX_PROMPT_CHARS, MAX_TITLE_CHARS
from zocratesd.maintenance import StorageStats
from zocratesd.store.ui import DEFAULT_TITLE
from zocratesd.updates import (
    Checkpoint,
    CheckpointAnswered,
    MessageChunk,
    ThoughtChunk,
    Title,
    ToolCall,
    ToolProgress,
    ToolResult,
    Update,
    Usage,
)

pytestmark = pytest.mark.anyio

PASSAGES = [
    {"item_key": "LEWIS202", "title": "Retrieval-Augmented Generation", "year": 2020,
     "text": "RAG combines parametric and non-parametric memory."},
    {"item_key": "GAOHYDE1", "title": "HyDE", "year": 2022,
     "text": "HyDE writes a hypothetical document and embeds it to retrieve real ones."},
    {"item_key": "KARPDPR1", "title": "Dense Passage Retrieval", "year": 2020,
     "text": "DPR encodes questions and passages with two BERT encoders."},
]
# Two aspects, a budget of one round: the turn stops at a checkpoint after the first.
TWO = "What does RAG combine? How does HyDE retrieve?"


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Daemon]:
    state = tmp_path / "zocrates-data"
    state.mkdir()
    (state / LIBRARY_PASSAGES_FILE).write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    d = Daemon(tmp_path, ZocratesConfig(research={"initial_budget": 1}))
    await d.start()
    try:
        yield d
    finally:
        await d.aclose()


async def answer_text(d: Daemon, sid: str, invocation_id: str | None) -> str:
    messages = (await d.get_session(sid))["messages"]
    return "".join(m["text"] for m in messages if m["invocation_id"] == invocation_id and m["role"] == "assistant")


def kinds(updates: list[Update]) -> list[str]:
    """The update types in order, a run of one type shown once (chunks stream in runs)."""
    out: list[str] = []
    for u in updates:
        name = type(u).__name__
        if isinstance(u, MessageChunk):
            name += f"({u.role})"
        if not out or out[-1] != name:
            out.append(name)
    return out


def as_replayed(updates: list[Update]) -> list[Update]:
    """What a watcher saw, as a replay shows it: a message's streamed chunks as one, without the
    turn's invocation id; no live-only progress or usage; the title shown once, at the end."""
    out: list[Update] = []
    title: Title | None = None
    for u in updates:
        if isinstance(u, (ToolProgress, Usage, CheckpointAnswered)):
            continue
        if isinstance(u, Title):
            title = u
            continue
        if isinstance(u, (MessageChunk, ThoughtChunk)):
            prev = out[-1] if out else None
            if isinstance(prev, (MessageChunk, ThoughtChunk)) and type(prev) is type(u) and prev.message_id == u.message_id:
                u = _with_text(u, prev.text + u.text)
                out.pop()
            u = _with_text(u, u.text, invocation_id=None)
        out.append(u)
    # A checkpoint is shown after the history, once (still pending: the last one).
    checkpoints = [u for u in out if isinstance(u, Checkpoint)]
    out = [u for u in out if not isinstance(u, Checkpoint)] + checkpoints[-1:]
    return [*out, *([title] if title else [])]


def _with_text(u: MessageChunk | ThoughtChunk, text: str, **kw: Any) -> MessageChunk | ThoughtChunk:
    if isinstance(u, MessageChunk):
        return MessageChunk(u.role, u.message_id, text, kw.get("invocation_id", u.invocation_id))
    return ThoughtChunk(u.message_id, text, kw.get("invocation_id", u.invocation_id))


# --- sessions -------------------------------------------------------------------------------------


async def test_the_library_is_the_passages_file(daemon: Daemon) -> None:
    status = daemon.library_status()
    assert status["state"] == "disabled" and "fixed set of passages" in status["message"]
    sid = (await daemon.create_session()).id
    result = await daemon.prompt(sid, "How does HyDE retrieve documents?")
    assert "GAOHYDE1" in await answer_text(daemon, sid, result.invocation_id)


async def test_create_list_get_rename_delete(daemon: Daemon) -> None:
    plain = await daemon.create_session()
    assert plain.title == DEFAULT_TITLE and plain.cwd is None
    titled = await daemon.create_session(title="  Bees\tand\nmites \x7f ", cwd="/home/u/papers")
    assert titled.title == "Bees and mites" and titled.cwd == "/home/u/papers"  # control chars become spaces
    third = await daemon.create_session(title="x" * MAX_TITLE_CHARS)
    assert titled.created_at >= plain.created_at

    rows = await daemon.list_sessions()
    # Oldest first, by creation (protocol/README.md, session/list; protocol/http.md, GET /sessions).
    assert [r.id for r in rows] == [plain.id, titled.id, third.id]
    assert [r.title for r in rows] == [DEFAULT_TITLE, "Bees and mites", "x" * MAX_TITLE_CHARS]
    assert rows[1].cwd == "/home/u/papers" and rows[1].updated_iso.endswith("Z")

    ui = await daemon.get_session(titled.id)
    assert set(ui) == {"id", "title", "created_at", "updated_at", "messages", "pending_hitl", "settings"}
    assert ui["settings"] == {"scope": "library", "model": "offline", "compaction": True, "citation_style": "numbered",
                              "research_budget": daemon.config.research.initial_budget}
    assert (ui["id"], ui["title"], ui["messages"], ui["pending_hitl"]) == (titled.id, "Bees and mites", [], None)
    assert ui["created_at"] == pytest.approx(titled.created_at)

    with daemon.watch(titled.id) as watching, daemon.watch(plain.id) as elsewhere:
        renamed = await daemon.rename_session(titled.id, " Varroa\r\n ")
        assert watching.take_nowait() == [Title("Varroa")]
        assert elsewhere.take_nowait() == []  # only the renamed session's watchers hear it
    assert (renamed.id, renamed.title, renamed.cwd) == (titled.id, "Varroa", "/home/u/papers")
    assert renamed.created_at == pytest.approx(titled.created_at) and renamed.updated_at >= titled.updated_at
    assert (await daemon.get_session(titled.id))["title"] == "Varroa"
    assert [r.title for r in await daemon.list_sessions()][1] == "Varroa"

    await daemon.delete_session(titled.id)
    assert [r.id for r in await daemon.list_sessions()] == [plain.id, third.id]
    with pytest.raises(SessionNotFound):
        await daemon.get_session(titled.id)
    with pytest.raises(SessionNotFound):
        await daemon.delete_session(titled.id)  # twice: the second finds nothing


async def test_unknown_sessions_are_not_found(daemon: Daemon) -> None:
    missing = "session-0-000000"
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: daemon.get_session(missing),
        lambda: daemon.live_session(missing),
        lambda: daemon.replay(missing),
        lambda: daemon.delete_session(missing),
        lambda: daemon.rename_session(missing, "title"),
        lambda: daemon.prompt(missing, "What is HyDE?"),
        lambda: daemon.resume(missing, "e-1", "interrupt_ext_1", {"action": "synthesize"}),
        lambda: daemon.rewind(missing, "e-1"),
    ]
    for call in calls:
        with pytest.raises(SessionNotFound) as info:
            await call()
        assert isinstance(info.value, NotFound) and info.value.data == {"sessionId": missing}
    assert await daemon.list_sessions() == []  # nothing was made on the way
    assert not daemon.cancel(missing)


@pytest.mark.parametrize("bad", ["", "-leading-dash", "has space", "../../etc/passwd", "a" * 129, "é", None, 7])
async def test_bad_session_ids_are_invalid_input(daemon: Daemon, bad: Any) -> None:
    for call in [
        lambda: daemon.get_session(bad),
        lambda: daemon.live_session(bad),
        lambda: daemon.replay(bad),
        lambda: daemon.delete_session(bad),
        lambda: daemon.rename_session(bad, "t"),
        lambda: daemon.prompt(bad, "What is HyDE?"),
        lambda: daemon.resume(bad, "e-1", "interrupt_ext_1", {"action": "synthesize"}),
        lambda: daemon.rewind(bad, "e-1"),
    ]:
        with pytest.raises(InvalidInput, match="session id"):
            await call()
    assert await daemon.list_sessions() == []


async def test_the_longest_session_id_is_valid(daemon: Daemon) -> None:
    with pytest.raises(SessionNotFound):
        await daemon.get_session("a" * 128)


async def test_bad_titles_and_prompts_are_refused_and_change_nothing(daemon: Daemon) -> None:
    row = await daemon.create_session(title="Kept")
    before = await daemon.live_session(row.id)
    for title in ["", "   ", "\n\t\x00", "x" * (MAX_TITLE_CHARS + 1), "bad \ud800 surrogate", 5, None]:
        with pytest.raises(InvalidInput) as info:
            await daemon.rename_session(row.id, title)  # type: ignore[arg-type]
        assert info.value.kind == "invalid_input"
        if title is not None:  # None means "no title" to create_session
            with pytest.raises(InvalidInput):
                await daemon.create_session(title=title)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as info:
        await daemon.rename_session(row.id, "y" * (MAX_TITLE_CHARS + 5))
    assert info.value.data == {"length": MAX_TITLE_CHARS + 5}

    for text in ["", "   \n", None, 42, "x" * (MAX_PROMPT_CHARS + 1), "lone \udfff surrogate"]:
        with pytest.raises(InvalidInput):
            await daemon.prompt(row.id, text)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=f"at most {MAX_PROMPT_CHARS}"):
        await daemon.prompt(row.id, "x" * (MAX_PROMPT_CHARS + 1))
    for invocation_id in ["", "x" * 257, None]:
        with pytest.raises(InvalidInput):
            await daemon.rewind(row.id, invocation_id)  # type: ignore[arg-type]
    too_long = "i" * (MAX_INTERRUPT_ID_CHARS + 1)
    for inv, intr in [("", "interrupt_ext_1"), ("e-1", ""), (too_long, "interrupt_ext_1"), ("e-1", too_long)]:
        with pytest.raises(InvalidInput):
            await daemon.resume(row.id, inv, intr, {"action": "synthesize"})

    after = await daemon.live_session(row.id)
    assert after.live == before.live and after.title == "Kept"
    assert [r.id for r in await daemon.list_sessions()] == [row.id]  # no refused create made a session


async def test_a_prompt_of_the_longest_length_is_taken(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    result = await daemon.prompt(sid, "retrieval " * (MAX_PROMPT_CHARS // 10))
    assert result.stop_reason == "end_turn"


def test_a_title_from_a_prompt_is_one_short_line() -> None:
    assert title_from_prompt("  What is\n\tHyDE?  ") == "What is HyDE?"
    long = "How do dense retrievers compare with sparse ones such as BM25 on out-of-domain benchmarks?"
    title = title_from_prompt(long)
    assert len(title) <= TITLE_FROM_PROMPT_CHARS and title.endswith("…") and long.startswith(title[:-1])
    assert not title[:-1].endswith(" ")  # cut at a word
    assert title_from_prompt("x" * 500) == "x" * (TITLE_FROM_PROMPT_CHARS - 1) + "…"


# --- turns ----------------------------------------------------------------------------------------


async def test_a_turn_publishes_its_updates_in_order_to_every_watcher(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    other = (await daemon.create_session()).id
    with daemon.watch(sid) as first, daemon.watch(sid) as second, daemon.watch(other) as elsewhere:
        result = await daemon.prompt(sid, "What is HyDE?")
        seen = first.take_nowait()
        assert second.take_nowait() == seen
        assert elsewhere.take_nowait() == []
    assert result.stop_reason == "end_turn" and result.pending_hitl is None and result.invocation_id
    assert kinds(seen) == [
        "MessageChunk(user)", "Title", "ThoughtChunk", "ToolCall", "ToolProgress", "ToolResult",
        "MessageChunk(assistant)", "Usage",
    ]
    user = seen[0]
    assert isinstance(user, MessageChunk) and user.text == "What is HyDE?"
    assert seen[1] == Title("What is HyDE?")  # the first prompt names a new session
    call = next(u for u in seen if isinstance(u, ToolCall))
    done = next(u for u in seen if isinstance(u, ToolResult))
    assert call.name == "search_library" and call.args == {"query": "What is HyDE?"}
    assert done.call_id == call.call_id and not done.failed and done.response["passages"]
    chunks = [u for u in seen if isinstance(u, MessageChunk) and u.role == "assistant"]
    assert len(chunks) > 1  # streamed
    assert {u.invocation_id for u in seen if isinstance(u, (MessageChunk, ThoughtChunk))} == {result.invocation_id}
    assert len({u.message_id for u in chunks}) == 1
    assert "".join(u.text for u in chunks) == await answer_text(daemon, sid, result.invocation_id)
    usage = seen[-1]
    assert isinstance(usage, Usage) and usage.prompt_tokens > 0 and not usage.compacted

    # Later prompts keep the title; a renamed session keeps its name.
    with daemon.watch(sid) as w:
        await daemon.prompt(sid, "And what about DPR?")
        assert not [u for u in w.take_nowait() if isinstance(u, Title)]
    assert (await daemon.get_session(sid))["title"] == "What is HyDE?"
    titled = (await daemon.create_session(title="Mine")).id
    await daemon.prompt(titled, "What is HyDE?")
    assert (await daemon.get_session(titled))["title"] == "Mine"


async def test_a_closed_subscription_hears_nothing_more(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    sub = daemon.watch(sid)
    sub.close()
    await daemon.prompt(sid, "What is HyDE?")
    assert sub.take_nowait() == [] and sub.ended


async def test_a_session_in_a_turn_is_busy_and_a_cancelled_turn_leaves_it_usable(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = (await daemon.create_session()).id
    free = (await daemon.create_session()).id
    gate = Gate(daemon, monkeypatch)
    turn = await gate.running(daemon.prompt(sid, "What is HyDE?"))
    refused: list[Callable[[], Awaitable[Any]]] = [
        lambda: daemon.prompt(sid, "Another question"),
        lambda: daemon.rename_session(sid, "Renamed"),
        lambda: daemon.delete_session(sid),
        lambda: daemon.rewind(sid, "e-1"),
        lambda: daemon.resume(sid, "e-1", "interrupt_ext_1", {"action": "synthesize"}),
    ]
    for call in refused:
        with pytest.raises(SessionBusy) as info:
            await call()
        assert info.value.data == {"sessionId": sid, "activity": "turn"}
    assert (await daemon.get_session(sid))["title"] == "What is HyDE?"  # reads are never refused
    await daemon.rename_session(free, "Other sessions are free")

    assert not daemon.cancel(free)  # no turn runs there
    assert daemon.cancel(sid)
    gate.opened.set()
    result = await asyncio.wait_for(turn, 10)
    assert result.stop_reason == "cancelled" and result.pending_hitl is None
    assert not daemon.cancel(sid)  # over

    after = await daemon.prompt(sid, "Which encoders does DPR use?")
    assert after.stop_reason == "end_turn" and after.invocation_id != result.invocation_id
    assert "KARPDPR1" in await answer_text(daemon, sid, after.invocation_id)
    await daemon.rename_session(sid, "Free again")


async def test_rewind_restores_what_the_turn_was_asked_with_and_keeps_the_title(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    context = PromptContext.build(
        items=[{"item_key": "GAOHYDE1", "title": "HyDE"}],
        snippets=[{"item_key": "GAOHYDE1", "text": "a hypothetical document", "page": 3, "key": "ANNOT001"}],
    )
    first = await daemon.prompt(sid, "What does this paper do?", context)
    second = await daemon.prompt(sid, "And DPR?", PromptContext.build(mode="collection", collection="COLL0001"))
    assert first.invocation_id and second.invocation_id

    back = await daemon.rewind(sid, second.invocation_id)
    assert back["restored"] == {
        "mode": "collection", "active_context_items": None, "collection": "COLL0001", "snippets": [], "text": "And DPR?",
    }
    assert {m["invocation_id"] for m in back["session"]["messages"]} == {first.invocation_id}
    assert back["session"]["title"] == "What does this paper do?"

    await daemon.rename_session(sid, "Renamed after the turn")
    back = await daemon.rewind(sid, first.invocation_id)
    assert back["restored"] == {
        "mode": "papers",
        "active_context_items": [{"item_key": "GAOHYDE1", "title": "HyDE"}],
        "collection": None,
        "snippets": [{"kind": "text", "item_key": "GAOHYDE1", "text": "a hypothetical document", "page": 3, "key": "ANNOT001"}],
        "text": "What does this paper do?",
    }
    # Everything is gone but the title, which the user gave after the rewound turn.
    assert back["session"]["messages"] == [] and back["session"]["title"] == "Renamed after the turn"
    assert (await daemon.get_session(sid))["title"] == "Renamed after the turn"
    assert [type(u) for u in await daemon.replay(sid)] == [Title]
    with pytest.raises(NotFound) as info:
        await daemon.rewind(sid, first.invocation_id)  # rewound already: no such turn any more
    assert not isinstance(info.value, SessionNotFound)


async def test_a_first_turn_rewound_keeps_the_title_it_gave(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    first = await daemon.prompt(sid, "What is HyDE?")
    back = await daemon.rewind(sid, first.invocation_id or "")
    # The turn set the title; replaying state to before it would say "New Chat".
    assert back["session"]["title"] == "What is HyDE?" and back["restored"]["mode"] == "library"
    assert (await daemon.list_sessions())[0].title == "What is HyDE?"


# --- checkpoints ----------------------------------------------------------------------------------


async def test_a_checkpoint_without_ask_stays_pending_and_resume_extends(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    with daemon.watch(sid) as w:
        paused = await daemon.prompt(sid, TWO, ask=None)
        seen = w.take_nowait()
    hitl = paused.pending_hitl
    assert paused.stop_reason == "end_turn" and hitl is not None
    assert (hitl["invocation_id"], hitl["interrupt_id"]) == (paused.invocation_id, "interrupt_ext_1")
    assert kinds(seen)[-3:] == ["ToolProgress", "Checkpoint", "Usage"]
    checkpoint = next(u for u in seen if isinstance(u, Checkpoint))
    assert checkpoint.to_json() == hitl
    assert isinstance(seen[-1], Usage) and seen[-1].reason == "paused"  # nothing compacted mid-turn
    assert (await daemon.get_session(sid))["pending_hitl"] == hitl

    for wrong in [(paused.invocation_id, "interrupt_ext_2"), ("e-other", "interrupt_ext_1")]:
        with pytest.raises(CheckpointNotPending) as info:
            await daemon.resume(sid, *wrong, {"action": "synthesize"})  # type: ignore[arg-type]
        assert info.value.data["pendingInterruptId"] == "interrupt_ext_1"
    with pytest.raises(InvalidInput):
        await daemon.resume(sid, hitl["invocation_id"], "interrupt_ext_1", {"action": "pray"})

    # Guidance is searched first, for one more round: the turn stops at a further checkpoint.
    with daemon.watch(sid) as w:
        again = await daemon.resume(sid, hitl["invocation_id"], "interrupt_ext_1",
                                    {"action": "extend_budget", "guidance": "  hypothetical documents  "})
        resumed = w.take_nowait()
    assert again.invocation_id == paused.invocation_id and again.pending_hitl is not None
    assert again.pending_hitl["interrupt_id"] == "interrupt_ext_2"
    assert again.pending_hitl["payload"]["addressed_aspects"][-1] == "hypothetical documents"
    assert resumed[0] == CheckpointAnswered(
        hitl["invocation_id"], "interrupt_ext_1", {"action": "extend_budget", "guidance": "hypothetical documents"}
    )
    assert kinds(resumed)[1:] == ["ToolProgress", "Checkpoint", "Usage"]
    with pytest.raises(CheckpointNotPending) as info:  # answered: not again
        await daemon.resume(sid, hitl["invocation_id"], "interrupt_ext_1", {"action": "synthesize"})
    assert info.value.data["pendingInterruptId"] == "interrupt_ext_2"

    with daemon.watch(sid) as w:
        done = await daemon.resume(sid, hitl["invocation_id"], "interrupt_ext_2", {"action": "extend_budget"})
        resumed = w.take_nowait()
    assert done.stop_reason == "end_turn" and done.pending_hitl is None and done.invocation_id == paused.invocation_id
    assert isinstance(resumed[0], CheckpointAnswered) and isinstance(resumed[-1], Usage)
    assert "ToolResult" in kinds(resumed) and "MessageChunk(assistant)" in kinds(resumed)
    assert "GAOHYDE1" in await answer_text(daemon, sid, paused.invocation_id)
    assert (await daemon.get_session(sid))["pending_hitl"] is None
    with pytest.raises(CheckpointNotPending) as info:
        await daemon.resume(sid, hitl["invocation_id"], "interrupt_ext_2", {"action": "synthesize"})
    assert "pendingInterruptId" not in info.value.data  # none is pending now


async def test_resume_with_synthesize_answers_from_what_was_found(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    paused = await daemon.prompt(sid, TWO)
    assert paused.pending_hitl is not None
    done = await daemon.resume(sid, paused.pending_hitl["invocation_id"], "interrupt_ext_1", {"action": "synthesize"})
    assert done.stop_reason == "end_turn" and done.pending_hitl is None
    answer = await answer_text(daemon, sid, paused.invocation_id)
    assert "LEWIS202" in answer and "GAOHYDE1" not in answer  # the second aspect was never searched
    with pytest.raises(CheckpointNotPending):
        await daemon.resume(sid, paused.pending_hitl["invocation_id"], "interrupt_ext_1", {"action": "extend_budget"})


async def test_a_session_without_a_checkpoint_has_none_to_answer(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    with pytest.raises(CheckpointNotPending):
        await daemon.resume(sid, "e-1", "interrupt_ext_1", {"action": "synthesize"})
    await daemon.prompt(sid, "What is HyDE?")
    with pytest.raises(CheckpointNotPending):
        await daemon.resume(sid, "e-1", "interrupt_ext_1", {"action": "synthesize"})


async def test_an_ask_that_answers_continues_the_same_turn(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    asked: list[dict[str, Any]] = []

    async def ask(checkpoint: dict[str, Any]) -> dict[str, Any]:
        asked.append(checkpoint)
        assert daemon.locks.activity(sid) == "turn"  # the session stays held while the user decides
        return {"action": "extend_budget"}

    with daemon.watch(sid) as w:
        result = await daemon.prompt(sid, TWO, ask=ask)
        seen = w.take_nowait()
    assert result.stop_reason == "end_turn" and result.pending_hitl is None
    assert [c["interrupt_id"] for c in asked] == ["interrupt_ext_1"] and asked[0]["invocation_id"] == result.invocation_id
    answered = [u for u in seen if isinstance(u, CheckpointAnswered)]
    assert answered == [CheckpointAnswered(result.invocation_id or "", "interrupt_ext_1", {"action": "extend_budget"})]
    assert seen.index(answered[0]) == next(i for i, u in enumerate(seen) if isinstance(u, Checkpoint)) + 1
    assert [type(u) for u in seen].count(Usage) == 1 and isinstance(seen[-1], Usage)


# --- replay ---------------------------------------------------------------------------------------


async def test_replay_shows_what_the_watchers_saw(daemon: Daemon) -> None:
    sid = (await daemon.create_session()).id
    with daemon.watch(sid) as w:
        await daemon.prompt(sid, "What is HyDE?")
        await daemon.rename_session(sid, "HyDE and RAG")
        paused = await daemon.prompt(sid, TWO)
        seen = w.take_nowait()
    assert paused.pending_hitl is not None
    replayed = await daemon.replay(sid)
    assert replayed == as_replayed(seen)
    assert replayed[-2] == Checkpoint.from_json(paused.pending_hitl) and replayed[-1] == Title("HyDE and RAG")

    # Answered, the checkpoint leaves the replay; the resumed part of the turn joins it.
    with daemon.watch(sid) as w:
        await daemon.resume(sid, paused.pending_hitl["invocation_id"], "interrupt_ext_1", {"action": "synthesize"})
        seen += w.take_nowait()
    replayed = await daemon.replay(sid)
    assert not any(isinstance(u, Checkpoint) for u in replayed)
    assert replayed == [u for u in as_replayed(seen) if not isinstance(u, Checkpoint)]


# --- storage --------------------------------------------------------------------------------------


async def test_storage_stats_and_maintenance_reports(daemon: Daemon, tmp_path: Path) -> None:
    empty = await daemon.storage_stats()
    assert set(empty) == set(get_type_hints(StorageStats))
    for key, kind in get_type_hints(StorageStats).items():
        assert isinstance(empty[key], kind), key  # type: ignore[literal-required]
    assert empty["db_path"] == str(tmp_path / "zocrates-data" / "sessions.db")
    assert (empty["session_count"], empty["event_count"]) == (0, 0)

    sid = (await daemon.create_session()).id
    await daemon.prompt(sid, "What is HyDE?")
    stats = await daemon.storage_stats()
    assert stats["session_count"] == 1 and stats["event_count"] == len((await daemon.live_session(sid)).live) > 2
    assert stats["page_count"] > 0 and 0.0 <= stats["freelist_ratio"] <= 1.0
    assert stats["db_size_bytes"] + stats["wal_size_bytes"] >= stats["page_size"]

    report = await daemon.run_maintenance()
    assert set(report) == {"empty_deleted", "retention_deleted", "vacuum", "duration_ms"}
    assert (report["empty_deleted"], report["retention_deleted"]) == (0, 0)  # a fresh session is kept
    assert [r.id for r in await daemon.list_sessions()] == [sid]
