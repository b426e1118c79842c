"""The library as a catalogue: items, their children, collections and tags, read from library.db.

Search (index.py) finds passages; this module answers "what is there": one item with its
metadata, notes, annotations and attachments (and, when asked, its full text a page of chunks at a
time), the collections with their paths and sizes, the tags by use, the items added last. The MCP
face's `get_item`, `list_collections`, `list_tags`, `recent_items` and its `zotero://` resources
are these functions, reached through the daemon (`_zocrates/library/*`).

Everything here reads the index, never Zotero's database: the index is the daemon's one reader of
the user's library, so these answers and search's agree. An item's children are stored with it
(`items.children`, JSON written by `children_json` when the item is indexed); its full text is the
item's `fulltext` chunks, in order. Functions take an open read connection and are synchronous
(the caller runs them in a thread); keys are validated before they reach SQL.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from zocratesd.library._records import USER_LIBRARY, ItemRecord, item_uid, library_path, valid_key

# A note is stored with its item up to this many characters (the rest is in the index's note
# chunks, which search reads): a note is the user's own writing, rarely longer; one that is, is a
# pasted document, and an item's answer should stay a few hundred KB at most.
MAX_NOTE_CHARS: Final = 100_000
# One page of an item's full text, in characters of chunk text (~5,000 words): enough to read a
# section at a time, small enough for a model's context; the answer says where the next page starts.
FULLTEXT_PAGE_CHARS: Final = 20_000
# List sizes: the most one call returns (a client pages past it with `offset`).
MAX_LIST: Final = 500
DEFAULT_LIST: Final = 50
# Separates a collection's ancestors in its path, as the session's scope option shows it.
PATH_SEPARATOR: Final = " / "


def children_json(item: ItemRecord, texts: dict[str, str]) -> dict[str, Any]:
    """What an item's answer shows of its children, as stored in `items.children`."""
    return {
        "attachments": [
            {"key": a.key, "content_type": a.content_type, "link_mode": a.link_mode, "has_text": bool(texts.get(a.key)),
             **({"indexed_pages": a.indexed_pages, "total_pages": a.total_pages} if a.total_pages is not None else {})}
            for a in item.attachments
        ],
        "notes": [{"key": n.key, "title": n.title, "text": n.text[:MAX_NOTE_CHARS],
                   "truncated": len(n.text) > MAX_NOTE_CHARS} for n in item.notes],
        "annotations": [
            {"key": a.key, "attachment_key": a.attachment_key, "type": a.type, "text": a.text, "comment": a.comment,
             "color": a.color, "page_label": a.page_label,
             "page": a.page_index + 1 if a.page_index is not None else None, "tags": list(a.tags)}
            for a in item.annotations
        ],
    }


def select_link(library: str, key: str) -> str:
    """`zotero://select/...` for an item (or a note) of `library`."""
    return f"zotero://select/{library_path(library)}/items/{key}"


def pdf_link(library: str, attachment_key: str, page: int | None = None, annotation: str | None = None) -> str:
    """`zotero://open-pdf/...` for an attachment, at a page (and an annotation) when known."""
    link = f"zotero://open-pdf/{library_path(library)}/items/{attachment_key}"
    if page:
        link += f"?page={page}" + (f"&annotation={annotation}" if annotation else "")
    return link


def _clamp(limit: int | None, offset: int | None) -> tuple[int, int]:
    n = DEFAULT_LIST if limit is None else max(1, min(int(limit), MAX_LIST))
    return n, max(0, int(offset or 0))


_SUMMARY_COLUMNS = "uid, item_key, library, item_type, title, creators, year, date_added, date_modified"


def _summary(row: tuple[Any, ...]) -> dict[str, Any]:
    _, key, library, item_type, title, creators, year, added, modified = row
    return {
        "item_key": key, "library": library, "item_type": item_type, "title": title,
        "creators": json.loads(creators), "year": year, "date_added": added, "date_modified": modified,
        "link": select_link(library, key),
    }


def find_uid(conn: sqlite3.Connection, key: str, library: str | None) -> str | None:
    """The uid of item `key`: in `library`, else the user library's, else the first group's."""
    if not valid_key(key):
        return None
    if library is not None:
        uid = item_uid(library, key)
        row = conn.execute("SELECT uid FROM items WHERE uid = ?", (uid,)).fetchone()
        return str(row[0]) if row else None
    row = conn.execute(
        "SELECT uid FROM items WHERE item_key = ? ORDER BY library != ?, library LIMIT 1", (key, USER_LIBRARY)
    ).fetchone()
    return str(row[0]) if row else None


