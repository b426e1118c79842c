"""Citation keys: the one a researcher writes in LaTeX or Markdown (`\\cite{lewis2020retrieval}`,
`[@lewis2020retrieval]`), kept per item in the library index (`items.citation_key`).

Where an item's key comes from, first found wins (`items.key_source`):
1. `native`: Zotero's own `citationKey` field (in every item type of the schema since Zotero 7).
2. `extra`: a "Citation Key: KEY" line in Extra, where Better BibTeX pins a key and Zotero 6 users
   typed theirs (Zotero reads it from there too).
3. `bbt`: Better BibTeX's database, read by library/bbt.py into the index's `bbt_keys`.
4. `generated`: author, year and the title's first significant word, folded to ASCII
   ("Ströhle 2021, The ..." -> `strohle2021retrieval`), made unique within the library with a
   letter ("a", "b", ...) in the order items were added. An item keeps its generated key while
   its author, year and title word stay the same, and a later item with the same stem gets the
   next free letter. The generated keys are remembered outside the index too
   (`zocrates-data/citation-keys.json`, library/indexer.py), so a rebuilt index gives every item
   the key it had: a document that cites `silva2020retrievala` keeps working.

A key with a character BibTeX or Pandoc cannot carry in a key (space, comma, braces, quotes, %,
#, ~, backslash, parentheses, =) is not used: the next source is.
"""

from __future__ import annotations

import json
import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

# A key BibTeX and Pandoc both take: none of the characters the module docstring names, and not
# so long that it is no key a person types (Better BibTeX's are a few dozen characters).
_KEY_RE: Final = re.compile(r"[^\s,{}()%\"'#~\\=]{1,100}")
_EXTRA_KEY_RE: Final = re.compile(r"^\s*citation key\s*:\s*(\S+)\s*$", re.I | re.M)
# Words a title's "first significant word" skips: English articles, prepositions and
# conjunctions, and the articles of German, French and Spanish titles.
STOP_WORDS: Final = frozenset(
    "a an the on of in for to and or with from by at as is are about into over under via toward towards "
    "der die das ein eine le la les un une el los las".split()
)
# Letters a character folds to where NFKD leaves none (ß, ø, æ, ł ... have no combining form).
_FOLD: Final = str.maketrans({"ß": "ss", "ø": "o", "Ø": "O", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ł": "l",
                              "Ł": "L", "đ": "d", "Đ": "D", "þ": "th", "Þ": "Th", "ð": "d", "ı": "i"})
# Creator roles an author-year key names, in order of preference (an edited book: its editor).
PRIMARY_ROLES: Final = ("author", "editor", "inventor", "artist", "director", "programmer", "presenter", "sponsor",
                        "cartographer", "composer", "podcaster", "interviewee", "performer", "contributor")


def usable(key: object) -> str | None:
    """`key` stripped when it can stand as a BibTeX and Pandoc key, else None."""
    if not isinstance(key, str):
        return None
    key = key.strip()
    return key if _KEY_RE.fullmatch(key) else None


def explicit_key(fields: Mapping[str, str]) -> tuple[str, str] | None:
    """(key, source) from the item's own fields: its `citationKey`, else Extra's "Citation Key:"."""
    if (key := usable(fields.get("citationKey"))) is not None:
        return key, "native"
    m = _EXTRA_KEY_RE.search(fields.get("extra") or "")
    if m and (key := usable(m.group(1))) is not None:
        return key, "extra"
    return None


def ascii_word(text: str) -> str:
    """`text` folded to lowercase ASCII letters and digits ("Ströhle" -> "strohle")."""
    folded = unicodedata.normalize("NFKD", text.translate(_FOLD))
    return "".join(c for c in folded if c.isascii() and c.isalnum()).lower()


def family_name(names: Sequence[Mapping[str, object]]) -> str:
    """The family name of the item's first creator in the most primary role it has."""
    for role in (*PRIMARY_ROLES, None):
        for n in names:
            if role is None or n.get("type") == role:
                last = str(n.get("last") or "")
                if n.get("single"):
                    return last  # an institution: its whole name
                return last or str(n.get("first") or "")
    return ""


