"""The cited sources of answers, and their bibliography (core: `Daemon.export_citations`).

An answer's sources are its `# Cited Sources` entries, each ending with the item's
`zotero://select/...` link (engine/answer/sources.py writes them; a real model is asked to); an
answer without that list (a model that cites passages by number and lists nothing) cites the
items its checked citations name (quotes/verify.py: the message's `citations`). A session's are
its answers', in the order first cited, each item once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from zocrates_wire.ui_session import UiMessage
from zocratesd import zotero_profile
from zocratesd.citations.bibliography import CiteItem, Export, load, render
from zocratesd.errors import InvalidInput, ZocratesError
from zocratesd.limits import CITED_SOURCE_RE, MAX_EXPORT_ITEMS


class IndexReads(Protocol):
    """What of the library is read here: a function run on the index's connection (library/service.py)."""

    async def read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any: ...



def cited_refs(answers: Iterable[UiMessage]) -> list[tuple[str, str]]:
    """(library, item key) of every source the answers cite, in order, each once: an answer's
    listed sources, else the items its checked citations name."""
    out: dict[tuple[str, str], None] = {}
    for m in answers:
        listed = [("user" if s.group(3) == "library" else s.group(3), s.group(4)) for s in CITED_SOURCE_RE.finditer(m["text"])]
        checked = [(c["library"], c["item_key"]) for c in m.get("citations") or () if c["item_key"] is not None]
        out.update(dict.fromkeys(listed or checked))
    return list(out)


async def export_cited(
    get_session: Callable[[str], Awaitable[Any]], library: IndexReads | None, data_dir: Path | None, *,
    session_id: str | None = None, invocation_id: str | None = None, items: Sequence[tuple[str, str]] = (),
    format: str = "bibtex", style: str | None = None,  # noqa: A002 - the wire's name
) -> Export:
    """The bibliography of what a session's answers cite (one answer's, with `invocation_id`),
    and of `items` ((library, key) pairs); SessionNotFound for a session that is not there."""
    refs: list[tuple[str, str]] = []
    if session_id is not None:
        view = await get_session(session_id)
        refs += cited_refs(m for m in view["messages"]
                           if m["role"] == "assistant" and (invocation_id is None or m["invocation_id"] == invocation_id))
    refs += [r for r in items if r not in refs]
    return await export(library, data_dir, refs, format, style)


async def export(library: IndexReads | None, data_dir: Path | None, refs: list[tuple[str, str]], fmt: str,
                 style: str | None = None) -> Export:
    """The bibliography of `refs` in `fmt`; InvalidInput when there is nothing to export."""
    if not refs:
        raise InvalidInput("nothing cited to export: no answer of this session cites a source, and no items were given")
    if len(refs) > MAX_EXPORT_ITEMS:
        raise InvalidInput(f"at most {MAX_EXPORT_ITEMS} items per export", count=len(refs))
    if library is None:
        raise ZocratesError("this daemon has no library index to read the cited items from")
    loaded = await library.read(lambda conn: load(conn, refs))
    if loaded is None:
        raise ZocratesError("the library index is not ready yet (it is still being built): try again in a moment")
    items, missing = loaded
    return await asyncio.to_thread(_render, items, fmt, data_dir, style, missing)


def _render(items: list[CiteItem], fmt: str, data_dir: Path | None, style: str | None, missing: list[tuple[str, str]]) -> Export:
    # Without a style asked for, text comes in the one the user's Zotero copies with (Quick Copy),
    # when that style is installed in the data dir's styles.
    preferred = zotero_profile.quick_copy_style(zotero_profile.default_profile(Path.home())) if fmt == "text" and style is None else None
    return render(items, fmt, data_dir=data_dir, style=style, preferred_style=preferred, missing=missing)