def titles(conn: sqlite3.Connection, library: str, keys: Sequence[str]) -> dict[str, str]:
    """The titles of the items of `library` among `keys` (absent keys are left out)."""
    marks = ",".join("?" * len(keys))
    rows = conn.execute(f"SELECT item_key, title FROM items WHERE library = ? AND item_key IN ({marks})", (library, *keys))
    return {str(k): str(t) for k, t in rows}


def items_by_doi_or_title(
    conn: sqlite3.Connection, dois: Sequence[str], titles: Sequence[str],
) -> list[tuple[str, str, str, int | None, str | None]]:
    """(library, item key, title, year, DOI) of the items with one of these DOIs (any case) or one
    of these titles (compared lower-cased); trashed items are not in the index."""
    if not dois and not titles:
        return []
    rows = conn.execute(
        f"SELECT library, item_key, title, year, doi FROM items WHERE lower(doi) IN ({','.join('?' * len(dois)) or 'NULL'}) "
        f"OR lower(title) IN ({','.join('?' * len(titles)) or 'NULL'})",
        (*[d.lower() for d in dois], *[t.lower() for t in titles]),
    )
    return [(str(lib), str(key), str(title), year, doi) for lib, key, title, year, doi in rows]


def collection_name(conn: sqlite3.Connection, library: str, key: str) -> str | None:
    row = conn.execute("SELECT name FROM collections WHERE library = ? AND key = ?", (library, key)).fetchone()
    return str(row[0]) if row else None


def get_item(
    conn: sqlite3.Connection, uid: str, *, fulltext: bool = False, fulltext_offset: int = 0,
    page_chars: int = FULLTEXT_PAGE_CHARS,
) -> dict[str, Any] | None:
    """One item: metadata, abstract, collections, tags, child notes, annotations, attachments;
    with `fulltext`, one page of its text from chunk `fulltext_offset` on (None: no such item)."""
    row = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS}, abstract, doi, url, tags, collections, children FROM items WHERE uid = ?", (uid,)
    ).fetchone()
    if row is None:
        return None
    out = _summary(row[:9])
    abstract, doi, url, tags, collections, children = row[9:]
    library = out["library"]
    names = dict(conn.execute(
        "SELECT key, name FROM collections WHERE library = ? AND key IN (SELECT value FROM json_each(?))",
        (library, collections),
    ))
    kids = json.loads(children or "{}")
    for att in kids.get("attachments", ()):
        att["link"] = pdf_link(library, att["key"]) if att.get("content_type") == "application/pdf" else select_link(library, att["key"])
    for note in kids.get("notes", ()):
        note["link"] = select_link(library, note["key"])
    for ann in kids.get("annotations", ()):
        ann["link"] = pdf_link(library, ann["attachment_key"], ann.get("page"), ann["key"])
    out.update(
        abstract=abstract or "", doi=doi, url=url, tags=json.loads(tags),
        collections=[{"key": k, "name": names.get(k, k)} for k in json.loads(collections)],
        notes=kids.get("notes", []), annotations=kids.get("annotations", []), attachments=kids.get("attachments", []),
    )
    total = conn.execute("SELECT count(*) FROM chunks WHERE uid = ? AND kind = 'fulltext'", (uid,)).fetchone()[0]
    out["fulltext_chunks"] = total
    if fulltext:
        out["fulltext"] = _fulltext_page(conn, uid, library, max(0, fulltext_offset), page_chars, total)
    return out


def _fulltext_page(conn: sqlite3.Connection, uid: str, library: str, offset: int, page_chars: int, total: int) -> dict[str, Any]:
    """Chunks `offset`.. of the item's full text, whole chunks up to `page_chars` (at least one)."""
    parts: list[dict[str, Any]] = []
    used = 0
    rows = conn.execute(
        "SELECT c.attachment_key, c.page, c.page_label, f.body FROM chunks c JOIN chunks_fts f ON f.rowid = c.id "
        "WHERE c.uid = ? AND c.kind = 'fulltext' ORDER BY c.id LIMIT -1 OFFSET ?",
        (uid, offset),
    )
    for att_key, page, label, body in rows:
        if parts and used + len(body) > page_chars:
            break
        parts.append({"attachment_key": att_key, "page": page, "page_label": label or (str(page) if page else None),
                      "text": body, "link": pdf_link(library, att_key, page)})
        used += len(body)
    end = offset + len(parts)
    return {"offset": offset, "chunks": parts, "total_chunks": total, "next_offset": end if end < total else None}


