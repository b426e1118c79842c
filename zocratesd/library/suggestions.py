"""Questions a user could ask, drawn from their own library: the sidebar's first screen shows them.

Each is a question the offline answerer can answer from the library, with the scope it is meant
to be asked in:
- about a paper ("What are the main findings of “T”?", scoped to that paper): the papers the user
  worked with most (notes, annotations), then the newest, and only papers with text to quote (a
  full text or an abstract);
- about a collection ("What do the papers in my “C” collection find?", scoped to it and its
  subcollections): the collection with the most papers;
- about a tag ("What does my library say about T?", the whole library): the most used tag.
A library without collections or tags gets more papers instead; an empty one gets none. While
the library is indexed they come from what is indexed so far. Deterministic: the same library
suggests the same questions.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Final, Literal

# The first screen shows a few; a client may ask for up to this many.
MAX_SUGGESTIONS: Final = 8
DEFAULT_SUGGESTIONS: Final = 4
# A title or name longer than this is cut (with "…") in the question: a button is a line or two.
MAX_NAME_CHARS: Final = 90
# Item types that are not papers (standalone notes and files have no title worth asking about).
NOT_PAPERS: Final = ("note", "attachment", "annotation")

Kind = Literal["paper", "collection", "tag"]


@dataclass(frozen=True)
class Suggestion:
    text: str
    kind: Kind
    library: str | None  # "user", "groups/<id>", or None: every library
    # The scope to ask it in: these papers ("papers" mode), this collection, or the whole library.
    items: tuple[tuple[str, str], ...] = ()  # (item key, title)
    collection: tuple[str, str] | None = None  # (key, name)
    mode: Literal["papers", "collection", "library"] = field(default="library")

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text, "kind": self.kind, "mode": self.mode, "library": self.library,
            "items": [{"item_key": k, "title": t} for k, t in self.items],
            "collection": {"key": self.collection[0], "name": self.collection[1]} if self.collection else None,
        }


def _short(name: str) -> str:
    name = " ".join(name.split())  # no line breaks or runs of spaces from a title field
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1].rstrip() + "…"


def _papers(conn: sqlite3.Connection, limit: int) -> list[Suggestion]:
    rows = conn.execute(
        f"SELECT item_key, library, title FROM items WHERE item_type NOT IN ({','.join('?' * len(NOT_PAPERS))}) "
        "AND trim(title) != '' AND (text_attachments > 0 OR trim(coalesce(abstract, '')) != '') "
        "ORDER BY notes + annotations DESC, year IS NULL, year DESC, title, uid LIMIT ?",
        (*NOT_PAPERS, limit),
    ).fetchall()
    return [
        Suggestion(f"What are the main findings of “{_short(title)}”?", "paper", library,
                   items=((key, title),), mode="papers")
        for key, library, title in rows
    ]


def _collection(conn: sqlite3.Connection) -> Suggestion | None:
    row = conn.execute(
        "SELECT c.library, c.key, c.name FROM collections c JOIN item_collections ic "
        "ON ic.library = c.library AND ic.collection_key = c.key "
        "WHERE trim(c.name) != '' GROUP BY c.library, c.key ORDER BY count(*) DESC, c.name, c.key LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    library, key, name = row
    return Suggestion(f"What do the papers in my “{_short(name)}” collection find?", "collection", library,
                      collection=(key, name), mode="collection")


def _tag(conn: sqlite3.Connection) -> Suggestion | None:
    counts: dict[str, int] = {}
    shown: dict[str, str] = {}
    for (tags,) in conn.execute(
        f"SELECT tags FROM items WHERE item_type NOT IN ({','.join('?' * len(NOT_PAPERS))}) AND tags != '[]'", NOT_PAPERS
    ):
        try:
            names = json.loads(tags)
        except ValueError:
            continue
        for tag in {" ".join(str(t).split()) for t in names if isinstance(t, str)}:
            if tag:
                folded = tag.casefold()
                counts[folded] = counts.get(folded, 0) + 1
                shown.setdefault(folded, tag)
    if not counts:
        return None
    best = min(counts, key=lambda t: (-counts[t], t))
    return Suggestion(f"What does my library say about {_short(shown[best])}?", "tag", None)


def suggest(conn: sqlite3.Connection, limit: int = DEFAULT_SUGGESTIONS) -> list[Suggestion]:
    """Up to `limit` questions from the index `conn` (library/index.py's tables); [] for an empty
    library. The first paper comes first, then a collection, a tag, then more papers."""
    limit = max(0, min(limit, MAX_SUGGESTIONS))
    if limit == 0:
        return []
    papers = _papers(conn, limit)
    picked: list[Suggestion] = papers[:1]
    for other in (_collection(conn), _tag(conn)):
        if other is not None:
            picked.append(other)
    picked += papers[1:]
    return picked[:limit]
