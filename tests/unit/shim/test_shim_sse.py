"""The shim's SSE events from face-neutral updates (zocratesd/shim/turns.py)."""

from __future__ import annotations

import json

from zocratesd.shim.turns import sse_line, to_sse


def test_answer_and_thought_chunks_are_parts() -> None:
    assert to_sse({"kind": "message", "role": "assistant", "message_id": "e1", "text": "Hi"}) == {
        "type": "parts", "parts": [{"text": "Hi", "thought": False}], "author": "coordinator",
        "invocation_id": None, "partial": True,
    }
    thought = to_sse({"kind": "thought", "message_id": "e1", "text": "hmm"})
    assert thought is not None and thought["parts"] == [{"text": "hmm", "thought": True}]


def test_a_checkpoint_is_a_request_input_event_and_other_traffic_is_not_shown() -> None:
    event = to_sse({"kind": "checkpoint", "invocation_id": "e-1", "interrupt_id": "interrupt_ext_1",
                    "message": "Search further?", "payload": {"budget": 2}})
    assert event == {"type": "request_input", "invocation_id": "e-1", "interrupt_id": "interrupt_ext_1",
                     "message": "Search further?", "payload": {"budget": 2}}
    for update in [
        {"kind": "message", "role": "user", "message_id": "e0", "text": "question"},
        {"kind": "tool_call", "call_id": "c2", "name": "search_library", "args": {}},
        {"kind": "tool_result", "call_id": "c2", "name": "search_library", "response": {}, "failed": False},
        {"kind": "title", "title": "T"},
        {"kind": "tool_progress", "call_id": "c2", "text": "Round 1", "round": {"n": 1}},
        {"kind": "checkpoint_answered", "invocation_id": "e-1", "interrupt_id": "interrupt_ext_1", "response": {}},
        {"kind": "usage", "prompt_tokens": 1, "tokens_estimated": False, "context_size": 2, "compaction_ms": 0,
         "compacted": False, "reason": ""},
    ]:
        assert to_sse(update) is None, update


def test_one_event_is_one_data_line_even_with_newlines_and_odd_text() -> None:
    for text in ["two\nlines\r\n", "é ✓ 𝄞", "\ud800 lone surrogate"]:
        line = sse_line({"type": "parts", "parts": [{"text": text, "thought": False}]})
        assert line.startswith(b"data: ") and line.endswith(b"\n\n")
        body = line[len(b"data: "):-2]
        assert b"\n" not in body and b"\r" not in body
        assert json.loads(body)["parts"][0]["text"] == text
