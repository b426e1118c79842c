"""The UI session object (spec 2.2) as it crosses the wire: `_zocrates/session/get`, the HTTP
shim's `GET /sessions/{id}`, a turn's `pending_hitl`. Declared once, for the daemon that builds it
(zocratesd/store/ui.py) and the client library that reads it (zocrates_client's `UiSession`)."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class FoundIn(TypedDict):
    """Where a quote not in the cited item is: another item the answer cites or the search found."""

    item_key: str
    library: str
    title: str
    page: str | None
    link: str | None


class QuoteCheck(TypedDict):
    """One quote or cited claim of an answer, checked against the cited item's text
    (zocratesd/quotes/verify.py; protocol/README.md, "Checked citations")."""

    kind: Literal["quote", "claim"]
    text: str
    status: Literal["found", "supported", "misquoted", "not_found", "unsupported"]
    cited_page: str | None
    page: str | None
    page_number: int | None
    link: str | None
    page_corrected: bool
    source_reads: str | None
    found_in: FoundIn | None


class CitationCheck(TypedDict):
    """An answer's citation [n] checked: `verified` true, false, or None when nothing was read."""

    n: int
    item_key: str | None
    library: str
    verified: bool | None
    partial: str | None
    title: str | None
    # The item's citation key, and how the answer cites it when not by number ("[@key]",
    # "(Lewis, 2020)", "Lewis (2020)"); absent from checks stored before they were kept.
    citation_key: NotRequired[str | None]
    label: NotRequired[str | None]
    checks: list[QuoteCheck]


class UiMessage(TypedDict):
    id: str | None  # the stored event's id (the chunks of one message share it)
    role: Literal["user", "assistant"]
    text: str
    thought: str | None
    author: str
    timestamp: float | None
    invocation_id: str | None
    # An answer's citations checked against their sources (zocratesd/quotes/verify.py), by number.
    citations: NotRequired[list[CitationCheck]]


class PendingHitl(TypedDict):
    """A research checkpoint waiting for the user's answer: its `adk_request_input` call."""

    invocation_id: str
    interrupt_id: str
    message: str | None
    payload: Any


class UiSession(TypedDict):
    """`_zocrates/session/get`: the UI session object, rewinds applied."""

    id: str
    title: str
    created_at: float
    updated_at: float
    messages: list[UiMessage]
    pending_hitl: PendingHitl | None
