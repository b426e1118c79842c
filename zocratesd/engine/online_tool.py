"""`search_online_literature`: the coordinator's second tool (spec 2.3), offered when `online.mode`
is `on`. It searches OpenAlex, arXiv and Crossref for what the library leaves unanswered and returns
the works as numbered sources the model cites by DOI (or by the library item, for a work the
library holds), each marked as an online source. Only the search terms leave the machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from google.adk.tools import FunctionTool, ToolContext

# ADK builds each tool's response schema with pydantic, which reads only typing_extensions' TypedDict on 3.11.
from typing_extensions import TypedDict

from zocratesd.errors import ZocratesError
from zocratesd.library.retrieval import ONLINE_KIND, Hit, Passage
from zocratesd.untrusted import NOTE

TOOL_NAME: Final = "search_online_literature"
# What the model is told when the person has not allowed this turn to go online.
NOT_ALLOWED: Final = ("Online search is not allowed for this turn (the user has not agreed to it: online.mode is ask, or "
                      "they said no). Answer from the library, and tell the user they can allow it for a question "
                      "(zocrates ask --online) or always (online.mode = on).")
# Works one call gives the model: a page of sources, not a bibliography.
WORKS_PER_CALL: Final = 8



class OnlineLookup(Protocol):
    """The core's search beyond the library as the research loop uses it (core/online.py)."""

    @property
    def mode(self) -> str: ...

    async def decide(self, session_id: str, choice: object, terms: str) -> str:
        """Whether this turn may go online now ("yes", "no", or "unasked": nobody could be
        asked): the mode, the turn's own choice, else the person's answer in their face."""
        ...

    async def search(self, query: str, *, limit: int) -> Mapping[str, Any]: ...


def online_passages(found: Mapping[str, Any]) -> list[Hit]:
    """The works of a search as passages the answerer quotes and cites: a work the library holds
    as that library item (cited once, as the user's own), any other as an online source whose
    link is its DOI (else its URL) and whose text is its abstract. Best first, scored by rank."""
    hits: list[Hit] = []
    works = [w for w in found.get("works") or () if w.get("abstract") or w.get("in_library")]
    for rank, w in enumerate(works, start=1):
        held = w.get("in_library")
        title = str(w.get("title") or "(untitled)")
        year = w.get("year") if isinstance(w.get("year"), int) else None
        creators = tuple(str(a) for a in w.get("authors") or ())[:20]
        text = str(w.get("abstract") or title)
        if held:
            p = Passage(item_key=held["item_key"], title=title, text=text, creators=creators, year=year,
                        library=held["library"], kind="metadata", link=held["link"])
        else:
            doi = w.get("doi")
            p = Passage(item_key=f"doi:{doi}" if doi else f"online:{rank}:{title[:80]}", title=title, text=text,
                        creators=creators, year=year, library=ONLINE_KIND, kind=ONLINE_KIND,
                        link=f"https://doi.org/{doi}" if doi else w.get("url"))
        hits.append(Hit(p, 1.0 / rank))
    return hits


class OnlineSource(TypedDict, total=False):
    n: int
    title: str
    authors: list[str]
    year: int | None
    venue: str | None
    text: str
    doi: str | None
    link: str | None
    source: str  # "online", or "your library" for a work the library holds
    item_key: str


class OnlineFound(TypedDict):
    query: str
    works: list[OnlineSource]
    failures: list[str]
    message: str | None
    untrusted: str  # untrusted.UNTRUSTED_KEY: what the model is told of the text


def _sources(found: Mapping[str, Any]) -> list[OnlineSource]:
    out: list[OnlineSource] = []
    for n, w in enumerate(found.get("works") or [], start=1):
        held = w.get("in_library")
        out.append({
            "n": n, "title": w["title"], "authors": w["authors"][:6], "year": w["year"], "venue": w["venue"],
            "text": w["abstract"] or "(no abstract)", "doi": w["doi"],
            "link": held["link"] if held else (f"https://doi.org/{w['doi']}" if w["doi"] else w["url"]),
            "source": "your library" if held else "online", **({"item_key": held["item_key"]} if held else {}),
        })
    return out


def build_online_tool(online: OnlineLookup) -> FunctionTool:
    async def search_online_literature(query: str, tool_context: ToolContext) -> OnlineFound:
        """Search scholarly literature beyond the user's library (OpenAlex, arXiv, Crossref) for what
        the library does not answer. Returns numbered works with abstracts; cite them by number and
        DOI link, say they are online sources not in the user's library (unless marked as theirs),
        and that only their abstracts were read."""
        terms = " ".join(query.split())
        if await online.decide(tool_context.session.id, tool_context.state.get("online_allowed"), terms) != "yes":
            return {"query": query, "works": [], "failures": [], "untrusted": NOTE,
                    "message": NOT_ALLOWED}
        try:
            found = await online.search(terms, limit=WORKS_PER_CALL)
        except ZocratesError as exc:  # terms too long, or online search switched off meanwhile: nothing was sent
            return {"query": query, "works": [], "failures": [], "untrusted": NOTE, "message": exc.message}
        return {"query": query, "works": _sources(found), "failures": found.get("failures") or [],
                "message": found.get("message"), "untrusted": NOTE}

    return FunctionTool(search_online_literature)
