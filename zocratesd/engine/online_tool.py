"""`search_online_literature`: the coordinator's second tool (spec 2.3), offered when `online.mode`
is `on`. It searches OpenAlex, arXiv and Crossref for what the library leaves unanswered and returns
the works as numbered sources the model cites by DOI (or by the library item, for a work the
library holds), each marked as an online source. Only the search terms leave the machine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from google.adk.tools import FunctionTool, ToolContext

# ADK builds each tool's response schema with pydantic, which reads only typing_extensions' TypedDict on 3.11.
from typing_extensions import TypedDict

from zocratesd.untrusted import NOTE

TOOL_NAME: Final = "search_online_literature"
# What the model is told when the person has not allowed this turn to go online.
NOT_ALLOWED: Final = ("Online search is not allowed for this turn (the user has not agreed to it: online.mode is ask, or "
                      "they said no). Answer from the library, and tell the user they can allow it for a question "
                      "(zocrates ask --online) or always (online.mode = on).")
# Works one call gives the model: a page of sources, not a bibliography.
WORKS_PER_CALL: Final = 8

# A search of the providers (core/online.py `Online.search`), as the faces' JSON.
SearchOnline = Callable[[str, int], Awaitable[Mapping[str, Any]]]


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


def allowed(mode: str, turn_choice: object) -> bool:
    """Whether this turn may go online: `on` unless the person said no for the turn (`--no-online`),
    `ask` only when they said yes for it (`--online`, the question their face asked)."""
    if turn_choice is False:
        return False
    return mode == "on" or turn_choice is True


def build_online_tool(search: SearchOnline, mode: Callable[[], str]) -> FunctionTool:
    async def search_online_literature(query: str, tool_context: ToolContext) -> OnlineFound:
        """Search scholarly literature beyond the user's library (OpenAlex, arXiv, Crossref) for what
        the library does not answer. Returns numbered works with abstracts; cite them by number and
        DOI link, say they are online sources not in the user's library (unless marked as theirs),
        and that only their abstracts were read."""
        if not allowed(mode(), tool_context.state.get("online_allowed")):
            return {"query": query, "works": [], "failures": [], "untrusted": NOTE,
                    "message": NOT_ALLOWED}
        found = await search(query, WORKS_PER_CALL)
        return {"query": query, "works": _sources(found), "failures": found.get("failures") or [],
                "message": found.get("message"), "untrusted": NOTE}

    return FunctionTool(search_online_literature)
