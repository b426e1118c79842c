"""Post-turn adaptive compaction (spec section 4).

`Compactor.after_turn(session_id, usage)` is the one entry point: the Daemon builds one Compactor
(from its `SessionsDb`, the compaction config, a probe and a summariser) and calls it after the
turn's answer has been streamed and before the prompt returns, under the session lock. It
1. counts the live completed turns and the coordinator prompt's tokens (the model's last
   `prompt_token_count`, else the chars/4 estimate of turns.estimate_prompt_tokens);
2. applies the envelope gate: turns >= max(min_turns, K + 1) and tokens >= token_floor;
   tokens >= hard_backstop_tokens compacts without asking the probe;
3. otherwise asks the decision probe and compacts when its probability >= decision_threshold
   (a probe failure means no compaction this turn, logged);
4. keeps the latest K turns verbatim and summarises turns 1..N-K (rolling: the previous summary
   plus only the turns after it, over [prev.start, end of turn N-K], which contains and so
   supersedes the previous range under ADK's `_get_compaction_ranges`);
5. appends one `author="user"` compaction event whose state_delta sets `compacted_until` to the
   range's end, so the next turn loads only the window (Daemon.prompt reads it).
Nothing here fails a turn: any error is logged and reported as "not compacted".

Probe choice: `model.provider == "openai"` uses `HttpDecisionProbe` on the same base_url and key
(OpenRouter), every other provider the offline `RuleProbe`. Summariser: offline is extractive,
openai/gemini ask the configured model (summarise.ModelSummariser).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.adk.events import Event, EventActions
from google.adk.events.event_actions import EventCompaction
from google.genai import types

from zocratesd.compaction.probe import (
    PROBE_CONTEXT_TURNS,
    DecisionProbe,
    FixedProbe,
    HttpDecisionProbe,
    ProbeError,
    ProbeInput,
    RuleProbe,
)
from zocratesd.compaction.summarise import ExtractiveSummariser, ModelSummariser, Summariser, transcript
from zocratesd.compaction.turns import estimate_prompt_tokens, latest_compaction, split_turns, summary_text
from zocratesd.config import CompactionConfig, ZocratesConfig
from zocratesd.store import SessionsDb
from zocratesd.updates import StoredEvent, Usage

if TYPE_CHECKING:
    from google.adk.models.base_llm import BaseLlm

__all__ = [
    "CompactionResult", "Compactor", "DecisionProbe", "FixedProbe", "HttpDecisionProbe", "ProbeError",
    "ProbeInput", "RuleProbe", "default_probe", "default_summariser",
]

log = logging.getLogger(__name__)

# State keys a compaction sets (a rewind to before it reverts them with the rest of the state).
COMPACTED_UNTIL = "compacted_until"
COMPACTED_TURNS = "compacted_turns"


@dataclass(frozen=True)
class CompactionResult:
    """What one post-turn evaluation did (published as the `usage` update)."""

    compacted: bool
    reason: str  # "gate", "probe_no", "probe_failed", "backstop", "probe_yes", "nothing_new", "cancelled", "error"
    prompt_tokens: int
    tokens_estimated: bool
    completed_turns: int
    compaction_ms: float
    probability: float | None = None
    start_timestamp: float | None = None
    end_timestamp: float | None = None

    def usage_update(self, context_size: int) -> Usage:
        """The face-neutral `Usage` update (rpc/updates.py maps it to ACP `usage_update`)."""
        return Usage(
            prompt_tokens=self.prompt_tokens,
            tokens_estimated=self.tokens_estimated,
            context_size=context_size,
            compaction_ms=round(self.compaction_ms, 3),
            compacted=self.compacted,
            reason=self.reason,
        )


def _recent_text(turns: list[Any]) -> str:
    return transcript(turns[-PROBE_CONTEXT_TURNS:])


class Compactor:
    """The compaction policy of one daemon: its gate, probe and summariser (replaceable in tests).

    It reads sessions through `db.reader` and appends its compaction events through `db`; the
    caller holds the session's lock (a turn's, in `Daemon`)."""

    def __init__(self, db: SessionsDb, config: CompactionConfig, *, probe: DecisionProbe, summariser: Summariser):
        self.db = db
        self.config = config
        self.probe = probe
        self.summariser = summariser

    @classmethod
    def from_config(cls, db: SessionsDb, config: ZocratesConfig, llm: BaseLlm) -> Compactor:
        """The probe and summariser the configured model provider calls for (module doc); `llm` is
        the model the turns run on."""
        return cls(db, config.compaction, probe=default_probe(config), summariser=default_summariser(config, llm))

    @property
    def effective_min_turns(self) -> int:
        return max(self.config.min_turns, self.config.keep_recent_turns + 1)

    async def evaluate(self, session_id: str, usage: dict[str, Any] | None) -> CompactionResult:
        t0 = time.perf_counter()

        def result(compacted: bool, reason: str, **kw: Any) -> CompactionResult:
            return CompactionResult(compacted=compacted, reason=reason, prompt_tokens=tokens, tokens_estimated=estimated,
                                    completed_turns=completed, compaction_ms=(time.perf_counter() - t0) * 1000, **kw)

        cfg = self.config
        reported = (usage or {}).get("prompt_token_count")
        known = reported if isinstance(reported, int) and not isinstance(reported, bool) else None
        estimated = known is None
        completed = 0
        if known is not None and known < cfg.token_floor:
            tokens = known
            return result(False, "gate")  # below the floor whatever the turn count: nothing to read
        live, covered = await self._history(session_id)
        turns = split_turns(live, first_index=covered + 1)
        completed = covered + len(turns)
        tokens = estimate_prompt_tokens(live) if known is None else known
        if completed < self.effective_min_turns or tokens < cfg.token_floor:
            return result(False, "gate")
        prev = latest_compaction(live)
        prev_end = float(prev["end_timestamp"]) if prev else float("-inf")
        k = cfg.keep_recent_turns
        to_compact = turns[: len(turns) - k] if k else turns
        new = [t for t in to_compact if t.start > prev_end]
        if not new:
            return result(False, "nothing_new")
        probability: float | None = None
        if tokens >= cfg.hard_backstop_tokens:
            reason = "backstop"
        else:
            uncompacted = [t for t in turns if t.start > prev_end]
            probe_input = ProbeInput(
                questions=[t.question for t in turns], recent=_recent_text(turns), prompt_tokens=tokens,
                hard_backstop_tokens=cfg.hard_backstop_tokens, turns_since_compaction=len(uncompacted),
                keep_recent_turns=k,
            )
            try:
                probability = float(await self.probe.decide(probe_input))
            except Exception as exc:  # any probe failure: no compaction this turn, never a failed turn
                log.warning("session %s: compaction probe failed, not compacting this turn: %s", session_id, exc)
                return result(False, "probe_failed")
            if probability < cfg.decision_threshold:
                return result(False, "probe_no", probability=probability)
            reason = "probe_yes"
        previous = summary_text(prev) if prev else None
        summary = await self.summariser.summarise(previous, new)
        start = float(prev["start_timestamp"]) if prev else to_compact[0].start
        end = to_compact[-1].end
        await self.append(session_id, start, end, summary, covered=to_compact[-1].index)
        out = result(True, reason, probability=probability, start_timestamp=start, end_timestamp=end)
        log.info("session %s: compacted turns 1-%d (%s, %d tokens) in %.1f ms",
                 session_id, to_compact[-1].index, reason, tokens, out.compaction_ms)
        return out

    async def compact_now(self, session_id: str) -> CompactionResult:
        """Compact on the user's request (`/compact`): everything but the last `keep_recent_turns`
        turns not yet compacted, past the gate and the probe. Reason "requested", or
        "nothing_new" when no such turn exists. The caller holds the session's lock."""
        t0 = time.perf_counter()
        live, covered = await self._history(session_id)
        turns = split_turns(live, first_index=covered + 1)
        tokens = estimate_prompt_tokens(live)
        prev = latest_compaction(live)
        prev_end = float(prev["end_timestamp"]) if prev else float("-inf")
        k = self.config.keep_recent_turns
        to_compact = turns[: len(turns) - k] if k else turns
        new = [t for t in to_compact if t.start > prev_end]
        if not new:
            return CompactionResult(False, "nothing_new", tokens, True, covered + len(turns),
                                    (time.perf_counter() - t0) * 1000)
        summary = await self.summariser.summarise(summary_text(prev) if prev else None, new)
        start = float(prev["start_timestamp"]) if prev else to_compact[0].start
        end = to_compact[-1].end
        await self.append(session_id, start, end, summary, covered=to_compact[-1].index)
        log.info("session %s: compacted turns 1-%d on request", session_id, to_compact[-1].index)
        return CompactionResult(True, "requested", tokens, True, covered + len(turns), (time.perf_counter() - t0) * 1000,
                                start_timestamp=start, end_timestamp=end)

    async def _history(self, session_id: str) -> tuple[list[StoredEvent], int]:
        """The live events to evaluate and how many turns precede them.

        After a compaction, only the window (what the next turn loads: the compaction and the
        turns after its range) and the covered turn count from the state: a turn's compaction
        step then costs the same at 50 or 5000 events. A rewind to before the compaction reverts
        both state keys, so that case (and no compaction yet) reads the whole live session.
        """
        reader = self.db.reader
        state = await reader.session_state(session_id)
        until, covered = state.get(COMPACTED_UNTIL), state.get(COMPACTED_TURNS)
        if isinstance(until, (int, float)) and isinstance(covered, int) and not isinstance(covered, bool):
            return await reader.window(session_id, float(until)), covered
        return (await reader.live_session(session_id)).live, 0

    async def append(self, session_id: str, start: float, end: float, summary: str, *, covered: int) -> None:
        await self.db.append_event(session_id, compaction_event(start, end, summary, covered=covered))

    async def after_turn(
        self, session_id: str, usage: dict[str, Any] | None, *, cancelled: bool = False, paused: bool = False,
        enabled: bool = True,
    ) -> Usage:
        """Evaluate (and maybe run) compaction after a turn; returns the `usage` update to publish.
        Never raises: a failure is logged and reported as not compacted. A cancelled turn, or one
        paused at a research checkpoint, is not complete: it is never compacted; nor is a session
        whose `compaction` setting is off (`enabled` False; reason "off")."""
        t0 = time.perf_counter()
        size = self.config.hard_backstop_tokens
        if cancelled or paused or not enabled:
            reported = int((usage or {}).get("prompt_token_count") or 0)
            why = "cancelled" if cancelled else "paused" if paused else "off"
            res = CompactionResult(False, why, reported, usage is None, 0, 0.0)
            return res.usage_update(size)
        try:
            res = await self.evaluate(session_id, usage)
        except Exception:
            log.exception("session %s: compaction failed; the conversation is left as it was", session_id)
            res = CompactionResult(False, "error", int((usage or {}).get("prompt_token_count") or 0), usage is None, 0,
                                   (time.perf_counter() - t0) * 1000)
        return res.usage_update(size)


