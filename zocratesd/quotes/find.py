"""A quote to the item and page it comes from: the library index's full-text search finds the
chunks that share the quote's rarest words, then each candidate page is aligned with the quote
(text.py, align.py). Exact means the page has the quote letter for letter (line breaks,
hyphenation, ligatures and quote marks aside); near means its words align at NEAR_RATIO or better
(a few words changed, one left out).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from zocratesd.library.catalog import pdf_link
from zocratesd.library.index import match_expression
from zocratesd.library.retrieval import Passage, tokens
from zocratesd.quotes.align import CANDIDATE_SHARE, NEAR_RATIO, align
from zocratesd.quotes.sources import index_text, passages_text
from zocratesd.quotes.text import ItemText, letters, words

# Candidate chunks read from the full-text index for one quote: the quote's own chunk ranks first
# unless the library has many near copies of it.
CANDIDATE_CHUNKS: Final = 30
# Words of the quote the search uses: its rarest say most, and FTS5's OR of many terms is slow.
QUERY_WORDS: Final = 16


@dataclass(frozen=True, slots=True)
class QuoteMatch:
    item_key: str
    library: str
    title: str
    exact: bool
    score: float  # 1.0 for an exact match, else the word alignment's ratio
    page: int | None  # the PDF's page number
    page_label: str | None  # the page as a reader cites it (its label, else its number)
    link: str  # opens the PDF at that page (else selects the item)
    text: str  # the source's words where the quote is
    kind: str  # fulltext | metadata (the abstract) | note | annotation

    def to_json(self) -> dict[str, object]:
        return {k: getattr(self, k) for k in self.__slots__}


def _match(item: ItemText, quote: str) -> QuoteMatch | None:
    want = words(quote)
    select = f"zotero://select/{'library' if item.library == 'user' else item.library}/items/{item.item_key}"
    exact = item.find(quote)
    best: tuple[float, Any, str] | None = None
    if exact is not None:
        ws = words(exact.text)
        got = align(want, ws)
        best = (1.0, exact, " ".join(ws[got.start : got.end]) if got else " ".join(want))
    else:
        for page, ws in item.candidates(want, CANDIDATE_SHARE):
            got = align(want, ws)
            if got is not None and got.ratio >= NEAR_RATIO and (best is None or got.ratio > best[0]):
                best = (got.ratio, page, " ".join(ws[got.start : got.end]))
    if best is None:
        return None
    ratio, page, text = best
    link = pdf_link(item.library, page.attachment_key, page.page) if page.attachment_key else select
    return QuoteMatch(item.item_key, item.library, item.title, exact is not None, round(ratio, 3), page.page, page.cited,
                      link, text, page.kind)


def _query(quote: str) -> str:
    """The quote's words for the full-text search: the longest first (rare words are long)."""
    ws = list(dict.fromkeys(tokens(quote)))
    return " ".join(sorted(ws, key=len, reverse=True)[:QUERY_WORDS])


def _ranked(found: list[QuoteMatch], limit: int) -> list[QuoteMatch]:
    return sorted(found, key=lambda m: (not m.exact, -m.score))[:limit]


def find_in_index(conn: sqlite3.Connection, quote: str, library: str | None, limit: int) -> list[QuoteMatch]:
    expr = match_expression(_query(quote))
    if expr is None or not letters(quote):
        return []
    # The words OR'ed (any may be the one misquoted), ranked by BM25: the quote's chunk shares most.
    where, args = ("AND c.library = ?", [library]) if library else ("", [])
    rows = conn.execute(
        f"SELECT DISTINCT c.item_key, c.library FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
        f"WHERE chunks_fts MATCH ? {where} ORDER BY bm25(chunks_fts) LIMIT ?", [expr, *args, CANDIDATE_CHUNKS],
    ).fetchall()
    found = []
    for key, lib in dict.fromkeys((str(k), str(lb)) for k, lb in rows):
        item = index_text(conn, key, lib)
        m = _match(item, quote) if item is not None else None
        if m is not None:
            found.append(m)
    return _ranked(found, limit)


def find_in_passages(passages: Iterable[Passage], quote: str, library: str | None, limit: int) -> list[QuoteMatch]:
    mine = [p for p in passages if library is None or p.library == library]
    found = []
    for key, lib in dict.fromkeys((p.item_key, p.library) for p in mine):
        item = passages_text(mine, key, lib)
        m = _match(item, quote) if item is not None else None
        if m is not None:
            found.append(m)
    return _ranked(found, limit)
