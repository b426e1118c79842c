"""The openai provider against a real chat-completions server on 127.0.0.1, through the core."""

from __future__ import annotations

import base64
import json
import logging
import resource
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_openai import Behaviour, FakeOpenAI
from google.adk.models.llm_request import LlmRequest
from google.genai import types

from zocratesd.config import ConfigError, ZocratesConfig, load_config
from zocratesd.core.daemon import Daemon
from zocratesd.engine.models import openai as openai_model
from zocratesd.errors import ZocratesError
from zocratesd.library.retrieval import InMemoryRetriever, Passage
from zocratesd.updates import MessageChunk, ThoughtChunk, Title, ToolCall, ToolResult, Update

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


async def turn(d: Daemon, text: str) -> tuple[Any, list[Update], str]:
    row = await d.create_session()
    with d.watch(row.id) as watching:
        result = await d.prompt(row.id, text)
        return result, watching.take_nowait(), row.id


async def test_streamed_turn_with_a_tool_call(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.behaviour = Behaviour(reasoning=True)
    d = await make(tmp_path, fake, monkeypatch)
    try:
        result, updates, sid = await turn(d, "What is RAG?")
        assert result.stop_reason == "end_turn"
        kinds = [type(u) for u in updates]
        assert isinstance(updates[0], MessageChunk)
        assert updates[0] == MessageChunk("user", updates[0].message_id, "What is RAG?", result.invocation_id)
        assert {u.invocation_id for u in updates if isinstance(u, (MessageChunk, ThoughtChunk))} == {result.invocation_id}
        assert kinds[1] is Title and ToolCall in kinds and ToolResult in kinds and ThoughtChunk in kinds
        chunks = [u.text for u in updates if isinstance(u, MessageChunk) and u.role == "assistant"]
        assert len(chunks) > 1  # streamed, not one block
        assert "".join(chunks) == "From 1 passages: answer to 'What is RAG?' [1]. I have seen 1 questions."
        first, second = fake.requests[0], fake.requests[1]
        assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test"
        body = first["body"]
        assert body["model"] == "test/model" and body["stream"] is True
        assert body["messages"][0]["role"] == "system" and "Zocrates" in body["messages"][0]["content"]
        tools = {t["function"]["name"]: t["function"] for t in body["tools"]}
        # search_library, and the writes the model may propose (the person is asked before any is made).
        assert set(tools) == {"search_library", "save_note", "tag_items", "add_to_collection", "search_online_literature"}
        assert tools["search_library"]["parameters"]["properties"]["query"]["type"] == "string"
        assert tools["tag_items"]["parameters"]["properties"]["item_keys"]["type"] == "array"
        assert second["body"]["messages"][-1]["role"] == "tool"
        ui = await d.get_session(sid)
        assert ui["messages"][-1]["text"].startswith("From 1 passages")
    finally:
        await d.aclose()


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


# --- a hostile or broken endpoint (issue 16, items 5 and 6) --------------------------------------

FORGED = "2099-01-01 00:00:00,000 ERROR zocratesd: the daemon was compromised"


async def make_limited(tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, **limits: Any) -> Daemon:
    monkeypatch.setenv("ZQ_TEST_KEY", "sk-test")
    model: dict[str, Any] = {"provider": "openai", "name": "test/model", "base_url": fake.base_url, "api_key_env": "ZQ_TEST_KEY", **limits}
    d = Daemon(tmp_path, ZocratesConfig(model=model), retriever=InMemoryRetriever(list(LIBRARY)))
    await d.start()
    return d


async def stored_bytes(d: Daemon, sid: str) -> int:
    return sum(len(json.dumps(ev)) for ev in (await d.live_session(sid)).live)


async def model_error(d: Daemon, sid: str, text: str = "q", within_s: float = 60.0) -> ZocratesError:
    """The error a prompt ends with; a turn that never ends fails the test instead of hanging it."""
    with anyio.fail_after(within_s), pytest.raises(ZocratesError) as info:
        await d.prompt(sid, text)
    assert info.value.kind == "model_error", info.value
    return info.value


def request(text: str = "q") -> LlmRequest:
    return LlmRequest(model="test/model", contents=[types.Content(role="user", parts=[types.Part(text=text)])])


def test_sse_lines_are_split_at_every_line_end_and_bounded() -> None:
    lines = openai_model.SseLines(max_line_bytes=16)
    assert lines.feed(b"data: a\n\ndata: b\r") == ["data: a", ""]
    assert lines.feed(b"\ndata: c\rdata: ") == ["data: b", "data: c"]  # \r\n split across chunks
    assert lines.feed("é\n".encode()) == ["data: é"]
    assert lines.feed(b"tail") == [] and lines.close() == ["tail"]
    # A line that never ends raises as soon as its bytes pass the cap: at most cap + one chunk held.
    lines = openai_model.SseLines(max_line_bytes=16)
    assert lines.feed(b"x" * 10) == []
    with pytest.raises(openai_model.LineTooLong):
        lines.feed(b"x" * 10)
    with pytest.raises(openai_model.LineTooLong):  # one chunk holding a whole over-long line
        openai_model.SseLines(max_line_bytes=16).feed(b"y" * 40 + b"\n")


async def test_an_endless_line_is_cut_at_max_line_bytes_with_bounded_memory(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 256 * 1024 * 1024
    fake.behaviour = Behaviour(line_bytes=size)
    d = await make_limited(tmp_path, fake, monkeypatch, max_line_bytes=1024 * 1024)
    try:
        row = await d.create_session()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        err = await model_error(d, row.id)
        assert "model.max_line_bytes" in err.message and err.data["endpoint"] == fake.base_url
        # The client stopped reading near the cap: what the server got out is the cap plus what
        # the sockets' buffers took, nowhere near the line.
        assert fake.sent_bytes < 32 * 1024 * 1024
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
        assert grown * (1 if sys.platform == "darwin" else 1024) < 128 * 1024 * 1024
        fake.behaviour = Behaviour()
        assert (await d.prompt(row.id, "again")).stop_reason == "end_turn"
    finally:
        await d.aclose()


async def test_an_answer_past_max_answer_chars_ends_the_turn_and_nothing_huge_is_stored(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.behaviour = Behaviour(answer_chars=50 * 1024 * 1024)
    d = await make_limited(tmp_path, fake, monkeypatch, max_answer_chars=200_000)
    try:
        row = await d.create_session()
        err = await model_error(d, row.id)
        assert "model.max_answer_chars" in err.message
        assert await stored_bytes(d, row.id) < 100_000  # the user's message; no answer
        fake.behaviour = Behaviour()
        assert (await d.prompt(row.id, "again")).stop_reason == "end_turn"
        assert await stored_bytes(d, row.id) < 100_000
        # The next turn sent the model the conversation without the cut answer.
        assert all(len(json.dumps(r["body"])) < 100_000 for r in fake.requests[-2:])
    finally:
        await d.aclose()


async def test_keep_alive_comments_cannot_hold_a_turn_past_max_turn_s(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.behaviour = Behaviour(keepalive_forever=True, keepalive_interval_s=0.05)
    d = await make_limited(tmp_path, fake, monkeypatch, max_turn_s=1.0)
    try:
        row = await d.create_session()
        started = time.monotonic()
        err = await model_error(d, row.id, within_s=30)
        assert "model.max_turn_s" in err.message and time.monotonic() - started < 15
        # Not left busy: the next turn runs, and is stopped by the same limit (not refused).
        err = await model_error(d, row.id, "again", within_s=30)
        assert "model.max_turn_s" in err.message
    finally:
        await d.aclose()
    # Not broken: a daemon whose limit a loaded machine cannot reach finishes a turn in that session.
    fake.behaviour = Behaviour()
    d = await make_limited(tmp_path, fake, monkeypatch)
    try:
        assert (await d.prompt(row.id, "and again")).stop_reason == "end_turn"
    finally:
        await d.aclose()


@pytest.mark.parametrize("stream", [True, False])
async def test_one_model_call_has_a_deadline_whatever_the_endpoint_sends(fake: FakeOpenAI, stream: bool) -> None:
    """The model's own deadline (what bounds the compaction summariser, outside any turn)."""
    fake.behaviour = Behaviour(keepalive_forever=True, keepalive_interval_s=0.05)
    llm = openai_model.OpenAICompatLlm(model="m", base_url=fake.base_url, max_call_s=0.5)
    started = time.monotonic()
    with anyio.fail_after(30), pytest.raises(ZocratesError, match="model.max_turn_s") as info:
        async for _ in llm.generate_content_async(request(), stream=stream):
            pass
    assert info.value.kind == "model_error" and time.monotonic() - started < 10


async def test_calls_of_a_tool_that_does_not_exist_are_answered_and_bounded(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.behaviour = Behaviour(unknown_tool="summon_daemon")
    d = await make_limited(tmp_path, fake, monkeypatch, max_calls_per_turn=4)
    try:
        row = await d.create_session()
        err = await model_error(d, row.id)
        assert "model.max_calls_per_turn" in err.message
        assert len(fake.requests) == 4
        # Each call was answered, to the model, as an error naming the tools it has.
        answer = fake.requests[1]["body"]["messages"][-1]
        assert answer["role"] == "tool" and "summon_daemon" in answer["content"] and "search_library" in answer["content"]
        events = (await d.live_session(row.id)).live
        # The session's creation, the question, four calls with their answers and the end of the
        # failed run: not the thousand events ADK's default of 500 calls allows.
        assert len(events) <= 2 + 2 * 4 + 1
        fake.behaviour = Behaviour()
        assert (await d.prompt(row.id, "a real question")).stop_reason == "end_turn"
    finally:
        await d.aclose()


def call(**tool_call: Any) -> bytes:
    """An SSE line streaming one tool-call delta."""
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [tool_call]}}]}).encode()