def compaction_event(start: float, end: float, summary: str, *, covered: int) -> Event:
    """A custom compaction (research/adk.md section 6): author "user", a fresh invocation id, the
    root branch and no isolation scope, timestamp left at now (it must sort after its range).
    Its state_delta: `compacted_until` (Daemon.prompt loads only events after it) and
    `compacted_turns` (how many turns the range covers, so the next evaluation reads the window)."""
    return Event(
        author="user",
        invocation_id=Event.new_id(),
        actions=EventActions(
            compaction=EventCompaction(
                start_timestamp=start, end_timestamp=end,
                compacted_content=types.Content(role="model", parts=[types.Part(text=summary)]),
            ),
            state_delta={COMPACTED_UNTIL: end, COMPACTED_TURNS: covered},
        ),
    )


def default_probe(config: ZocratesConfig) -> DecisionProbe:
    m = config.model
    if m.provider == "openai" and m.base_url:
        return HttpDecisionProbe(m.base_url, config.compaction.probe_model, api_key=m.api_key(),
                                 timeout_s=config.compaction.probe_timeout_s, max_answer_bytes=m.max_line_bytes)
    return RuleProbe()


def default_summariser(config: ZocratesConfig, llm: BaseLlm) -> Summariser:
    """Offline: extractive; any other provider asks `llm`, the configured model."""
    return ExtractiveSummariser() if config.model.provider == "offline" else ModelSummariser(llm)
