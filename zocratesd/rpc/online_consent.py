"""Whether a turn may search beyond the library, put to the person in their editor the first time
the turn would (online.mode `ask`): the search terms, and that only they leave the machine. An
editor with form elicitation gets a form (the MCP face forwards it to its own client), any other
`session/request_permission` with ACP's four kinds of answer: this question, always (online.mode
becomes `on`), the library only, or never (online.mode becomes `off`). No answer keeps the turn in
the library.
"""

from __future__ import annotations

import logging
import uuid
from typing import Final

import anyio

from zocrates_wire.errors import ConnectionLost, RpcError
from zocratesd.core.online import OnlineAnswer
from zocratesd.logtext import escape_for_log
from zocratesd.rpc.peer import Peer

log = logging.getLogger(__name__)

ONLINE_OPTIONS: Final = [
    {"optionId": "once", "name": "Search online for this question", "kind": "allow_once"},
    {"optionId": "always", "name": "Always search online when my library has no answer", "kind": "allow_always"},
    {"optionId": "no", "name": "Answer from my library only", "kind": "reject_once"},
    {"optionId": "never", "name": "Never search online", "kind": "reject_always"},
]
_ANSWERS: Final = frozenset(o["optionId"] for o in ONLINE_OPTIONS)
# The turn waits this long for the answer; then it goes on in the library alone.
ONLINE_ANSWER_TIMEOUT_S: Final = 300.0
PROVIDERS: Final = "OpenAlex, arXiv and Crossref"


def question(terms: str) -> str:
    return (f"Your library does not answer this. Search {PROVIDERS} for “{terms}”? "
            "Only these search terms leave this machine.")


def elicitation_schema() -> dict[str, object]:
    return {
        "type": "object",
        "title": "Search beyond your library",
        "properties": {"choice": {"type": "string", "title": "Search online?", "default": "once",
                                  "oneOf": [{"const": o["optionId"], "title": o["name"]} for o in ONLINE_OPTIONS]}},
        "required": ["choice"],
    }


async def ask_online(peer: Peer, session_id: str, terms: str, *, form: bool) -> OnlineAnswer | None:
    """The person's answer (`form`: the client takes form elicitation), or None: no answer."""
    call_id = f"online-search-{uuid.uuid4().hex[:12]}"
    if form:
        method = "elicitation/create"
        params: dict[str, object] = {"sessionId": session_id, "toolCallId": call_id, "mode": "form",
                                  "message": question(terms), "requestedSchema": elicitation_schema(),
                                  "_meta": {"zocrates": {"online": {"terms": terms}}}}
    else:
        method = "session/request_permission"
        params = {
            "sessionId": session_id,
            "toolCall": {
                "toolCallId": call_id, "title": f"Search online: {terms}", "kind": "fetch", "status": "pending",
                "rawInput": {"terms": terms, "providers": PROVIDERS},
                "content": [{"type": "content", "content": {"type": "text", "text": question(terms)}}],
            },
            "options": ONLINE_OPTIONS,
            "_meta": {"zocrates": {"online": {"terms": terms}}},
        }
    with anyio.move_on_after(ONLINE_ANSWER_TIMEOUT_S):
        try:
            result = await peer.request(method, params)
        except (RpcError, ConnectionLost) as exc:
            log.info("%s: no answer about online search (%s); the turn stays in the library", peer.name, escape_for_log(exc))
            return None
        if not isinstance(result, dict):
            return None
        if form:
            content = result.get("content") if result.get("action") == "accept" else None
            chosen = content.get("choice") if isinstance(content, dict) else None
        else:
            outcome = result.get("outcome")
            chosen = outcome.get("optionId") if isinstance(outcome, dict) and outcome.get("outcome") == "selected" else None
        return chosen if chosen in _ANSWERS else None
    return None
