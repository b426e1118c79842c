"""`zocratesd demo`: a small, realistic Zotero data dir to try Zocrates on.

30 papers on three topics (retrieval-augmented generation, sleep and memory, coral reefs), four
collections (one nested), 16 PDFs' extracted text of three pages each, child notes and a standalone
note, written by `zocratesd.demo.zotero_dir` exactly as Zotero 7 lays out a data dir. The content
is ours (`papers.py`); the papers and their authors are invented.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Final

from zocratesd.demo import zotero_dir
from zocratesd.demo.papers import COLLECTIONS, PAPERS, STANDALONE_NOTES, Paper

# Where `zocratesd demo` writes without --dir: beside (never inside) a real ~/Zotero.
DEFAULT_DIR_NAME: Final = "Zotero-demo"
# Written last: marks a directory as our demo, so running `zocratesd demo` again is harmless.
MARKER: Final = "ZOCRATES-DEMO.txt"
# Fixed, so that every demo library has the same attachment and note keys.
KEY_SEED: Final = 17
FIRST_QUESTION: Final = "How do hypothetical document embeddings help zero-shot retrieval?"


class DemoError(Exception):
    """The demo cannot be written where asked (an existing Zotero library that is not ours)."""


def default_dir() -> Path:
    return Path.home() / DEFAULT_DIR_NAME


def build() -> zotero_dir.Library:
    """The demo library, as zotero_dir describes one."""
    rng = random.Random(KEY_SEED)
    used = {p.key for p in PAPERS} | {c[0] for c in COLLECTIONS} | {n[0] for n in STANDALONE_NOTES}

    def key() -> str:
        while True:
            k = zotero_dir.new_key(rng)
            if k not in used:
                used.add(k)
                return k

    items = [_item(i, p, key) for i, p in enumerate(PAPERS)]
    return zotero_dir.Library(
        items=items,
        collections=[zotero_dir.Collection(k, name, parent=parent) for k, name, parent in COLLECTIONS],
        notes=[zotero_dir.Note(k, text, collections=colls) for k, text, colls in STANDALONE_NOTES],
    )


def _item(i: int, p: Paper, new_key: Callable[[], str]) -> zotero_dir.Item:
    fields = {"abstractNote": p.abstract, "publicationTitle": p.venue, **p.extra_fields}
    if p.doi:
        fields["DOI"] = p.doi
    attachments = []
    if p.pages:
        slug = "".join(c for c in p.authors[0][1] if c.isalnum())
        attachments.append(zotero_dir.Attachment(new_key(), filename=f"{slug} - {p.date} - {p.title[:40]}.pdf", pages=p.pages))
    notes = [zotero_dir.Note(new_key(), p.note)] if p.note else []
    # Added over a few months, as a real library grows.
    added = f"2024-{1 + i % 9:02d}-{1 + (i * 7) % 27:02d} {9 + i % 8:02d}:{(i * 13) % 60:02d}:00"
    return zotero_dir.Item(
        p.key, p.title, item_type=p.item_type, creators=list(p.authors), date=p.date, fields=fields,
        tags=list(p.tags), collections=list(p.collections), attachments=attachments, notes=notes,
        date_added=added, date_modified=added,
    )


def write_demo(data_dir: Path) -> bool:
    """Write the demo library to `data_dir`; False when it is already there (nothing changed).
    Raises DemoError for a directory with a Zotero library that is not the demo."""
    if (data_dir / MARKER).exists() and (data_dir / zotero_dir.ZOTERO_DB).exists():
        return False
    if (data_dir / zotero_dir.ZOTERO_DB).exists():
        raise DemoError(f"{data_dir} already holds a Zotero library; the demo never touches one (choose another --dir)")
    zotero_dir.write(data_dir, build(), version=zotero_dir.ZOTERO_7)
    (data_dir / MARKER).write_text(
        "A demo Zotero library written by `zocratesd demo`: invented papers for trying Zocrates.\n"
        "Delete this directory when you no longer need it.\n"
    )
    return True


def next_steps(data_dir: Path) -> str:
    """What to run next, for the user to copy."""
    d = shlex.quote(str(data_dir))
    with_text = sum(1 for p in PAPERS if p.pages)
    return "\n".join([
        f"The demo library in {data_dir}: {len(PAPERS)} papers ({with_text} with full text), "
        f"{len(COLLECTIONS)} collections, notes.",
        "Ask it (the first question starts the daemon in the background):",
        f"  export ZOTERO_DATA_DIR={d}",
        f"  zocrates ask {shlex.quote(FIRST_QUESTION)}",
        "  zocrates chat",
        f"Or run the daemon in the foreground: zocratesd serve --zotero-data-dir {d}",
    ])
