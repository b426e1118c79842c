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


def test_a_checkpoint_is_a_request_input_event_and_other_traffic_is_not_shown() -> None:
    event = to_sse(Checkpoint("e-1", "interrupt_ext_1", "Search further?", {"budget": 2}))
    assert event == {"type": "request_input", "invocation_id": "e-1", "interrupt_id": "interrupt_ext_1",
                     "message": "Search further?", "payload": {"budget": 2}}
    for update in [
        MessageChunk("user", "e0", "question"),
        ToolCall("c2", "search_library", {}),
        ToolResult("c2", "search_library", {}, False),
        Title("T"),
        ToolProgress("c2", "Round 1", {"n": 1}),
        CheckpointAnswered("e-1", "interrupt_ext_1", {"action": "synthesize"}),
        Usage(1, False, 2, 0.0, False, "gate"),
    ]:
        assert to_sse(update) is None, update


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
