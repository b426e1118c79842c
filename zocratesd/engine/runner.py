"""The engine's runner: ADK's Runner with the coordinator agent, its model and its tools.

The engine runs one turn or one rewind when asked; who may ask (one writer per session), what the
turn's context is, and who hears about it are the core's business (daemon.py).

Every run (a prompt, or the answer to a checkpoint) is bounded by the model section's limits
(config.ModelConfig): `max_calls_per_turn` model calls (ADK's RunConfig.max_llm_calls) and
`max_turn_s` seconds. Past either, the run stops through ADK's abort (which seals the history as
a cancel does) and the turn ends with a ModelError, so the session takes the next prompt.

Importing this module imports ADK, the largest part of a start: the daemon does it in the
background, after it answers its first request (process/startup.py, `ENGINE`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.telemetry.context import ContentCapturingMode, TelemetryConfig
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from zocratesd.config import ModelConfig, ResearchConfig
from zocratesd.engine import telemetry
from zocratesd.engine.agent import build_coordinator
from zocratesd.engine.models import OFFLINE, model_id
from zocratesd.engine.models.offline import OfflineLlm
from zocratesd.engine.online_tool import OnlineLookup
from zocratesd.errors import ModelError
from zocratesd.library.retrieval import InMemoryRetriever, Passage, Retriever
from zocratesd.store import APP_NAME, USER_ID
from zocratesd.store.ui import REQUEST_INPUT_CALL

# ADK's telemetry settings for every run, made once. Left unset, ADK builds a fresh
# `TelemetryConfig` (a pydantic model that reads seven environment variables) about 20 times a
# turn; and with no exporter configured its spans record nothing, so the conversation's text is
# never serialized into them either (NO_CONTENT: it is the user's, and no span needs it).
RUN_TELEMETRY: Final = TelemetryConfig(capture_message_content=ContentCapturingMode.NO_CONTENT)

# ADK's graph builder (workflow/utils/_workflow_graph_utils.build_node, twice a turn) tries the
# optional `RemoteA2aAgent` on every call; without the `a2a` package that import fails each time,
# after reading and executing two modules again (file-system calls on every turn). A `None`
# in sys.modules makes the same import fail at once, as it would anyway.
_A2A_AGENT_MODULE = "google.adk.agents.remote_a2a_agent"
if importlib.util.find_spec("a2a") is None:
    sys.modules.setdefault(_A2A_AGENT_MODULE, None)  # type: ignore[arg-type]


class Engine:
    def __init__(
        self, service: BaseSessionService, model: BaseLlm, retriever: Retriever, research: ResearchConfig | None = None,
        limits: ModelConfig | None = None, more_tools: Sequence[BaseTool] = (), online: OnlineLookup | None = None,
    ):
        self.model = model
        self.limits = limits or ModelConfig()
        self.retriever = retriever
        self.research = research or ResearchConfig()
        # A session may run on the offline model instead of the configured one (its `model` setting).
        alternatives: dict[str, BaseLlm] = {model_id(self.limits): model}
        if OFFLINE not in alternatives:
            alternatives[OFFLINE] = OfflineLlm()
        self.agent = build_coordinator(model, retriever, self.research, alternatives, more_tools, online)
        # Native compaction stays off (events_compaction_config=None): compaction runs after the
        # turn's answer, under the session lock (spec section 4), never before the first token.
        self.app = App(name=APP_NAME, root_agent=self.agent, events_compaction_config=None)
        self.runner = Runner(app=self.app, session_service=service)
        # ADK's inference telemetry only if something records it (OTel is set up before this).
        telemetry.apply()

    async def run_turn(
        self,
        session_id: str,
        message: types.Content,
        *,
        state_delta: dict[str, Any] | None,
        window_start: float | None,
        abort: asyncio.Event,
    ) -> AsyncIterator[Event]:
        """ADK's events for one turn, partial chunks included. `window_start` loads only events from
        that time on (after a compaction); None loads the whole session."""
        run = functools.partial(
            self.runner.run_async,
            user_id=USER_ID,
            session_id=session_id,
            new_message=message,
            state_delta=state_delta,
            yield_user_message=True,
            abort_signal=abort,
        )
        async for ev in self._bounded(run, window_start, abort):
            yield ev

    async def resume_turn(
        self, session_id: str, interrupt_id: str, response: dict[str, Any], *, window_start: float | None,
        abort: asyncio.Event,
    ) -> AsyncIterator[Event]:
        """Continue a turn paused at checkpoint `interrupt_id`, through the public `run_async` with
        the `adk_request_input` response (research/adk.md section 4): ADK finds the invocation from
        the response's id and reruns the paused tool, which rehydrates from `hitl_snapshot`."""
        answer = types.Content(
            role="user",
            parts=[types.Part(function_response=types.FunctionResponse(id=interrupt_id, name=REQUEST_INPUT_CALL, response=response))],
        )
        run = functools.partial(
            self.runner.run_async, user_id=USER_ID, session_id=session_id, new_message=answer, abort_signal=abort
        )
        async for ev in self._bounded(run, window_start, abort):
            yield ev

    async def _bounded(
        self, run: Callable[..., AsyncIterator[Event]], window_start: float | None, abort: asyncio.Event
    ) -> AsyncIterator[Event]:
        """One run under the limits: its model calls counted by ADK, its time by a timer that
        aborts it (the model's own deadline stops a single call; this stops the run between calls
        and tools too)."""
        limits = self.limits
        config = RunConfig(
            streaming_mode=StreamingMode.SSE,
            get_session_config=GetSessionConfig(after_timestamp=window_start) if window_start is not None else None,
            max_llm_calls=limits.max_calls_per_turn,
            telemetry=RUN_TELEMETRY,
        )
        expired = asyncio.Event()

        def expire() -> None:
            expired.set()
            abort.set()

        timer = asyncio.get_running_loop().call_later(limits.max_turn_s, expire)
        try:
            async for ev in run(run_config=config):
                yield ev
        except LlmCallsLimitExceededError:
            raise ModelError(
                f"the model made more than {limits.max_calls_per_turn} calls in one turn without finishing its answer "
                "(model.max_calls_per_turn); stopped"
            ) from None
        finally:
            timer.cancel()
        if expired.is_set():
            raise ModelError(f"the turn ran longer than {limits.max_turn_s:g} s (model.max_turn_s); stopped")

    async def rewind(self, session_id: str, invocation_id: str) -> None:
        await self.runner.rewind_async(user_id=USER_ID, session_id=session_id, rewind_before_invocation_id=invocation_id)


