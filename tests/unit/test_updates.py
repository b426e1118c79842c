"""Every kind of update (zocratesd/updates.py) translates on both faces: ACP and SSE."""

from __future__ import annotations

import json
import typing

import pytest

from zocratesd.rpc.updates import to_acp
from zocratesd.shim.turns import to_sse
from zocratesd.updates import (
    Checkpoint,
    CheckpointAnswered,
    ConfigChoice,
    ConfigOption,
    ConfigOptions,
    MessageChunk,
    Starting,
    ThoughtChunk,
    Title,
    ToolCall,
    ToolProgress,
    ToolResult,
    Update,
    Usage,
    event_updates,
)

# One of each kind; a kind added to `Update` without a sample here fails the test below.
SAMPLES: list[Update] = [
    MessageChunk("user", "e0", "What is RAG?", "inv-1"),
    MessageChunk("assistant", "e1", "RAG combines", "inv-1"),
    ThoughtChunk("e1", "thinking", "inv-1"),
    ToolCall("c1", "search_library", {"query": "RAG"}),
    ToolResult("c1", "search_library", {"error": "boom"}, True),
    Title("RAG"),
    ToolProgress("c1", "Round 1", {"n": 1}),
    Checkpoint("inv-1", "interrupt_ext_1", "Search further?", {"budget": 1}),
    CheckpointAnswered("inv-1", "interrupt_ext_1", {"action": "synthesize"}),
    Usage(120, False, 100_000, 1.5, True, "probe_yes"),
    ConfigOptions((ConfigOption("scope", "Scope", "Where", "mode", "library", (ConfigChoice("library", "Library"),)),
                   ConfigOption("compaction", "Compaction", "On or off", "model_config", True)), "editor#1"),
    Starting("the daemon is starting"),
]


def test_the_samples_cover_every_kind() -> None:
    assert {type(u) for u in SAMPLES} == set(typing.get_args(Update))


@pytest.mark.parametrize("update", SAMPLES, ids=lambda u: type(u).__name__)
def test_every_kind_translates_on_both_faces(update: Update) -> None:
    acp = to_acp(update)
    assert isinstance(acp["sessionUpdate"], str)
    json.dumps(acp)  # plain JSON
    sse = to_sse(update)
    assert sse is None or isinstance(sse["type"], str)
    json.dumps(sse)


def test_updates_are_frozen_values() -> None:
    title = Title("a")
    with pytest.raises(AttributeError):
        title.title = "b"  # type: ignore[misc]
    assert title == Title("a") and not hasattr(title, "__dict__")  # slots


def test_the_acp_wire_of_a_replayed_event() -> None:
    ev = {
        "id": "e1", "author": "coordinator", "invocation_id": "inv-1",
        "content": {"parts": [
            {"text": "hmm", "thought": True},
            {"text": "Answer"},
            {"function_call": {"id": "c1", "name": "search_library", "args": {"query": "q"}}},
            {"function_response": {"id": "c1", "name": "search_library", "response": {"hits": []}}},
        ]},
    }
    assert [to_acp(u) for u in event_updates(ev)] == [
        {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}, "messageId": "e1"},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Answer"}, "messageId": "e1"},
        {"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "search_library", "kind": "search",
         "status": "in_progress", "rawInput": {"query": "q"}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed", "rawOutput": {"hits": []}},
    ]
    # Text already streamed live is not repeated by the final event; a live turn's id goes on chunks.
    assert list(event_updates(ev, streamed=frozenset({"message", "thought"}), invocation_id="inv-1"))[:1] == [
        ToolCall("c1", "search_library", {"query": "q"})
    ]
    user = {"id": "e0", "author": "user", "content": {"parts": [{"text": "Q"}]}}
    assert list(event_updates(user, invocation_id="inv-1")) == [MessageChunk("user", "e0", "Q", "inv-1")]
    assert list(event_updates({**user, "branch": "coordinator.search@c1"})) == []  # a pipeline's own event


def test_checkpoint_ids_on_the_acp_wire() -> None:
    asked = to_acp(Checkpoint("inv-1", "interrupt_ext_1", None, None))
    answered = to_acp(CheckpointAnswered("inv-1", "interrupt_ext_1", {"action": "extend_budget"}))
    assert asked["toolCallId"] == answered["toolCallId"] == "interrupt_ext_1@inv-1"
    assert asked["title"] == "Research checkpoint" and asked["kind"] == "think" and asked["status"] == "pending"
    assert answered == {"sessionUpdate": "tool_call_update", "toolCallId": "interrupt_ext_1@inv-1",
                        "status": "completed", "rawOutput": {"action": "extend_budget"}}
