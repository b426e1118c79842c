"""An item's text as the library holds it (text.ItemText): from the library index's chunks, or
from the passages a daemon without an index searches (a passages file: tests, demos).

The index keeps a PDF's text without its page furniture and with words hyphenated at a line's
end joined (library/furniture.py), cut into chunks that never cross a page: a page is its chunks
in order. An item with no full text in the index was read only in part: its abstract, or only
its metadata; so was a PDF of which Zotero extracted only the first pages (its full-text settings
stop at 100 by default: the index keeps Zotero's counts with the item's attachments). A page with
no chunk is no sign of a missing page: a page of figures has no text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from itertools import groupby

from zocratesd.library.catalog import find_uid
from zocratesd.library.retrieval import METADATA_BREAK, Passage
from zocratesd.quotes.text import ItemText, Page


def _partial(pages: list[Page], abstract: bool, counts: Iterable[tuple[object, object]] = ()) -> str | None:
    """Why the item's text is incomplete: no full text at all, or a PDF of which Zotero extracted
    only the first pages (`counts`: its attachments' (indexed, total) pages, as Zotero counted them)."""
    if not any(p.kind == "fulltext" for p in pages):
        return "only its abstract was available, not its full text" if abstract else "only its metadata was available, not its text"
    cut = [(i, t) for i, t in counts if isinstance(i, int) and isinstance(t, int) and 0 < i < t]
    if cut:
        indexed, total = cut[0]
        return f"Zotero extracted the text of only {indexed} of its {total} PDF pages"
    return None


def index_text(conn: sqlite3.Connection, key: str, library: str | None) -> ItemText | None:
    """The item's text from the library index (a read connection); None when it holds no such item."""
    uid = find_uid(conn, key, library)
    if uid is None:
        return None
    row = conn.execute("SELECT item_key, library, title, children, citation_key FROM items WHERE uid = ?", (uid,)).fetchone()
    rows = conn.execute(
        "SELECT c.kind, c.attachment_key, c.page, c.page_label, f.body FROM chunks c JOIN chunks_fts f ON f.rowid = c.id "
        "WHERE c.uid = ? ORDER BY c.kind != 'fulltext', c.attachment_key, c.page, c.id", (uid,),
    ).fetchall()
    pages: list[Page] = []
    abstract = False
    for (kind, att, page, label), group in groupby(rows, key=lambda r: (r[0], r[1], r[2], r[3])):
        bodies = [r[4] for r in group]
        if kind == "metadata":
            # The header (names, year, tags) is searchable, never text of the item: only the abstract.
            bodies = [b.partition(METADATA_BREAK)[2] for b in bodies]
            abstract = abstract or any(b.strip() for b in bodies)
        text = "\n".join(b for b in bodies if b.strip())
        if not text:
            continue
        pages.append(Page(text, page, label, att, kind))
    try:
        attachments = json.loads(row[3] or "{}").get("attachments") or []
    except (ValueError, AttributeError):
        attachments = []
    counts = [(a.get("indexed_pages"), a.get("total_pages")) for a in attachments if isinstance(a, dict)]
    return ItemText(row[0], row[1], row[2], pages, _partial(pages, abstract, counts), row[4])


def passages_text(passages: Iterable[Passage], key: str, library: str | None) -> ItemText | None:
    """The item's text from a list of passages (a passages file); None when none is of it."""
    mine = [p for p in passages if p.item_key == key and (library is None or p.library == library)]
    if not mine:
        return None
    pages = [Page(p.text, p.page, p.page_label, p.attachment_key, p.kind) for p in mine]
    return ItemText(key, mine[0].library, mine[0].title, pages, _partial(pages, any(p.kind == "metadata" for p in mine)),
                    next((p.citation_key for p in mine if p.citation_key), None))
