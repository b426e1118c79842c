"""The core's domain rules on what a face hands it: session ids, titles, prompts, checkpoint
answers, library scopes and pages. Each check returns the cleaned value or raises InvalidInput
naming the field; the limits themselves are declared in zocratesd/limits.py.

Wire shapes (is it an object, is this key a string) are the faces' models' business; what is
checked here holds whichever face a value came through, in-process callers included.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

import msgspec

from zocratesd.errors import InvalidInput
from zocratesd.limits import (
    ITEM_KEY_RE,
    LIBRARY_RE,
    MAX_ACTIVE_ITEMS,
    MAX_GUIDANCE_CHARS,
    MAX_INTERRUPT_ID_CHARS,
    MAX_OFFSET,
    MAX_PROMPT_CHARS,
    MAX_QUERY_CHARS,
    MAX_SEARCH_TOP_K,
    MAX_TITLE_CHARS,
    SESSION_ID_RE,
)

_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]+")

# A title made from the first prompt keeps this many characters (a sidebar row).
TITLE_FROM_PROMPT_CHARS: Final = 60
RESUME_ACTIONS: Final = ("extend_budget", "synthesize", "search_online")
ITEM_ORDERS: Final = ("added", "modified")


class ResumeAnswer(msgspec.Struct, frozen=True, omit_defaults=True):
    """A checkpoint's answer, cleaned: guidance only with "extend_budget", never blank."""

    action: Literal["extend_budget", "synthesize", "search_online"]  # search_online: beyond the library, then answer
    guidance: str | None = None

    def to_json(self) -> dict[str, str]:
        return {"action": self.action, **({"guidance": self.guidance} if self.guidance else {})}


def check_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        raise InvalidInput(
            "a session id is 1-128 characters of letters, digits, '_', '.', ':' or '-'",
            sessionId=session_id if isinstance(session_id, str) else None,
        )
    return session_id


