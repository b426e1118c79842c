"""The engine: ADK's Runner with the coordinator agent, its model and its tools, in-process.

The engine runs one turn or one rewind when asked; who may ask (one writer per session), what the
turn's context is, and who hears about it are the core's business (daemon.py).

Every run (a prompt, or the answer to a checkpoint) is bounded by the model section's limits
(config.ModelConfig): `max_calls_per_turn` model calls (ADK's RunConfig.max_llm_calls) and
`max_turn_s` seconds. Past either, the run stops through ADK's abort (which seals the history as
a cancel does) and the turn ends with a ModelError, so the session takes the next prompt.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any

from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from zocratesd.config import ModelConfig, ResearchConfig
from zocratesd.engine.agent import build_coordinator
from zocratesd.engine.models.offline import OfflineLlm
from zocratesd.engine.retrieval import InMemoryRetriever, Passage, Retriever
from zocratesd.errors import ModelError
from zocratesd.store import APP_NAME, USER_ID
from zocratesd.store.ui import REQUEST_INPUT_CALL


class Engine:
    def __init__(
        self, service: BaseSessionService, model: BaseLlm, retriever: Retriever, research: ResearchConfig | None = None,
        limits: ModelConfig | None = None,
    ):
        self.model = model
        self.limits = limits or ModelConfig()
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


async def warm_up() -> None:
    """One throw-away offline turn in memory: ADK imports much of its flow lazily, which made the
    first real turn 0.5-0.65 s slower (research/adk.md, cold start). Touches no user data."""
    svc = InMemorySessionService()
    engine = Engine(svc, OfflineLlm(), InMemoryRetriever([Passage(item_key="WARMUP01", title="warm-up", text="warm up text.")]))
    await svc.create_session(app_name=APP_NAME, user_id=USER_ID, session_id="warmup")
    msg = types.Content(role="user", parts=[types.Part(text="warm up")])
    async for _ in engine.run_turn("warmup", msg, state_delta=None, window_start=None, abort=asyncio.Event()):
        pass
