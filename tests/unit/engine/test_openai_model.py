"""The openai provider against a real chat-completions server on 127.0.0.1, through the core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import Behaviour, FakeOpenAI

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.engine.models import openai as openai_model
from zocratesd.engine.retrieval import InMemoryRetriever, Passage
from zocratesd.errors import ZocratesError
from zocratesd.store import close_session_services

pytestmark = pytest.mark.anyio

LIBRARY = [
    Passage(item_key="LEWIS202", title="Retrieval-Augmented Generation", text="RAG combines retrieval with generation.", year=2020),
    Passage(item_key="GAOHYDE1", title="HyDE", text="HyDE generates a hypothetical document first.", year=2022),
]


@pytest.fixture
def fake() -> AsyncIterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


async def make(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, key: str | None = "sk-test") -> Daemon:
    model: dict[str, Any] = {"provider": "openai", "name": "test/model", "base_url": fake.base_url}
    if key:
        monkeypatch.setenv("ZQ_TEST_KEY", key)
        model["api_key_env"] = "ZQ_TEST_KEY"
    d = Daemon(tmp_path, ZocratesConfig(model=model), retriever=InMemoryRetriever(list(LIBRARY)))
    await d.start()
    return d


async def turn(d: Daemon, text: str) -> tuple[Any, list[dict[str, Any]], str]:
    row = await d.create_session()
    updates: list[dict[str, Any]] = []

    async def listen(u: dict[str, Any]) -> None:
        updates.append(u)

    d.watchers.watch(row.id, listen)
    result = await d.prompt(row.id, text)
    return result, updates, row.id


async def test_streamed_turn_with_a_tool_call(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.behaviour = Behaviour(reasoning=True)
    d = await make(tmp_path, fake, monkeypatch)
    try:
        result, updates, sid = await turn(d, "What is RAG?")
        assert result.stop_reason == "end_turn"
        kinds = [u["kind"] for u in updates]
        assert updates[0] == {"kind": "message", "role": "user", "message_id": updates[0]["message_id"], "text": "What is RAG?",
                              "invocation_id": result.invocation_id}
        assert {u["invocation_id"] for u in updates if u["kind"] in ("message", "thought")} == {result.invocation_id}
        assert kinds[1] == "title" and "tool_call" in kinds and "tool_result" in kinds and "thought" in kinds
        chunks = [u["text"] for u in updates if u["kind"] == "message" and u["role"] == "assistant"]
        assert len(chunks) > 1  # streamed, not one block
        assert "".join(chunks) == "From 1 passages: answer to 'What is RAG?' [1]. I have seen 1 questions."
        first, second = fake.requests[0], fake.requests[1]
        assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
        body = first["body"]
        assert body["model"] == "test/model" and body["stream"] is True
        assert body["messages"][0]["role"] == "system" and "Zocrates" in body["messages"][0]["content"]
        (tool,) = body["tools"]
        assert tool["function"]["name"] == "search_library"
        assert tool["function"]["parameters"]["properties"]["query"]["type"] == "string"
        assert second["body"]["messages"][-1]["role"] == "tool"
        ui = await d.get_session(sid)
        assert ui["messages"][-1]["text"].startswith("From 1 passages")
    finally:
        await d.aclose()
        await close_session_services(tmp_path)


async def test_rate_limits_are_retried(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.behaviour = Behaviour(rate_limit_times=2, retry_after="0")
    d = await make(tmp_path, fake, monkeypatch)
    try:
        result, _, _ = await turn(d, "What is HyDE?")
        assert result.stop_reason == "end_turn" and fake.rate_limited == 2
    finally:
        await d.aclose()


async def test_rate_limit_beyond_the_retries_is_a_clear_error(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.behaviour = Behaviour(rate_limit_times=99, retry_after="0")
    d = await make(tmp_path, fake, monkeypatch)
    try:
        with pytest.raises(ZocratesError) as info:
            await turn(d, "q")
        assert info.value.kind == "model_error" and "429" in info.value.message and "rate limited" in info.value.message
        assert fake.rate_limited == openai_model.MAX_RETRIES_429 + 1
    finally:
        await d.aclose()


@pytest.mark.parametrize(
    "behaviour, expected",
    [
        (Behaviour(fail_status=401), "HTTP 401: Invalid API key provided (check the API key)"),
        (Behaviour(fail_status=500), "HTTP 500"),
        (Behaviour(malformed=True), "not JSON"),
    ],
)
async def test_failures_are_model_errors_and_the_session_stays_usable(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, behaviour: Behaviour, expected: str
) -> None:
    fake.behaviour = behaviour
    d = await make(tmp_path, fake, monkeypatch)
    try:
        row = await d.create_session()
        with pytest.raises(ZocratesError) as info:
            await d.prompt(row.id, "q")
        assert info.value.kind == "model_error" and expected in info.value.message
        fake.behaviour = Behaviour()
        assert (await d.prompt(row.id, "again")).stop_reason == "end_turn"
    finally:
        await d.aclose()


async def test_timeouts_and_unreachable_endpoints(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.behaviour = Behaviour(chunk_delay_s=1.0, use_tools=False)
    monkeypatch.setattr(openai_model, "READ_TIMEOUT_S", 0.3)
    d = await make(tmp_path, fake, monkeypatch, key=None)
    try:
        with pytest.raises(ZocratesError, match="did not answer in time"):
            await turn(d, "slow")
        assert fake.requests[0]["auth"] is None
    finally:
        await d.aclose()
    fake.close()
    d = await make(tmp_path / "b", fake, monkeypatch, key=None)
    try:
        with pytest.raises(ZocratesError, match="cannot reach the model endpoint"):
            await turn(d, "nobody home")
    finally:
        await d.aclose()
