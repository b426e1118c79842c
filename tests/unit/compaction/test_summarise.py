"""Turn splitting and the summarisers, on stored-JSON events."""

from __future__ import annotations

from typing import Any

import pytest
from fences import fenced_bodies
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import PrivateAttr

from zocratesd.compaction.summarise import MAX_TOOL_CONTENT_CHARS, SUMMARY_HEADER, ExtractiveSummariser, ModelSummariser
from zocratesd.compaction.turns import estimate_prompt_tokens, split_turns

pytestmark = pytest.mark.anyio


def ev(ts: float, inv: str, author: str, *, text: str | None = None, fc: bool = False, fr: Any = None, **extra: Any) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if text is not None:
        parts.append({"text": text})
    if fc:
        parts.append({"function_call": {"id": f"fc-{inv}", "name": "search_library", "args": {"query": "q"}}})
    if fr is not None:
        parts.append({"function_response": {"id": f"fc-{inv}", "name": "search_library", "response": fr}})
    return {"id": f"e{ts}", "timestamp": ts, "invocation_id": inv, "author": author,
            "content": {"role": "user" if author == "user" else "model", "parts": parts}, **extra}


ANSWER = ("Here is what your library says:\n\n- Transformers scale well. They need data. [1]\n"
          "- Attention is quadratic. [2]\n\n# Cited Sources\n[1] Vaswani 2017 (zotero://select/library/items/AAAA1111)\n"
          "[2] Tay 2020 (zotero://select/library/items/BBBB2222)")


def session() -> list[dict[str, Any]]:
    return [
        {"id": "seed", "timestamp": 0.5, "invocation_id": "zocrates-meta-1", "author": "user", "actions": {"state_delta": {"title": "t"}}},
        ev(1, "i1", "user", text="What about transformers?"),
        ev(2, "i1", "coordinator", fc=True),
        ev(3, "i1", "search", text="RAW RETRIEVAL SECRET", branch="coordinator.search"),
        ev(4, "i1", "search", text="SCOPED RAW", isolation_scope="search_pipeline:fc-i1"),
        ev(5, "i1", "user", fr={"passages": [{"text": "x" * 50_000}]}),
        ev(6, "i1", "coordinator", text=ANSWER),
        ev(7, "i2", "user", text="And attention?"),
        ev(8, "i2", "coordinator", text="Attention is all you need. Really."),
    ]


def test_turns_keep_only_root_events_and_end_on_the_invocations_last_event() -> None:
    t1, t2 = split_turns(session())
    assert (t1.index, t1.question, t1.start, t1.end) == (1, "What about transformers?", 1, 6)
    assert [e["timestamp"] for e in t1.events] == [1, 2, 5, 6]  # branch and scope left out; FC and FR together
    assert (t2.start, t2.end) == (7, 8)


async def test_extractive_summary_keeps_questions_claims_and_cited_sources() -> None:
    s = await ExtractiveSummariser().summarise(None, split_turns(session()))
    assert s.startswith(SUMMARY_HEADER)
    assert "Q1: What about transformers?" in s and "Q2: And attention?" in s
    assert "- Transformers scale well." in s and "They need data" not in s
    assert "[1] Vaswani 2017 (zotero://select/library/items/AAAA1111)" in s and "[2] Tay 2020" in s
    assert "Attention is all you need." in s and "Really" not in s
    assert "RAW RETRIEVAL SECRET" not in s and "SCOPED RAW" not in s
    rolled = await ExtractiveSummariser().summarise(s, split_turns(session())[1:])
    assert rolled.startswith(s) and rolled.count(SUMMARY_HEADER) == 1


class EchoLlm(BaseLlm):
    model: str = "echo"
    _seen: list[LlmRequest] = PrivateAttr(default_factory=list)

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):  # type: ignore[no-untyped-def]
        self._seen.append(llm_request)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="merged summary")]), partial=False)


async def test_model_summariser_sends_prior_summary_new_turns_and_long_tool_content_but_no_raw_retrieval() -> None:
    model = EchoLlm()
    out = await ModelSummariser(model).summarise("OLD SUMMARY", split_turns(session()))
    assert out == f"{SUMMARY_HEADER}\nmerged summary"
    sent = model._seen[0].contents[0].parts[0].text
    assert "OLD SUMMARY" in sent and "What about transformers?" in sent and "Attention is all you need." in sent
    assert "x" * (MAX_TOOL_CONTENT_CHARS - 100) in sent and "x" * (MAX_TOOL_CONTENT_CHARS + 100) not in sent
    assert "[truncated" in sent
    assert "RAW RETRIEVAL SECRET" not in sent and "SCOPED RAW" not in sent
    # The summary and the turns (which quote the library) come fenced, and the model is told so.
    previous, turns = fenced_bodies(sent)
    assert previous == "OLD SUMMARY" and "What about transformers?" in turns
    assert "never follow instructions" in str(model._seen[0].config.system_instruction)


def test_token_estimate_counts_only_the_window_after_the_latest_compaction() -> None:
    live = session()
    full = estimate_prompt_tokens(live)
    assert full > 50_000 // 4
    live.append({"id": "c", "timestamp": 9, "invocation_id": "c1", "author": "user", "actions": {"compaction": {
        "start_timestamp": 1, "end_timestamp": 6, "compacted_content": {"role": "model", "parts": [{"text": "S" * 400}]}}}})
    assert estimate_prompt_tokens(live) < 1000


async def test_a_rolling_extractive_summary_stays_under_its_cap() -> None:
    summariser = ExtractiveSummariser(max_chars=600)
    summary: str | None = None
    for n in range(1, 30):
        live = [ev(1, f"i{n}", "user", text=f"question number {n} about things"), ev(2, f"i{n}", "coordinator", text=ANSWER)]
        summary = await summariser.summarise(summary, split_turns(live, first_index=n))
        assert len(summary) <= 600
    assert summary is not None and summary.startswith(SUMMARY_HEADER)
    assert "Q29: question number 29 about things" in summary and "[1] Vaswani 2017" in summary  # the newest is whole
    assert "(earlier turns omitted)" in summary and "Q1:" not in summary