def collections(conn: sqlite3.Connection, library: str | None = None) -> list[dict[str, Any]]:
    """Every collection (of `library`, or all), with its path ("Parent / Child"), its parent and how
    many items it holds itself and with its subcollections; sorted by library, then path."""
    rows = conn.execute(
        "SELECT c.library, c.key, c.name, c.parent_key, l.name FROM collections c LEFT JOIN libraries l ON l.library = c.library "
        "WHERE ? IS NULL OR c.library = ?",
        (library, library),
    ).fetchall()
    direct: dict[tuple[str, str], set[str]] = {}
    for lib, key, uid in conn.execute(
        "SELECT library, collection_key, uid FROM item_collections WHERE ? IS NULL OR library = ?", (library, library)
    ):
        direct.setdefault((lib, key), set()).add(uid)
    by_key = {(lib, key): (name, parent) for lib, key, name, parent, _ in rows}
    children: dict[tuple[str, str], list[str]] = {}
    for lib, key, _, parent, _ in rows:
        if parent is not None:
            children.setdefault((lib, parent), []).append(key)

    def path(lib: str, key: str) -> str:
        names: list[str] = []
        seen: set[str] = set()
        cur: str | None = key
        while cur is not None and (lib, cur) in by_key and cur not in seen:
            seen.add(cur)
            name, cur = by_key[(lib, cur)]
            names.append(name)
        return PATH_SEPARATOR.join(reversed(names))

    def subtree(lib: str, key: str) -> set[str]:
        found: set[str] = set()
        todo, seen = [key], set()
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            found |= direct.get((lib, k), set())
            todo += children.get((lib, k), [])
        return found

    out = [
        {"key": key, "name": name, "path": path(lib, key), "parent_key": parent, "library": lib,
         "library_name": lib_name or lib, "items": len(direct.get((lib, key), ())), "items_with_subcollections": len(subtree(lib, key))}
        for lib, key, name, parent, lib_name in rows
    ]
    out.sort(key=lambda c: (c["library"] != USER_LIBRARY, c["library"], c["path"].casefold(), c["key"]))
    return out


def tags(conn: sqlite3.Connection, library: str | None = None, *, limit: int | None = None, offset: int | None = None,
         contains: str | None = None) -> dict[str, Any]:
    """Tags by how many items carry them (then by name), optionally only those containing `contains`."""
    n, skip = _clamp(limit, offset)
    where = "WHERE (? IS NULL OR i.library = ?)"
    args: list[object] = [library, library]
    if contains:
        where += " AND instr(lower(t.value), lower(?)) > 0"
        args.append(contains)
    total = conn.execute(
        f"SELECT count(DISTINCT t.value) FROM items i, json_each(i.tags) t {where}", args
    ).fetchone()[0]
    rows = conn.execute(
        f"SELECT t.value, count(DISTINCT i.uid) AS n FROM items i, json_each(i.tags) t {where} "
        "GROUP BY t.value ORDER BY n DESC, t.value LIMIT ? OFFSET ?",
        [*args, n, skip],
    ).fetchall()
    return {"tags": [{"tag": tag, "items": count} for tag, count in rows], "total": total, "offset": skip,
            "next_offset": skip + len(rows) if skip + len(rows) < total else None}


def items(conn: sqlite3.Connection, library: str | None = None, *, limit: int | None = None, offset: int | None = None,
          order: str = "added") -> dict[str, Any]:
    """Item summaries, newest first by `order` ("added" or "modified"); attachments and notes that
    stand alone count as items, as Zotero lists them."""
    n, skip = _clamp(limit, offset)
    column = "date_modified" if order == "modified" else "date_added"
    total = conn.execute("SELECT count(*) FROM items WHERE ? IS NULL OR library = ?", (library, library)).fetchone()[0]
    rows = conn.execute(
        f"SELECT {_SUMMARY_COLUMNS} FROM items WHERE ? IS NULL OR library = ? "
        f"ORDER BY {column} IS NULL, {column} DESC, uid LIMIT ? OFFSET ?",
        (library, library, n, skip),
    ).fetchall()
    return {"items": [_summary(r) for r in rows], "total": total, "offset": skip,
            "next_offset": skip + len(rows) if skip + len(rows) < total else None}
