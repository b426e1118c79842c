"""Better BibTeX's citation keys: `<data dir>/better-bibtex.sqlite`, table `citationkey`
(itemID, itemKey, libraryID, citationKey, pinned), as Better BibTeX 7 (Zotero 7 and later) writes
it. Read only (as zotero.sqlite is: zotero_db.open_readonly), again whenever the file changes:
the plugin changes keys without touching the items. The keys go to the index's `bbt_keys`, where
citations/keys.py takes them for items with no key of their own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from zocratesd.citations.keys import usable
from zocratesd.library.zotero_db import ZoteroDbError, open_readonly

log = logging.getLogger(__name__)

BBT_DB: Final = "better-bibtex.sqlite"


def bbt_stamp(data_dir: Path) -> str:
    """Size and mtime of Better BibTeX's database and its -wal ("" when there is none)."""
    parts = []
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            st = os.stat(f"{data_dir / BBT_DB}{suffix}")
            parts.append(f"{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def read_bbt(data_dir: Path, work_dir: Path, library_ids: Mapping[int, str]) -> dict[tuple[str, str], str]:
    """{(library, item key): key} from Better BibTeX's database; {} when there is none or it
    cannot be read (logged: keys then come from the other sources). `library_ids` maps Zotero's
    libraryIDs to libraries; without it (a read through the local API) libraryID 1 is My Library,
    as it is in every database Zotero creates."""
    path = data_dir / BBT_DB
    if not path.is_file():
        return {}
    libs = dict(library_ids) or {1: "user"}
    out: dict[tuple[str, str], str] = {}
    try:
        with open_readonly(path, work_dir) as (conn, _):
            for item_key, library_id, key in conn.execute("SELECT itemKey, libraryID, citationKey FROM citationkey"):
                lib = libs.get(library_id) if isinstance(library_id, int) else None
                if lib is not None and isinstance(item_key, str) and (k := usable(key)) is not None:
                    out[(lib, item_key)] = k
    except (ZoteroDbError, sqlite3.DatabaseError) as exc:
        log.warning("library: Better BibTeX's citation keys in %s cannot be read (%s); keys come from Zotero's "
                    "fields or are generated", path, exc)
        return {}
    return out
