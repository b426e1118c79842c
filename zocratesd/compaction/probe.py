"""The decision probe: is the conversation at a natural boundary to compact (topic closure,
progression, anti-stuck)? A probe returns a probability; compaction runs when it is >= tau.

Any failure raises `ProbeError` (or anything else); the compactor logs it and does not compact
this turn. Two probes share the interface:

- `RuleProbe` (offline default): deterministic rules, no network.
- `HttpDecisionProbe`: the OpenRouter Decisions API shape, as zocrates speaks it:

      POST {base_url}/decisions
      Authorization: Bearer <key>            (when a key is configured)
      {"model": "inception/mercury-decide:free",
       "question": "<DECISION_QUESTION>",
       "context": "<the recent turns, as text>",
       "options": ["compact", "continue"]}

      200 {"probability": 0.83, ...}          the probability of the first option, in [0, 1]
          (also accepted: {"decision": {"probability": p}} or {"choices": [{"probability": p}]})

  HTTP 429 is retried (at most MAX_RETRIES_429 times, waiting Retry-After or a growing backoff,
  capped at MAX_BACKOFF_S); the whole probe, retries included, must finish in `timeout_s`. The
  endpoint is the model's, and trusted no more: an answer is read up to `max_answer_bytes` (the
  model's `max_line_bytes`: one JSON document) and no further, a `user:password@` in the URL is sent
  as Basic auth and never logged, and its text is escaped in the ProbeError the compactor logs.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import httpx

from zocratesd.config import MODEL_MAX_LINE_BYTES
from zocratesd.engine.models.openai import split_credentials
from zocratesd.library.retrieval import tokens as terms
from zocratesd.logtext import escape_for_log, redact_credentials

log = logging.getLogger(__name__)

DECISION_QUESTION = (
    "Is this research conversation at a natural boundary where the older turns can be summarised: "
    "a topic was closed, the work progressed to a new step, or the conversation is going in circles?"
)
OPTIONS = ["compact", "continue"]
# 429 handling: a free decision model answers 429 in bursts; two retries ride one out, and the
# probe's own timeout (10 s by default) bounds the total either way: a turn's response waits on it.
MAX_RETRIES_429 = 2
BACKOFF_BASE_S = 0.5
MAX_BACKOFF_S = 2.0
# The recent context sent to the probe: the last few turns, cut to this many characters (a
# decision model needs the gist, not the papers).
PROBE_CONTEXT_TURNS = 4
PROBE_CONTEXT_CHARS = 6000


class ProbeError(Exception):
    """The probe could not decide (HTTP error, timeout, malformed answer)."""


@dataclass(frozen=True)
class ProbeInput:
    questions: list[str]  # every live turn's question, oldest first
    recent: str  # the last turns as text
    prompt_tokens: int
    hard_backstop_tokens: int
    turns_since_compaction: int
    keep_recent_turns: int


class DecisionProbe(Protocol):
    async def decide(self, probe: ProbeInput) -> float: ...


@dataclass
class FixedProbe:
    """Always the same probability (tests, and `decision_threshold` experiments)."""

    probability: float

    async def decide(self, probe: ProbeInput) -> float:
        return self.probability


# RuleProbe weights. A question that shares under TOPIC_SHIFT_OVERLAP of its terms with the one
# before is a new topic (closure of the old one); PROGRESSION_TURNS uncompacted turns beyond K is
# enough material to be worth a summary; a repeated question means the user is stuck.
TOPIC_SHIFT_OVERLAP = 0.2
PROGRESSION_TURNS = 2
# Any one signal alone (closure, progression, stuck) reaches the default tau of 0.75; pressure
# (prompt tokens over the backstop) adds up to PRESSURE_P on top of the base.
BASE_P, TOPIC_P, PROGRESSION_P, STUCK_P, PRESSURE_P = 0.3, 0.45, 0.45, 0.45, 0.3


class RuleProbe:
    """Topic closure, progression and anti-stuck as rules over the questions and token pressure."""

    async def decide(self, probe: ProbeInput) -> float:
        p = BASE_P
        qs = [set(terms(q)) for q in probe.questions[-3:]]
        if len(qs) >= 2 and qs[-1] and qs[-2]:
            overlap = len(qs[-1] & qs[-2]) / max(1, min(len(qs[-1]), len(qs[-2])))
            if overlap < TOPIC_SHIFT_OVERLAP:
                p += TOPIC_P
            if len(qs) == 3 and qs[-1] == qs[-2] == qs[-3]:
                p += STUCK_P
        if probe.turns_since_compaction - probe.keep_recent_turns >= PROGRESSION_TURNS:
            p += PROGRESSION_P
        p += PRESSURE_P * min(1.0, probe.prompt_tokens / max(1, probe.hard_backstop_tokens))
        return min(1.0, p)


def _probability(data: Any) -> float:
    if not isinstance(data, dict):
        raise ProbeError("the decision answer is not a JSON object")
    candidates = [data.get("probability")]
    if isinstance(data.get("decision"), dict):
        candidates.append(data["decision"].get("probability"))
    if isinstance(data.get("choices"), list) and data["choices"] and isinstance(data["choices"][0], dict):
        candidates.append(data["choices"][0].get("probability"))
    for value in candidates:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= float(value) <= 1.0:
            return float(value)
    raise ProbeError(f"the decision answer has no probability in [0, 1]: {escape_for_log(str(data)[:200])}")


class HttpDecisionProbe:
    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 10.0,
        max_answer_bytes: int = MODEL_MAX_LINE_BYTES,
    ):
        # httpx logs every request's URL: it gets the URL without user info, and that as auth.
        self.base_url, self.auth = split_credentials(base_url.rstrip("/"))
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes

    def body(self, probe: ProbeInput) -> dict[str, Any]:
        return {"model": self.model, "question": DECISION_QUESTION, "context": probe.recent[-PROBE_CONTEXT_CHARS:], "options": OPTIONS}

    @staticmethod
    def _backoff(resp: httpx.Response, attempt: int) -> float:
        try:
            wait = float(resp.headers.get("retry-after", ""))
        except ValueError:
            wait = BACKOFF_BASE_S * 2**attempt
        return max(0.0, min(MAX_BACKOFF_S, wait))

    async def decide(self, probe: ProbeInput) -> float:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            with anyio.fail_after(self.timeout_s):
                async with httpx.AsyncClient(timeout=self.timeout_s, headers=headers, auth=self.auth) as client:
                    for attempt in range(MAX_RETRIES_429 + 1):
                        async with client.stream("POST", f"{self.base_url}/decisions", json=self.body(probe)) as resp:
                            if resp.status_code == 429 and attempt < MAX_RETRIES_429:
                                wait = self._backoff(resp, attempt)
                            elif resp.status_code != 200:
                                raise ProbeError(f"the decision endpoint answered HTTP {resp.status_code}")
                            else:
                                return _probability(_json(await self._read(resp)))
                        await anyio.sleep(wait)
        except TimeoutError:
            raise ProbeError(f"the decision endpoint did not answer in {self.timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise ProbeError(f"cannot reach the decision endpoint: {escape_for_log(redact_credentials(str(exc)), 300)}") from None
        raise ProbeError("unreachable")  # pragma: no cover

    async def _read(self, resp: httpx.Response) -> bytes:
        """The answer's body, refused past max_answer_bytes (a decision is a few hundred bytes)."""
        body = bytearray()
        async for data in resp.aiter_bytes():
            body += data
            if len(body) > self.max_answer_bytes:
                raise ProbeError(f"the decision endpoint's answer passed {self.max_answer_bytes} bytes (model.max_line_bytes)")
        return bytes(body)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ProbeError("the decision endpoint answered something that is not JSON") from None