def stem(names: Sequence[Mapping[str, object]], year: int | None, title: str) -> str:
    """The generated key before its letter: author, year, first significant title word."""
    author = ascii_word(family_name(names))[:40]
    words = [w for w in (ascii_word(t) for t in re.split(r"[\s\-–—/:]+", title)) if w]
    word = next((w for w in words if w not in STOP_WORDS), words[0] if words else "")[:30]
    return f"{author or 'anon'}{year if year else 'nd'}{word}"


def _letters(n: int) -> str:
    """The n-th suffix: "" for 0, then "a".."z", "aa".."zz" (as BibTeX styles letter years)."""
    out = ""
    while n > 0:
        n, r = divmod(n - 1, 26)
        out = chr(ord("a") + r) + out
    return out


@dataclass(frozen=True)
class KeyRow:
    uid: str
    library: str
    item_key: str
    explicit: str | None  # native or Extra key, with its source
    explicit_source: str | None
    current: str | None  # the key stored now, and where it came from
    current_source: str | None
    stem: str
    date_added: str


def assign(rows: Iterable[KeyRow], bbt: Mapping[tuple[str, str], str]) -> dict[str, tuple[str, str]]:
    """uid -> (key, source) for every row, as the module docstring says. Keys are compared
    without case: no two keys of a library differ only in case, which tools treat unevenly."""
    by_lib: dict[str, list[KeyRow]] = {}
    for r in rows:
        by_lib.setdefault(r.library, []).append(r)
    out: dict[str, tuple[str, str]] = {}
    for lib_rows in by_lib.values():
        taken: set[str] = set()
        generated: list[KeyRow] = []
        for r in lib_rows:
            if r.explicit and r.explicit_source:
                out[r.uid] = (r.explicit, r.explicit_source)
            elif (key := usable(bbt.get((r.library, r.item_key)))) is not None:
                out[r.uid] = (key, "bbt")
            else:
                generated.append(r)
                continue
            taken.add(out[r.uid][0].casefold())
        generated.sort(key=lambda r: (r.date_added, r.item_key))
        fresh: list[KeyRow] = []
        for r in generated:  # kept: a generated key whose stem still fits and is still free
            cur = r.current or ""
            if r.current_source == "generated" and cur.startswith(r.stem) and re.fullmatch(r"[a-z]*", cur[len(r.stem):]) \
                    and cur.casefold() not in taken:
                out[r.uid] = (cur, "generated")
                taken.add(cur.casefold())
            else:
                fresh.append(r)
        for r in fresh:
            n = 0
            while (r.stem + _letters(n)).casefold() in taken:
                n += 1
            key = r.stem + _letters(n)
            out[r.uid] = (key, "generated")
            taken.add(key.casefold())
    return out


def assign_in_index(conn: sqlite3.Connection, remembered: Mapping[str, str]) -> tuple[int, dict[str, str]]:
    """Give every item of the index (library.db) its key: the number of keys that changed, and
    every generated key by uid (what to remember). `remembered`: the generated keys an earlier
    index gave (an item re-indexed, or the whole index rebuilt, starts from them). Runs in the
    indexer's thread after each pass; writes only the rows whose key changed."""
    rows: list[KeyRow] = []
    for uid, library, item_key, title, names, year, explicit, explicit_source, current, source, added in conn.execute(
        "SELECT uid, library, item_key, title, names, year, explicit_key, explicit_source, citation_key, key_source, "
        "date_added FROM items"
    ):
        try:
            parsed = json.loads(names)
        except ValueError:
            parsed = []
        if current is None and uid in remembered:
            current, source = remembered[uid], "generated"
        rows.append(KeyRow(uid, library, item_key, explicit, explicit_source, current, source,
                           stem([n for n in parsed if isinstance(n, dict)], year, title or ""), added or ""))
    bbt = {(lib, key): ck for lib, key, ck in conn.execute("SELECT library, item_key, citation_key FROM bbt_keys")}
    want = assign(rows, bbt)
    stored = {uid: (k, s) for uid, k, s in conn.execute("SELECT uid, citation_key, key_source FROM items")}
    changes = [(key, source, uid) for uid, (key, source) in want.items() if (key, source) != stored.get(uid)]
    if changes:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("UPDATE items SET citation_key = ?, key_source = ? WHERE uid = ?", changes)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(changes), {uid: key for uid, (key, source) in want.items() if source == "generated"}
