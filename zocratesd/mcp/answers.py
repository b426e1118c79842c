"""What `ask` and `resume` return: a turn's outcome as typed structs, JSON (`structuredContent`,
schemas.py's `_TURN_OUTPUT`) and text only at the edge.

The sources are the answer's `# Cited Sources` entries, with what the turn's searches knew of
each item (`Found`, gathered from the search tool's results as the turn streams them); without a
list (a model that cites passages by number and lists nothing), the items its checked citations
name (quotes/verify.py), each once; when the answer cites nothing, the items the searches found,
uncited.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from zocrates_wire.ui_session import CitationCheck, QuoteCheck
from zocratesd.limits import CITED_SOURCE_RE
from zocratesd.mcp.schemas import escape_text

# Sources an `ask` result lists when the answer cited nothing (the passages it found instead).
MAX_UNCITED_SOURCES: Final = 20


@dataclass(slots=True)
class Found:
    """An item a search of the turn brought: its first passage's metadata, and its pages."""

    item_key: str
    library: str
    title: str | None
    creators: list[str]
    year: int | None
    pages: set[int] = field(default_factory=set)
    citation_key: str | None = None


@dataclass(frozen=True, slots=True)
class Source:
    item_key: str
    library: str
    link: str
    cited: bool
    n: int | None = None
    title: str | None = None
    creators: tuple[str, ...] = ()
    year: int | None = None
    pages: tuple[int, ...] = ()
    citation_key: str | None = None  # for LaTeX and Markdown (citations/keys.py)
    # The answer's quotes and claims citing it, checked against its text (quotes/verify.py):
    # None when nothing citing it was checked.
    verified: bool | None = None
    checks: tuple[QuoteCheck, ...] = ()
    partial: str | None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    message: str | None
    invocation_id: str
    interrupt_id: str


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    session_id: str
    status: Literal["answered", "checkpoint", "cancelled"]
    answer: str
    sources: tuple[Source, ...]
    search_rounds: int
    invocation_id: str | None
    checkpoint: Checkpoint | None

    def structured(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        text = escape_text(self.answer)  # the model quotes library text: escaped as the other tools' text is
        if self.checkpoint is not None:
            text += (f"\n\n[Research checkpoint] {escape_text(self.checkpoint.message or '')}\nContinue with the resume "
                     f"tool: session_id={self.session_id}, action=extend (search further; optional guidance) or "
                     "synthesize (answer now).")
        elif self.status == "cancelled":
            text += "\n\n[cancelled]"
        return f"{text}\n\n(session_id: {self.session_id})"


def collect(found: dict[str, Found], raw: Any) -> None:
    """Remember each item a search_library result (a tool call's raw output) brought."""
    passages = raw.get("passages") if isinstance(raw, dict) else None
    for p in passages if isinstance(passages, list) else ():
        if not isinstance(p, dict) or not isinstance(p.get("item_key"), str):
            continue
        seen = found.setdefault(p["item_key"], Found(p["item_key"], p.get("library") or "user", p.get("title"),
                                                     list(p.get("creators") or []), p.get("year"),
                                                     citation_key=p.get("citation_key")))
        if isinstance(p.get("page"), int):
            seen.pages.add(p["page"])


def sources(answer: str, found: dict[str, Found], citations: Sequence[CitationCheck] | None = None) -> tuple[Source, ...]:
    """The answer's cited sources, or, when it cites none, the items the searches found; each
    with its citation's checks (`citations`: the turn's, by number and item)."""
    by_n = {c["n"]: c for c in citations or ()}
    by_key = {c["item_key"]: c for c in citations or ()}

    def checked(c: CitationCheck | None) -> tuple[bool | None, tuple[QuoteCheck, ...], str | None]:
        return (None, (), None) if c is None else (c["verified"], tuple(c["checks"]), c["partial"])

    cited = []
    for m in CITED_SOURCE_RE.finditer(answer):
        key = m.group(4)
        meta = found.get(key)
        c = by_n.get(int(m.group(1)))
        cited.append(Source(key, "user" if m.group(3) == "library" else m.group(3), m.group(2), True, int(m.group(1)),
                            meta.title if meta else None, tuple(meta.creators) if meta else (),
                            meta.year if meta else None, tuple(sorted(meta.pages)) if meta else (),
                            meta.citation_key if meta else None,
                            *checked(c if c is not None and c["item_key"] == key else None)))
    if cited:
        return tuple(cited)
    by_item: dict[tuple[str, str], list[CitationCheck]] = {}
    for c in citations or ():
        if c["item_key"] is not None:
            by_item.setdefault((c["item_key"], c["library"]), []).append(c)
    if by_item:
        return tuple(_checked_source(key, library, checks, found.get(key)) for (key, library), checks in by_item.items())
    return tuple(
        Source(key, meta.library, f"zotero://select/{'library' if meta.library == 'user' else meta.library}/items/{key}",
               False, None, meta.title, tuple(meta.creators), meta.year, tuple(sorted(meta.pages)), meta.citation_key,
               *checked(by_key.get(key)))
        for key, meta in list(found.items())[:MAX_UNCITED_SOURCES]
    )


def _checked_source(key: str, library: str, citations: list[CitationCheck], meta: Found | None) -> Source:
    """An item the answer cites by passage number (maybe several: one per passage of it), its checks merged."""
    states = [c["verified"] for c in citations if c["verified"] is not None]
    verified = None if not states else all(states)
    link = f"zotero://select/{'library' if library == 'user' else library}/items/{key}"
    return Source(key, library, link, True, citations[0]["n"], meta.title if meta else citations[0]["title"],
                  tuple(meta.creators) if meta else (), meta.year if meta else None,
                  tuple(sorted(meta.pages)) if meta else (), meta.citation_key if meta else None, verified,
                  tuple(ch for c in citations for ch in c["checks"]), next((c["partial"] for c in citations if c["partial"]), None))
