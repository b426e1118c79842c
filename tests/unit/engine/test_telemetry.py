"""ADK's inference telemetry skipped when nothing records it (engine/telemetry.py, issue 22 item 3):
pinned to what it replaces in ADK, gone from a real turn, and stock again once OTel is set up."""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import inspect
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.adk.models.llm_response import LlmResponse
from google.adk.sessions import InMemorySessionService
from google.adk.telemetry import _experimental_semconv, _instrumentation, _metrics, tracing
from google.genai import types

from zocratesd.engine import telemetry
from zocratesd.engine.models.offline import OfflineLlm
from zocratesd.engine.runner import Engine
from zocratesd.library.retrieval import InMemoryRetriever, Passage
from zocratesd.store import APP_NAME, USER_ID

# ADK's functions that only the skipped path enters: none may run in a quiet turn.
SKIPPED = (
    (tracing, "_use_native_generate_content_span"),  # the generate_content span
    (tracing, "_set_usage_metadata_attributes"),  # trace_inference_result past its `span is None` check
    (_experimental_semconv, "_to_any_value"),  # the semconv operation details
    (tracing, "maybe_log_completion_details"),  # the completion log record
    (_metrics, "record_client_operation_duration"),  # the client metrics
    (_metrics, "record_client_token_usage"),
)


def test_what_is_replaced_is_pinned_to_adk_2_13() -> None:
    """Fails on an ADK whose functions we replace, or the way ADK calls them, changed: the
    replacement must then be checked again (until it is, `apply()` leaves ADK stock)."""
    assert importlib.metadata.version("google-adk").startswith("2.13."), "check engine/telemetry.py against this ADK"
    assert telemetry.ADK_MATCHES
    assert tuple(inspect.signature(telemetry.STOCK_USE_INFERENCE_SPAN).parameters) == telemetry.USE_INFERENCE_SPAN_PARAMS
    assert tuple(inspect.signature(telemetry._no_inference_span).parameters) == telemetry.USE_INFERENCE_SPAN_PARAMS
    # ADK reaches it through its module, so replacing the module's attribute takes effect.
    assert "tracing.use_inference_span(" in inspect.getsource(_instrumentation.record_inference_telemetry)
    # And what follows a None span is ADK's own no-span path: no attribute, no record, no metric.
    assert "isinstance(\n          tel_ctx.span, tracing.GenerateContentSpan" in inspect.getsource(
        _instrumentation.record_inference_telemetry)
    tracing.trace_inference_result(None, None, LlmResponse(finish_reason=types.FinishReason.STOP))  # returns at once
    for module, name in SKIPPED:
        assert callable(getattr(module, name)), f"{module.__name__}.{name}"


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import os

    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    yield
    monkeypatch.undo()
    telemetry.apply()  # the next engine decides from the environment as it is


def test_any_otel_variable_keeps_adk_stock(no_otel_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert telemetry.apply() and telemetry.quiet()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert not telemetry.apply() and not telemetry.quiet()
    assert tracing.use_inference_span is telemetry.STOCK_USE_INFERENCE_SPAN


def _offline_turn(quiet: bool) -> list[dict[str, Any]]:
    """One in-process turn on the engine with the offline model, `quiet` or with ADK stock."""
    svc = InMemorySessionService()
    engine = Engine(svc, OfflineLlm(), InMemoryRetriever([
        Passage(item_key="ABCD1234", title="Retrieval", text="Retrieval augmented generation pairs a retriever with a generator.")]))
    assert telemetry.quiet()  # nothing records here
    if not quiet:
        tracing.use_inference_span = telemetry.STOCK_USE_INFERENCE_SPAN

    async def run() -> list[dict[str, Any]]:
        await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s")
        msg = types.Content(role="user", parts=[types.Part(text="What is retrieval augmented generation?")])
        events = [ev async for ev in engine.run_turn("s", msg, state_delta=None, window_start=None, abort=asyncio.Event())]
        dumps = [ev.model_dump(mode="json", exclude={"id", "invocation_id", "timestamp"}, exclude_none=True) for ev in events]
        # ADK's function call ids are random: the same in both turns once numbered by first use.
        text = json.dumps(dumps)
        ids = dict.fromkeys(re.findall(r"(?:adk|e)-[0-9a-f]{8}-[0-9a-f-]{27}", text))
        for n, call_id in enumerate(ids):
            text = text.replace(call_id, f"call-{n}")
        return list(json.loads(text))

    return asyncio.run(run())


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = dict.fromkeys((name for _, name in SKIPPED), 0)
    for module, name in SKIPPED:
        def counted(fn: Callable[..., Any], name: str = name) -> Callable[..., Any]:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                counts[name] += 1
                return fn(*args, **kwargs)
            return wrapper
        monkeypatch.setattr(module, name, counted(getattr(module, name)))
    return counts


def test_a_turn_with_nothing_recording_does_no_inference_telemetry_and_answers_the_same(
    no_otel_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    counts = _count_calls(monkeypatch)
    stock = _offline_turn(quiet=False)
    assert all(counts.values()), counts  # the stock turn enters each one: the counters see them
    counts.update(dict.fromkeys(counts, 0))
    quiet = _offline_turn(quiet=True)
    assert counts == dict.fromkeys(counts, 0)
    assert quiet == stock  # the same events, in the same order, with the same answer
    assert any("Cited Sources" in (p.get("text") or "") for ev in quiet for p in ev.get("content", {}).get("parts", []))


RECORDING_PROBE = """
    import asyncio
    from google.adk.sessions import InMemorySessionService
    from google.genai import types
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from zocratesd.engine import telemetry
    from zocratesd.engine.models.offline import OfflineLlm
    from zocratesd.library.retrieval import InMemoryRetriever, Passage
    from zocratesd.engine.runner import Engine
    from zocratesd.store import APP_NAME, USER_ID

    def engine(svc):
        return Engine(svc, OfflineLlm(), InMemoryRetriever([Passage(item_key="ABCD1234", title="RAG", text="RAG text.")]))

    svc = InMemorySessionService()
    engine(svc)
    print("before:", telemetry.quiet())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # set after a first engine: the next one sees it
    e = engine(svc)
    print("after:", telemetry.quiet())

    async def run():
        await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="s")
        msg = types.Content(role="user", parts=[types.Part(text="What is RAG?")])
        async for _ in e.run_turn("s", msg, state_delta=None, window_start=None, abort=asyncio.Event()):
            pass

    asyncio.run(run())
    for span in exporter.get_finished_spans():
        print("span:", span.name.replace(" ", "_"), span.attributes.get("gen_ai.operation.name"),
              span.attributes.get("gen_ai.request.model"))
"""


def test_with_a_recording_tracer_provider_adk_records_as_stock() -> None:
    """In a fresh interpreter (a tracer provider is set once per process), with no OTEL_* variable."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(RECORDING_PROBE)], capture_output=True, text=True,
                         timeout=180, env=env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["before: True", "after: False"], out.stdout
    spans = [line.split()[1:] for line in lines if line.startswith("span:")]
    names = [s[0] for s in spans]
    # The two model calls' inference spans, with their attributes, inside the agent's span.
    assert [s for s in spans if s[1] == "generate_content"] == [["generate_content_offline", "generate_content", "offline"]] * 2
    assert "invoke_agent_coordinator" in names and "execute_tool_search_library" in names, names
