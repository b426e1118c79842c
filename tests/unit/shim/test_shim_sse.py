"""The shim's SSE events from face-neutral updates (zocratesd/shim/turns.py)."""

from __future__ import annotations

import json

import pytest

from zocratesd.shim.turns import sse_line, to_sse
from zocratesd.updates import (
    Checkpoint,
    CheckpointAnswered,
    MessageChunk,
    ThoughtChunk,
    Title,
    ToolCall,
    ToolProgress,
    ToolResult,
    Usage,
)


def test_answer_and_thought_chunks_are_parts() -> None:
    assert to_sse(MessageChunk("assistant", "e1", "Hi")) == {
        "type": "parts", "parts": [{"text": "Hi", "thought": False}], "author": "coordinator",
        "invocation_id": None, "partial": True,
    }
    thought = to_sse(ThoughtChunk("e1", "hmm", "e-1"))
    assert thought is not None and thought["parts"] == [{"text": "hmm", "thought": True}]
    assert thought["invocation_id"] == "e-1"


def test_a_checkpoint_is_a_request_input_event_and_the_users_own_text_is_not_shown() -> None:
    event = to_sse(Checkpoint("e-1", "interrupt_ext_1", "Search further?", {"budget": 2}))
    assert event == {"type": "request_input", "invocation_id": "e-1", "interrupt_id": "interrupt_ext_1",
                     "message": "Search further?", "payload": {"budget": 2}}
    for update in [
        MessageChunk("user", "e0", "question"),
        Title("T"),
        Usage(1, False, 2, 0.0, False, "gate"),
    ]:
        assert to_sse(update) is None, update


PASSAGE = {"n": 1, "item_key": "LEWIS202", "attachment_key": "ATT00001", "title": "RAG", "creators": ["Lewis"], "year": 2020,
           "page": 3, "page_label": "127", "citation": "Lewis 2020, p. 127", "citation_key": "lewis2020rag",
           "text": "a long passage " * 100, "score": 0.9, "focal": False}


def test_tool_traffic_and_rounds_are_progress_events() -> None:
    assert to_sse(ToolCall("c2", "search_library", {"query": "rag"})) == {
        "type": "progress", "kind": "tool_call", "call_id": "c2", "name": "search_library", "args": {"query": "rag"}}
    meta = {"n": 2, "aspect": "HyDE", "hits": 4, "item_keys": ["GAOHYDE1"]}
    assert to_sse(ToolProgress("c2", "Round 1: a\nRound 2: b", meta)) == {
        "type": "progress", "kind": "round", "call_id": "c2", "round": meta, "text": "Round 1: a\nRound 2: b"}
    # A result tells the cited passages without their text (it stays in the session).
    result = to_sse(ToolResult("c2", "search_library", {"query": "rag", "passages": [PASSAGE, "junk"]}, False))
    assert result == {"type": "progress", "kind": "tool_result", "call_id": "c2", "name": "search_library", "failed": False,
                      # page_label: what the answer cites; the page links need it to find the page (the
                      # real-Zotero test showed answers citing p. 127 with no link to open it).
                      # citation_key: shown with each source, for the writer to cite it.
                      "passages": [{k: PASSAGE[k] for k in ("n", "item_key", "attachment_key", "title", "creators", "year", "page", "page_label",
                                                            "citation", "citation_key")}],
                      "error": None}
    failed = to_sse(ToolResult("c3", "nope", {"error": "x" * 2000}, True))
    assert failed is not None and failed["failed"] is True and failed["passages"] == [] and failed["error"] == "x" * 500
    assert to_sse(CheckpointAnswered("e-1", "interrupt_ext_1", {"action": "synthesize"})) == {
        "type": "progress", "kind": "checkpoint_answered", "invocation_id": "e-1", "interrupt_id": "interrupt_ext_1",
        "response": {"action": "synthesize"}}


def test_done_says_checkpoint_when_the_turn_paused() -> None:
    from zocratesd.core.daemon import TurnResult
    from zocratesd.shim.turns import done_event

    hitl = {"invocation_id": "e-1", "interrupt_id": "interrupt_1", "message": "More?", "payload": {}}
    session = {"id": "s1"}
    assert done_event(TurnResult("end_turn", "e-1"), session) == {
        "type": "done", "invocation_id": "e-1", "stop_reason": "end_turn", "checkpoint": None, "session": session}
    paused = done_event(TurnResult("end_turn", "e-1", hitl), session)
    assert paused["stop_reason"] == "checkpoint" and paused["checkpoint"] == hitl
    # Cancelled while paused: it says cancelled, and the checkpoint stays pending.
    cancelled = done_event(TurnResult("cancelled", "e-1", hitl), session)
    assert cancelled["stop_reason"] == "cancelled" and cancelled["checkpoint"] == hitl


def test_one_event_is_one_data_line_even_with_newlines_and_odd_text() -> None:
    for text in ["two\nlines\r\n", "é ✓ 𝄞", "\ud800 lone surrogate"]:
        line = sse_line({"type": "parts", "parts": [{"text": text, "thought": False}]})
        assert line.startswith(b"data: ") and line.endswith(b"\n\n")
        body = line[len(b"data: "):-2]
        assert b"\n" not in body and b"\r" not in body
        assert json.loads(body)["parts"][0]["text"] == text


@pytest.mark.anyio
async def test_a_refusal_is_a_refusal_even_while_another_turn_streams() -> None:
    """A /chat refused as busy answers a plain error, even when the running turn's updates reach
    the refused request's subscription first (the load test's race: the refusal used to be
    streamed as an SSE `error` event, because any update counted as "started")."""
    import anyio

    from zocratesd.core.watchers import Watchers
    from zocratesd.errors import SessionBusy
    from zocratesd.shim.turns import start_turn

    watchers = Watchers()

    class Core:
        def watch(self, session_id: str) -> object:
            return watchers.watch(session_id)

    async def busy(started: object) -> object:
        # The other turn publishes before this one finds the session held.
        await watchers.publish("s1", MessageChunk("assistant", "e9", "the other turn's words"))
        await anyio.sleep(0.01)
        raise SessionBusy("s1", "turn")

    async with anyio.create_task_group() as tg:
        stream = await start_turn(Core(), tg, "s1", busy, opened=lambda: None, closed=lambda: None)  # type: ignore[arg-type]
    assert isinstance(stream.refused, SessionBusy)


def test_error_bodies_are_snake_case_whatever_the_core_names() -> None:
    from zocratesd.errors import CheckpointNotPending, SessionBusy
    from zocratesd.shim.errors import core_error_response, snake_case

    assert [snake_case(k) for k in ("sessionId", "pendingInterruptId", "field", "item_key", "blockType")] == [
        "session_id", "pending_interrupt_id", "field", "item_key", "block_type"]
    body = json.loads(core_error_response(SessionBusy("s1", "turn")).body)
    assert body["error"] == {"code": "session_busy", "message": body["error"]["message"], "session_id": "s1", "activity": "turn"}
    body = json.loads(core_error_response(CheckpointNotPending("no", sessionId="s1", pendingInvocationId="e-1")).body)
    assert body["error"]["pending_invocation_id"] == "e-1" and "pendingInvocationId" not in body["error"]
