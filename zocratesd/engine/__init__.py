"""The engine: ADK's Runner with the coordinator agent, its model and its tools, in-process.

The engine runs one turn or one rewind when asked; who may ask (one writer per session), what the
turn's context is, and who hears about it are the core's business (daemon.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from zocratesd.config import ResearchConfig
from zocratesd.engine.agent import build_coordinator
from zocratesd.engine.models.offline import OfflineLlm
from zocratesd.engine.retrieval import InMemoryRetriever, Passage, Retriever
from zocratesd.store import APP_NAME, USER_ID
from zocratesd.store.ui import REQUEST_INPUT_CALL


class Engine:
    def __init__(
        self, service: BaseSessionService, model: BaseLlm, retriever: Retriever, research: ResearchConfig | None = None
    ):
        self.model = model
        self.retriever = retriever
        self.research = research or ResearchConfig()
        self.agent = build_coordinator(model, retriever, self.research)
        # Native compaction stays off (events_compaction_config=None): compaction runs after the
        # turn's answer, under the session lock (spec section 4), never before the first token.
        self.app = App(name=APP_NAME, root_agent=self.agent, events_compaction_config=None)
        self.runner = Runner(app=self.app, session_service=service)

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
        config = RunConfig(
            streaming_mode=StreamingMode.SSE,
            get_session_config=GetSessionConfig(after_timestamp=window_start) if window_start is not None else None,
        )
        async for ev in self.runner.run_async(
            user_id=USER_ID,
            session_id=session_id,
            new_message=message,
            state_delta=state_delta,
            yield_user_message=True,
            abort_signal=abort,
            run_config=config,
        ):
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
        config = RunConfig(
            streaming_mode=StreamingMode.SSE,
            get_session_config=GetSessionConfig(after_timestamp=window_start) if window_start is not None else None,
        )
        async for ev in self.runner.run_async(
            user_id=USER_ID, session_id=session_id, new_message=answer, abort_signal=abort, run_config=config
        ):
            yield ev

    async def rewind(self, session_id: str, invocation_id: str) -> None:
        await self.runner.rewind_async(user_id=USER_ID, session_id=session_id, rewind_before_invocation_id=invocation_id)


async def warm_up() -> None:
    """One throw-away offline turn in memory: ADK imports much of its flow lazily, which made the
    first real turn 0.5-0.65 s slower (research/adk.md, cold start). Touches no user data."""
    svc = InMemorySessionService()
    engine = Engine(svc, OfflineLlm(), InMemoryRetriever([Passage(item_key="WARMUP01", title="warm-up", text="warm up text.")]))
    await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="warmup")
    msg = types.Content(role="user", parts=[types.Part(text="warm up")])
    async for _ in engine.run_turn("warmup", msg, state_delta=None, window_start=None, abort=asyncio.Event()):
        pass