SEARCH = {"name": "search_library", "arguments": "{}"}


@pytest.mark.parametrize(
    "line, expected",
    [
        (b"data: 1", "a streamed chunk should be an object, not a number"),
        (b"data: []", "should be an object, not an array"),
        (b"data: {this is not json", "not JSON"),
        (b"data: " + b"[" * 100_000, "not JSON"),  # deeper than the parser goes
        (b"data: " + b"9" * 5000, "not JSON"),  # past Python's digits limit
        (call(index="abc", function=SEARCH), "index should be an integer"),
        (call(index=10**9, function=SEARCH), "outside 0..63"),
        (call(index=0, function="search_library"), "function should be an object"),
        (call(index=0, function={"name": "search_library", "arguments": 7}), "arguments should be a string"),
        (call(index=0, function={"name": "search_library", "arguments": "[1]"}), "not an object"),
        (call(index=0, function={"name": "search library\n", "arguments": "{}"}), "cannot name a tool"),
        (call(index=0, function={"arguments": "{}"}), "without a name"),
        (b'data: {"choices": "all of them"}', "choices should be an array"),
        (b'data: {"choices": [{"delta": []}]}', "delta should be an object"),
        (b'data: {"choices": [{"delta": {"content": 5}}]}', "content should be a string"),
        (b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": 3}]}', "finish_reason should be a string"),
        (b'data: {"choices": [{"delta": {"content": "hi"}}], "usage": {"prompt_tokens": "many"}}', "prompt_tokens should be"),
        (b'data: {"choices": [{"delta": {"reasoning": {"deep": true}}}]}', "reasoning should be a string"),
        (b'data: {"error": "overloaded"}', "the model failed mid-answer: overloaded"),
        (b"data: {}", "answered with nothing"),
    ],
)
async def test_every_malformed_answer_is_a_model_error_and_the_session_stays_usable(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, line: bytes, expected: str
) -> None:
    fake.behaviour = Behaviour(raw_lines=[line])
    d = await make_limited(tmp_path, fake, monkeypatch)
    try:
        row = await d.create_session()
        err = await model_error(d, row.id)
        assert expected in err.message
        fake.behaviour = Behaviour()
        assert (await d.prompt(row.id, "again")).stop_reason == "end_turn"
    finally:
        await d.aclose()


async def test_a_non_streamed_answer_is_checked_and_capped_too(fake: FakeOpenAI) -> None:
    llm = openai_model.OpenAICompatLlm(model="m", base_url=fake.base_url, max_line_bytes=4096)
    out = [r async for r in llm.generate_content_async(request("What is RAG?"), stream=False)]
    assert out[-1].content is not None and "Plain answer" in (out[-1].content.parts or [])[0].text  # type: ignore[operator]
    fake.behaviour = Behaviour(use_tools=False)
    with pytest.raises(ZocratesError, match="model.max_line_bytes"):
        async for _ in llm.generate_content_async(request("x" * 10_000), stream=False):
            pass
    llm = openai_model.OpenAICompatLlm(model="m", base_url=fake.base_url, max_answer_chars=10)
    with pytest.raises(ZocratesError, match="model.max_answer_chars"):
        async for _ in llm.generate_content_async(request("a long enough question"), stream=False):
            pass


async def test_model_text_is_escaped_in_the_error_and_in_the_log(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    evil = "boom\n" + FORGED + "\x1b[2J\x1b]0;owned\x07\r"
    fake.behaviour = Behaviour(raw_lines=[f"data: {json.dumps({'error': {'message': evil}})}".encode()])
    d = await make_limited(tmp_path, fake, monkeypatch)
    try:
        row = await d.create_session()
        err = await model_error(d, row.id)
        assert "boom\\n2099-01-01" in err.message and "\\x1b[2J" in err.message
        assert not any(c in err.message for c in "\n\r\x1b\x07")
        # ADK logged the error with its traceback; nothing of the model's text begins a line or
        # reaches a terminal raw.
        log_text = caplog.text
        assert "2099-01-01" in log_text  # the message was logged ...
        assert not any(line.startswith(FORGED[:30]) for line in log_text.splitlines())  # ... escaped
        assert "\x1b" not in log_text and "\x07" not in log_text
    finally:
        await d.aclose()


async def test_credentials_in_base_url_are_sent_but_never_shown(
    tmp_path: Path, fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    port = fake.server.server_address[1]
    base_url = f"http://proxyuser:s3cret-pw@127.0.0.1:{port}/v1"
    monkeypatch.setenv("ZQ_TEST_KEY", "sk-test")
    cfg = ZocratesConfig(model={"provider": "openai", "name": "m", "base_url": base_url, "api_key_env": "ZQ_TEST_KEY"})
    d = Daemon(tmp_path, cfg, retriever=InMemoryRetriever(list(LIBRARY)))
    await d.start()
    try:
        row = await d.create_session()
        assert (await d.prompt(row.id, "What is RAG?")).stop_reason == "end_turn"
        # Sent as HTTP Basic auth, as httpx sends the user info of a URL.
        assert fake.requests[0]["auth"] == "Basic " + base64.b64encode(b"proxyuser:s3cret-pw").decode()
        fake.behaviour = Behaviour(fail_status=500)
        err = await model_error(d, row.id)
        assert err.data["endpoint"] == f"http://***@127.0.0.1:{port}/v1"
        assert "s3cret" not in json.dumps({"message": err.message, **err.data})
        assert "HTTP Request: POST" in caplog.text  # httpx logged its requests ...
        assert "s3cret" not in caplog.text  # ... without the password
    finally:
        await d.aclose()


@pytest.mark.parametrize(
    "base_url, extra, refused",
    [
        ("http://models.example.org/v1", {}, True),
        ("http://10.0.0.7:8000/v1", {}, True),
        ("http://models.example.org/v1", {"allow_insecure_http": True}, False),
        ("https://models.example.org/v1", {}, False),
        ("http://127.0.0.1:11434/v1", {}, False),
        ("http://127.8.9.10:11434/v1", {}, False),
        ("http://localhost:11434/v1", {}, False),
        ("http://[::1]:11434/v1", {}, False),
    ],
)
def test_plain_http_to_another_machine_with_a_key_needs_an_opt_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base_url: str, extra: dict[str, Any], refused: bool
) -> None:
    monkeypatch.setenv("ZQ_TEST_KEY", "sk-test")
    overrides = {"model": {"provider": "openai", "name": "m", "base_url": base_url, "api_key_env": "ZQ_TEST_KEY", **extra}}
    if not refused:
        assert load_config(tmp_path, overrides).model.base_url == base_url
        return
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, overrides)
    message = str(info.value)
    assert "model" in message and "$ZQ_TEST_KEY" in message and "model.allow_insecure_http: true" in message


def test_a_url_password_over_plain_http_is_refused_without_showing_it(tmp_path: Path) -> None:
    overrides = {"model": {"provider": "openai", "name": "m", "base_url": "http://me:hunter2@models.example.org/v1"}}
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, overrides)
    assert "credentials in model.base_url" in str(info.value) and "hunter2" not in str(info.value)
    # No key, no user info: plain http anywhere is the user's business.
    assert load_config(tmp_path, {"model": {"provider": "openai", "name": "m", "base_url": "http://10.0.0.7/v1"}}).model.name == "m"
    for bad in ("http:///v1", "http://host:port/v1", "ftp://host/v1"):
        with pytest.raises(ConfigError, match="needs base_url"):
            load_config(tmp_path, {"model": {"provider": "openai", "name": "m", "base_url": bad}})
