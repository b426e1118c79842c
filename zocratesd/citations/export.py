"""The cited sources of answers, and their bibliography (core: `Daemon.export_citations`).

An answer's sources are its `# Cited Sources` entries, each ending with the item's
`zotero://select/...` link (engine/answer/sources.py writes them; a real model is asked to);
a session's are its answers', in the order first cited, each item once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from zocratesd.citations.bibliography import Export, load, render
from zocratesd.errors import InvalidInput, ZocratesError
from zocratesd.limits import CITED_SOURCE_RE, MAX_EXPORT_ITEMS

if TYPE_CHECKING:
    from zocratesd.library.service import Library



def cited_refs(answers: Iterable[str]) -> list[tuple[str, str]]:
    """(library, item key) of every source the answers list, in order, each once."""
    out: dict[tuple[str, str], None] = {}
    for text in answers:
        for m in CITED_SOURCE_RE.finditer(text):
            out.setdefault(("user" if m.group(3) == "library" else m.group(3), m.group(4)), None)
    return list(out)


async def export(library: Library | None, data_dir: Path | None, refs: list[tuple[str, str]], fmt: str,
                 style: str | None = None) -> Export:
    """The bibliography of `refs` in `fmt`; InvalidInput when there is nothing to export."""
    if not refs:
        raise InvalidInput("nothing cited to export: no answer of this session lists sources, and no items were given")
    if len(refs) > MAX_EXPORT_ITEMS:
        raise InvalidInput(f"at most {MAX_EXPORT_ITEMS} items per export", count=len(refs))
    if library is None:
        raise ZocratesError("this daemon has no library index to read the cited items from")
    loaded = await library.read(lambda conn: load(conn, refs))
    if loaded is None:
        raise ZocratesError("the library index is not ready yet (it is still being built): try again in a moment")
    items, missing = loaded
    return await asyncio.to_thread(render, items, fmt, data_dir=data_dir, style=style, missing=missing)
