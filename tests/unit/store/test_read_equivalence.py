"""The fast read path equals formatting ADK's own Session, on histories with everything in them.

Sessions are written through ADK itself (DatabaseSessionService.append_event, Runner.rewind_async),
never by hand, so the test also pins our reading of ADK's storage format (ordering, timestamps,
rewind semantics) to the ADK version we run on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from adkevents import answer, append_all, call, text
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.adk.runners import Runner
from google.adk.sessions import DatabaseSessionService
from google.genai import types

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.store import APP_NAME, USER_ID
from zocratesd.store.database import db_path
from zocratesd.store.writer import format_session_for_ui

pytestmark = pytest.mark.anyio


@pytest.fixture
async def world(tmp_path: Path) -> Any:
    daemon = Daemon(tmp_path, ZocratesConfig())
    await daemon.start()
    # ADK's own service on the same file (not the daemon's, whose reads and appends are our fast
    # path): what it writes and reads is the reference.
    svc = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{db_path(tmp_path)}", connect_args={"timeout": 30})
    runner = Runner(app=App(name=APP_NAME, root_agent=LlmAgent(name="coordinator", model="gemini-2.0-flash")), session_service=svc)
    yield daemon, svc, runner
    await svc.close()
    await daemon.aclose()


async def assert_equivalent(daemon: Daemon, svc: Any, session_id: str) -> dict[str, Any]:
    session = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=session_id)
    reference = format_session_for_ui(session)
    # The session view carries the session's settings (core/session_config.py), derived from the
    # state: the reference derives them from ADK's state, the fast path from the stored row.
    config = daemon.session_config
    reference["settings"] = config.view(config.from_state(session.state))
    fast = await daemon.get_session(session_id)
    assert fast == reference
    return fast


async def test_plain_conversation_with_thoughts_and_tools(world: Any) -> None:
    daemon, svc, _ = world
    row = await daemon.create_session(title="RAG survey", cwd="/home/u/notes")
    await append_all(
        svc,
        row.id,
        [
            text("user", "inv-1", "What is retrieval-augmented generation?"),
            call("inv-1", "fc-1", "search_library", {"query": "RAG"}, with_text="Let me search."),
            answer("inv-1", "fc-1", "search_library", {"result": "3 papers"}),
            text("coordinator", "inv-1", "RAG combines retrieval with generation [1].", thought="The user wants a definition."),
            text("user", "inv-2", "And HyDE?"),
            text("coordinator", "inv-2", "HyDE generates a hypothetical document first [2]."),
        ],
    )
    ui = await assert_equivalent(daemon, svc, row.id)
    assert ui["title"] == "RAG survey"
    assert ui["settings"]["research_budget"] == 3  # the config's default
    await daemon.set_config_option(row.id, "research_budget", "7")
    await daemon.set_config_option(row.id, "compaction", False)
    ui = await assert_equivalent(daemon, svc, row.id)
    assert (ui["settings"]["research_budget"], ui["settings"]["compaction"]) == (7, False)
    assert [m["role"] for m in ui["messages"]] == ["user", "assistant", "assistant", "user", "assistant"]
    assert ui["messages"][1]["text"] == "Let me search."
    assert ui["messages"][2]["thought"] == "The user wants a definition."
    assert ui["pending_hitl"] is None


async def test_rewinds_hide_the_rewound_turns_and_keep_the_title(world: Any) -> None:
    daemon, svc, runner = world
    row = await daemon.create_session(title="Kept title")
    await append_all(
        svc,
        row.id,
        [
            text("user", "inv-1", "turn one"),
            text("coordinator", "inv-1", "reply one"),
            text("user", "inv-2", "turn two"),
            call("inv-2", "fc-2", "search_library", {"query": "two"}),
            answer("inv-2", "fc-2", "search_library", {"result": "r"}),
            text("coordinator", "inv-2", "reply two"),
            text("user", "inv-3", "turn three"),
            text("coordinator", "inv-3", "reply three"),
        ],
    )
    await runner.rewind_async(user_id=USER_ID, session_id=row.id, rewind_before_invocation_id="inv-2")
    ui = await assert_equivalent(daemon, svc, row.id)
    assert [m["text"] for m in ui["messages"]] == ["turn one", "reply one"]
    assert ui["title"] == "Kept title"
    # A new turn after the rewind, then a rewind of that one too: markers stack.
    await append_all(svc, row.id, [text("user", "inv-4", "turn four"), text("coordinator", "inv-4", "reply four")])
    await runner.rewind_async(user_id=USER_ID, session_id=row.id, rewind_before_invocation_id="inv-4")
    await append_all(svc, row.id, [text("user", "inv-5", "turn five")])
    ui = await assert_equivalent(daemon, svc, row.id)
    assert [m["text"] for m in ui["messages"]] == ["turn one", "reply one", "turn five"]


async def test_compactions_scopes_and_checkpoints(world: Any) -> None:
    daemon, svc, runner = world
    row = await daemon.create_session()
    first = [text("user", f"inv-{i}", f"question {i}") for i in range(3)]
    await append_all(svc, row.id, first)
    session = await svc.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=row.id)
    compaction = Event(
        author="user",
        invocation_id=Event.new_id(),
        actions=EventActions(
            compaction=EventCompaction(
                start_timestamp=session.events[1].timestamp,
                end_timestamp=session.events[-1].timestamp,
                compacted_content=types.Content(role="model", parts=[types.Part(text="SUMMARY of 3 questions")]),
            )
        ),
    )
    await append_all(
        svc,
        row.id,
        [
            compaction,
            text("user", "inv-9", "deep research please"),
            call("inv-9", "fc-9", "search_library", {"query": "deep"}),
            # Raw retrieval inside the pipeline: scoped, never shown.
            text("search_pipeline", "inv-9", "raw chunk 1", isolation_scope="search_library_pipeline:fc-9"),
            Event(
                author="search_pipeline",
                invocation_id="inv-9",
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(
                            function_call=types.FunctionCall(
                                id="interrupt_ext_1",
                                name="adk_request_input",
                                args={"interruptId": "interrupt_ext_1", "message": "Budget reached", "payload": {"aspects": ["b"]}},
                            )
                        )
                    ],
                ),
                long_running_tool_ids={"interrupt_ext_1"},
                actions=EventActions(state_delta={"hitl_snapshot": {"evidence": ["e1"]}}),
            ),
        ],
    )
    ui = await assert_equivalent(daemon, svc, row.id)
    assert "SUMMARY of 3 questions" not in str(ui["messages"])
    assert "raw chunk 1" not in str(ui["messages"])
    assert ui["pending_hitl"] == {
        "invocation_id": "inv-9",
        "interrupt_id": "interrupt_ext_1",
        "message": "Budget reached",
        "payload": {"aspects": ["b"]},
    }
    assert ui["title"] == "New Chat"

    # The user's answer alone (a daemon that died right after storing it) leaves it answerable ...
    await append_all(svc, row.id, [answer("inv-9", "interrupt_ext_1", "adk_request_input", {"action": "synthesize"}, author="user")])
    ui = await assert_equivalent(daemon, svc, row.id)
    assert ui["pending_hitl"] is not None and ui["pending_hitl"]["interrupt_id"] == "interrupt_ext_1"
    # ... and the turn going on after it (the search's result on the coordinator's branch) closes it.
    await append_all(svc, row.id, [answer("inv-9", "fc-9", "search_library", {"passages": []}),
                                   text("coordinator", "inv-9", "Nothing found.")])
    ui = await assert_equivalent(daemon, svc, row.id)
    assert ui["pending_hitl"] is None

    # Rewinding before the compaction drops it and the turns after it; the raw questions stay.
    await runner.rewind_async(user_id=USER_ID, session_id=row.id, rewind_before_invocation_id="inv-9")
    ui = await assert_equivalent(daemon, svc, row.id)
    assert [m["text"] for m in ui["messages"]] == ["question 0", "question 1", "question 2"]


async def test_rewound_checkpoint_is_not_pending(world: Any) -> None:
    daemon, svc, runner = world
    row = await daemon.create_session()
    await append_all(
        svc,
        row.id,
        [
            text("user", "inv-1", "find papers"),
            Event(
                author="pipeline",
                invocation_id="inv-1",
                content=types.Content(
                    role="model",
                    parts=[types.Part(function_call=types.FunctionCall(
                        id="interrupt_ext_1", name="adk_request_input", args={"message": "more?"}))],
                ),
            ),
        ],
    )
    assert (await assert_equivalent(daemon, svc, row.id))["pending_hitl"]["interrupt_id"] == "interrupt_ext_1"
    await runner.rewind_async(user_id=USER_ID, session_id=row.id, rewind_before_invocation_id="inv-1")
    ui = await assert_equivalent(daemon, svc, row.id)
    assert ui["pending_hitl"] is None and ui["messages"] == []


async def test_equal_timestamps_order_like_adk(world: Any) -> None:
    """ADK breaks timestamp ties by event id; so must we."""
    daemon, svc, _ = world
    row = await daemon.create_session()
    ts = time.time()
    events = [text("user" if i % 2 == 0 else "coordinator", f"inv-{i // 2}", f"m{i}", timestamp=ts) for i in range(12)]
    await append_all(svc, row.id, events)
    await assert_equivalent(daemon, svc, row.id)


async def test_listing_matches_adk(world: Any) -> None:
    daemon, svc, _ = world
    made = [await daemon.create_session(title=f"t{i}") for i in range(5)]
    await daemon.rename_session(made[2].id, "renamed")
    rows = await daemon.list_sessions()
    assert [r.id for r in rows] == [m.id for m in made]  # oldest first by creation
    listed = await svc.list_sessions(app_name=APP_NAME, user_id=USER_ID)
    adk = {s.id: s for s in listed.sessions}
    for r in rows:
        assert r.updated_at == adk[r.id].last_update_time
        assert r.title == adk[r.id].state["title"]
    assert rows[2].title == "renamed"