def check_unicode(text: str, what: str) -> None:
    """Refuse lone surrogates (what a JSON `\\ud800` escape decodes to): SQLite would store text its
    readers cannot decode, and one such title would break `session/list` for every session."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} must be valid Unicode text (no lone surrogates)") from None


def clean_title(title: Any) -> str:
    """A title as the user meant it: control characters become spaces, ends trimmed, 1-200 chars."""
    if not isinstance(title, str):
        raise InvalidInput("a title must be a string")
    check_unicode(title, "a title")
    cleaned = _CONTROL_RE.sub(" ", title).strip()
    if not cleaned:
        raise InvalidInput("a title cannot be empty")
    if len(cleaned) > MAX_TITLE_CHARS:
        raise InvalidInput(f"a title has at most {MAX_TITLE_CHARS} characters", length=len(cleaned))
    return cleaned


def title_from_prompt(text: str) -> str:
    line = " ".join(text.split())
    if len(line) <= TITLE_FROM_PROMPT_CHARS:
        return line
    cut = line[: TITLE_FROM_PROMPT_CHARS - 1].rsplit(" ", 1)[0]
    return (cut or line[: TITLE_FROM_PROMPT_CHARS - 1]) + "…"


def check_prompt(text: Any) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("a prompt needs some text")
    if len(text) > MAX_PROMPT_CHARS:
        raise InvalidInput(f"a prompt has at most {MAX_PROMPT_CHARS} characters", length=len(text))
    check_unicode(text, "a prompt")
    return text


def check_interrupt_ids(invocation_id: Any, interrupt_id: Any) -> None:
    for name, value in (("an invocation id", invocation_id), ("an interrupt id", interrupt_id)):
        if not isinstance(value, str) or not value or len(value) > MAX_INTERRUPT_ID_CHARS:
            raise InvalidInput(f"{name} must be a non-empty string of at most {MAX_INTERRUPT_ID_CHARS} characters")


def check_invocation_id(invocation_id: Any) -> str:
    """A turn to rewind to (the same bound as a checkpoint's ids)."""
    if not isinstance(invocation_id, str) or not invocation_id or len(invocation_id) > MAX_INTERRUPT_ID_CHARS:
        raise InvalidInput("an invocation id must be a non-empty string")
    return invocation_id


def check_resume_response(response: Any) -> ResumeAnswer:
    """`{action: "extend_budget"|"synthesize"|"search_online", guidance?: str}`, cleaned; InvalidInput if not."""
    if isinstance(response, ResumeAnswer):  # checked already (a face may check before it answers)
        return response
    if not isinstance(response, dict):
        raise InvalidInput('a checkpoint answer is an object {"action": "extend_budget"|"synthesize"|"search_online", "guidance"?}')
    action = response.get("action")
    if action not in RESUME_ACTIONS:
        raise InvalidInput('a checkpoint answer\'s action is "extend_budget", "synthesize" or "search_online"', action=str(action)[:40])
    guidance = response.get("guidance")
    if guidance is not None and not isinstance(guidance, str):
        raise InvalidInput("guidance must be a string")
    if guidance is not None and len(guidance) > MAX_GUIDANCE_CHARS:
        raise InvalidInput(f"guidance has at most {MAX_GUIDANCE_CHARS} characters", length=len(guidance))
    kept = guidance.strip() if guidance and action == "extend_budget" else None
    return ResumeAnswer(action, kept or None)


def check_library(library: Any) -> str | None:
    """A library filter: "user" or "groups/<groupID>", or None for every library."""
    if library is None or library == "":
        return None
    if not isinstance(library, str) or not LIBRARY_RE.match(library):
        raise InvalidInput('library is "user" or "groups/<groupID>"', library=str(library)[:40])
    return library


def check_page(limit: Any, offset: Any) -> None:
    for name, value, low, high in (("limit", limit, 1, None), ("offset", offset, 0, MAX_OFFSET)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low
                                  or (high is not None and value > high)):
            within = f"from {low} to {high}" if high is not None else f"{low} or more"
            raise InvalidInput(f"{name} is a whole number {within}", **{name: str(value)[:20]})


def _whole(value: Any, low: int, high: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and low <= value <= high


def check_query(query: Any, top_k: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(f"query is longer than {MAX_QUERY_CHARS} characters", length=len(query))
    check_unicode(query, "query")
    if not _whole(top_k, 1, MAX_SEARCH_TOP_K):
        raise InvalidInput(f"top_k is a number from 1 to {MAX_SEARCH_TOP_K}", top_k=str(top_k)[:20])
    return query


def check_item_keys(item_keys: tuple[str, ...]) -> tuple[str, ...]:
    if len(item_keys) > MAX_ACTIVE_ITEMS or not all(isinstance(k, str) and ITEM_KEY_RE.match(k) for k in item_keys):
        raise InvalidInput(f"item_keys are 1 to {MAX_ACTIVE_ITEMS} Zotero keys (8 characters A-Z, 0-9)")
    return tuple(item_keys)


def check_item_key(key: Any) -> str:
    if not isinstance(key, str) or not ITEM_KEY_RE.match(key):
        raise InvalidInput("an item key is 8 characters A-Z, 0-9", key=str(key)[:40])
    return key


def check_fulltext_offset(offset: Any) -> int:
    if not _whole(offset, 0, MAX_OFFSET):
        raise InvalidInput(f"fulltext_offset is a chunk number from 0 to {MAX_OFFSET}")
    return int(offset)


def check_order(order: Any) -> str:
    if order not in ITEM_ORDERS:
        raise InvalidInput('order is "added" or "modified"', order=str(order)[:20])
    return str(order)


def check_suggestion_limit(limit: Any, most: int) -> int:
    if not _whole(limit, 1, most):
        raise InvalidInput(f"limit is a whole number from 1 to {most}", field="limit")
    return int(limit)