# The modules ADK imports inside functions on a run's path, found by diffing sys.modules around a
# first turn (tests/unit/engine/test_runner_preload.py checks the list against ADK): FastAPI's
# OpenAPI models, authlib, cryptography and requests come in through ADK's auth types. On the
# first turn they would be imported on the event loop; preloaded, they are imported in the thread
# that loads the engine (process/startup.py, `ENGINE`), while the loop serves.
LAZY_ADK_MODULES: Final = (
    "google.adk.workflow._workflow",
    "google.adk.workflow._dynamic_node_scheduler",
    "google.adk.workflow._llm_agent_wrapper",
    "google.adk.workflow._node_runner",
    "google.adk.workflow._node_runner_utils",
    "google.adk.auth.auth_preprocessor",
    "google.adk.flows.llm_flows.single_flow",
    "google.adk.flows.llm_flows.auto_flow",
    "google.adk.flows.llm_flows.tools._functions",
    "google.adk.flows.llm_flows.extensions._agent_transfer",
    "google.adk.flows.llm_flows.core._resume",
    "google.adk.flows.llm_flows.core._finalizer",
    "google.adk.flows.llm_flows.core._model_call",
    "google.adk.flows.llm_flows.context._contents",
    "google.adk.agents._agent_router",
    "google.adk.tools.agent_tool",
    "google.adk.tools._node_tool",
    "google.adk.tools.google_search_tool",
    "google.adk.tools.vertex_ai_search_tool",
    "google.adk.tools.set_model_response_tool",
    "google.adk.tools.transfer_to_agent_tool",
    "google.adk.models.google_llm",
    "google.adk.memory.in_memory_memory_service",
    "google.adk.telemetry._instrumentation",
    "google.adk.telemetry.node_tracing",
    "google.adk.apps.compaction",
)


# google.genai's types whose pydantic schema is left unbuilt at import (forward references): the
# first instance of each builds it (`model_rebuild`), on the event loop in a
# first turn. Found with a spy on `BaseModel.model_rebuild` around a first turn (the same test
# checks that none is left).
LAZY_GENAI_MODELS: Final = (
    "Part", "Content", "UserContent", "FunctionCall", "FunctionResponse", "FunctionDeclaration", "Tool",
    "GenerateContentConfig", "GenerateContentResponseUsageMetadata", "AudioTranscriptionConfig", "LiveConnectConfig",
)


def preload_lazy_imports() -> None:
    """Import `LAZY_ADK_MODULES` and build `LAZY_GENAI_MODELS` now (blocking; a worker thread's
    job, before the engine serves: nothing else uses these models meanwhile)."""
    for name in LAZY_ADK_MODULES:
        importlib.import_module(name)
    for name in LAZY_GENAI_MODELS:
        model = getattr(types, name)
        if not model.__pydantic_complete__:
            model.model_rebuild()


async def warm_up() -> None:
    """One throw-away offline turn in memory: ADK imports much of its flow lazily, which made the
    first real turn 0.5-0.65 s slower (research/adk.md, cold start). Touches no user data."""
    svc = InMemorySessionService()
    engine = Engine(svc, OfflineLlm(), InMemoryRetriever([Passage(item_key="WARMUP01", title="warm-up", text="warm up text.")]))
    await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="warmup")
    msg = types.Content(role="user", parts=[types.Part(text="warm up")])
    async for _ in engine.run_turn("warmup", msg, state_delta=None, window_start=None, abort=asyncio.Event()):
        pass
