"""Build Zotero data dirs for tests and benchmarks: `zotero.sqlite` in the real schema's shape
(tables and columns as research/zotero_ops.md section 1.2 lists them, per `userdata` version) plus
`storage/<attachmentKey>/.zotero-ft-cache` files.

- `build_zotero_dir(path, items, collections, version=123|125|129)` writes one library. v129 is a
  Zotero 10 database: WAL, `items.clientVersion`, `*Normalized` columns, no `fulltextWords`.
- `sample_library()` is a small library with known answers (nested collections, a trashed item,
  an item in a trashed parent's place, attachments with and without page markers, a case whose
  title is the base-mapped `caseName`).
- `generate_library(n_items, n_fulltexts, pages)` is a large pseudo-random one for the benchmark;
  it writes rows with executemany in one transaction and text from a precomputed sentence pool,
  so 10,000 items with 2,000 twenty-page texts take seconds, not minutes.
- `touch_items()` edits items as Zotero would (title and `dateModified`/`clientDateModified`).

Nothing here is imported by the daemon.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

KEY_CHARS = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"  # Zotero's key alphabet (no 0, 1, O)
SUPPORTED_VERSIONS = (123, 125, 129)
PAGE_BREAK = "\f"  # pdftotext's page separator, kept in .zotero-ft-cache


@dataclass
class FixtureAttachment:
    key: str
    text: str | None = None  # the cache file's content; None: no .zotero-ft-cache
    content_type: str = "application/pdf"
    filename: str = "paper.pdf"
    link_mode: int = 0  # imported_file
    raw: bytes | None = None  # exact cache bytes (malformed-input tests); wins over text
    trashed: bool = False


@dataclass
class FixtureItem:
    key: str
    title: str
    item_type: str = "journalArticle"
    creators: Sequence[tuple[str, str] | str] = ()  # (first, last) or a single-field name
    date: str | None = None  # as typed: "2020", "March 2021"
    abstract: str | None = None
    doi: str | None = None
    url: str | None = None
    collections: Sequence[str] = ()
    tags: Sequence[str] = ()
    attachments: Sequence[FixtureAttachment] = ()
    trashed: bool = False
    date_modified: str = "2024-01-01 00:00:00"


@dataclass
class FixtureCollection:
    key: str
    name: str
    parent: str | None = None
    trashed: bool = False


# Item types and fields with the names Zotero uses; ids are ours (readers must look them up by name).
ITEM_TYPES = ("annotation", "attachment", "note", "journalArticle", "book", "conferencePaper", "preprint", "case", "thesis")
FIELDS = ("title", "abstractNote", "date", "DOI", "url", "publicationTitle", "extra", "caseName", "dateDecided")
BASE_MAPPINGS = (("case", "title", "caseName"), ("case", "date", "dateDecided"))
CREATOR_TYPES = ("author", "editor", "contributor")


def _schema(version: int) -> list[str]:
    v10 = version >= 129
    return [
        "CREATE TABLE version (schema TEXT PRIMARY KEY, version INT NOT NULL)",
        "CREATE TABLE settings (setting TEXT, key TEXT, value, PRIMARY KEY (setting, key))",
        "CREATE TABLE libraries (libraryID INTEGER PRIMARY KEY, type TEXT NOT NULL, editable INT NOT NULL, "
        "filesEditable INT NOT NULL, version INT NOT NULL DEFAULT 0, storageVersion INT NOT NULL DEFAULT 0, "
        "lastSync INT NOT NULL DEFAULT 0, archived INT NOT NULL DEFAULT 0)",
        "CREATE TABLE groups (groupID INTEGER PRIMARY KEY, libraryID INT NOT NULL UNIQUE, name TEXT NOT NULL, "
        "description TEXT NOT NULL, version INT NOT NULL)",
        "CREATE TABLE itemTypes (itemTypeID INTEGER PRIMARY KEY, typeName TEXT, templateItemTypeID INT, display INT DEFAULT 1)",
        "CREATE TABLE customItemTypes (customItemTypeID INTEGER PRIMARY KEY, typeName TEXT, label TEXT, display INT DEFAULT 1, icon TEXT)",
        "CREATE VIEW itemTypesCombined AS SELECT itemTypeID, typeName, display, 0 AS custom FROM itemTypes "
        "UNION SELECT customItemTypeID AS itemTypeID, typeName, display, 1 AS custom FROM customItemTypes",
        "CREATE TABLE fields (fieldID INTEGER PRIMARY KEY, fieldName TEXT, fieldFormatID INT)",
        "CREATE TABLE customFields (customFieldID INTEGER PRIMARY KEY, fieldName TEXT, label TEXT)",
        "CREATE VIEW fieldsCombined AS SELECT fieldID, fieldName, NULL AS label, fieldFormatID, 0 AS custom FROM fields "
        "UNION SELECT customFieldID AS fieldID, fieldName, label, NULL, 1 AS custom FROM customFields",
        "CREATE TABLE baseFieldMappings (itemTypeID INT, baseFieldID INT, fieldID INT, PRIMARY KEY (itemTypeID, baseFieldID, fieldID))",
        "CREATE TABLE customBaseFieldMappings (customItemTypeID INT, baseFieldID INT, customFieldID INT, "
        "PRIMARY KEY (customItemTypeID, baseFieldID, customFieldID))",
        "CREATE VIEW baseFieldMappingsCombined AS SELECT itemTypeID, baseFieldID, fieldID FROM baseFieldMappings "
        "UNION SELECT customItemTypeID, baseFieldID, customFieldID FROM customBaseFieldMappings",
        "CREATE TABLE creatorTypes (creatorTypeID INTEGER PRIMARY KEY, creatorType TEXT)",
        "CREATE TABLE items (itemID INTEGER PRIMARY KEY, itemTypeID INT NOT NULL, "
        "dateAdded TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, dateModified TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, "
        "clientDateModified TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, libraryID INT NOT NULL, key TEXT NOT NULL, "
        "version INT NOT NULL DEFAULT 0, synced INT NOT NULL DEFAULT 0"
        + (", clientVersion INT NOT NULL DEFAULT 0" if v10 else "")
        + ", UNIQUE (libraryID, key))",
        "CREATE TABLE itemDataValues (valueID INTEGER PRIMARY KEY, value UNIQUE"
        + (", valueNormalized TEXT" if v10 else "") + ")",
        "CREATE TABLE itemData (itemID INT, fieldID INT, valueID, PRIMARY KEY (itemID, fieldID))",
        "CREATE TABLE itemNotes (itemID INTEGER PRIMARY KEY, parentItemID INT, note TEXT, title TEXT)",
        "CREATE TABLE itemAttachments (itemID INTEGER PRIMARY KEY, parentItemID INT, linkMode INT, contentType TEXT, "
        "charsetID INT, path TEXT, syncState INT DEFAULT 0, storageModTime INT, storageHash TEXT, "
        "lastProcessedModificationTime INT" + (", lastRead INT" if version >= 125 else "") + ")",
        "CREATE TABLE itemAnnotations (itemID INTEGER PRIMARY KEY, parentItemID INT NOT NULL, type INTEGER NOT NULL, "
        "authorName TEXT, text TEXT, comment TEXT, color TEXT, pageLabel TEXT, sortIndex TEXT NOT NULL, "
        "position TEXT NOT NULL, isExternal INT NOT NULL)",
        "CREATE TABLE tags (tagID INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
        "CREATE TABLE itemTags (itemID INT NOT NULL, tagID INT NOT NULL, type INT NOT NULL, PRIMARY KEY (itemID, tagID))",
        "CREATE TABLE creators (creatorID INTEGER PRIMARY KEY, firstName TEXT, lastName TEXT, fieldMode INT"
        + (", firstNameNormalized TEXT, lastNameNormalized TEXT" if v10 else "")
        + ", UNIQUE (lastName, firstName, fieldMode))",
        "CREATE TABLE itemCreators (itemID INT NOT NULL, creatorID INT NOT NULL, creatorTypeID INT NOT NULL DEFAULT 1, "
        "orderIndex INT NOT NULL DEFAULT 0, PRIMARY KEY (itemID, creatorID, creatorTypeID, orderIndex), "
        "UNIQUE (itemID, orderIndex))",
        "CREATE TABLE collections (collectionID INTEGER PRIMARY KEY, collectionName TEXT NOT NULL, parentCollectionID INT DEFAULT NULL, "
        "clientDateModified TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, libraryID INT NOT NULL, key TEXT NOT NULL, "
        "version INT NOT NULL DEFAULT 0, synced INT NOT NULL DEFAULT 0, UNIQUE (libraryID, key))",
        "CREATE TABLE collectionItems (collectionID INT NOT NULL, itemID INT NOT NULL, orderIndex INT NOT NULL DEFAULT 0, "
        "PRIMARY KEY (collectionID, itemID))",
        "CREATE TABLE deletedItems (itemID INTEGER PRIMARY KEY, dateDeleted DEFAULT CURRENT_TIMESTAMP NOT NULL)",
        "CREATE TABLE deletedCollections (collectionID INTEGER PRIMARY KEY, dateDeleted DEFAULT CURRENT_TIMESTAMP NOT NULL)",
        "CREATE TABLE fulltextItems (itemID INTEGER PRIMARY KEY, indexedPages INT, totalPages INT, indexedChars INT, "
        "totalChars INT, version INT NOT NULL DEFAULT 0, synced INT NOT NULL DEFAULT 0)",
        *(
            []
            if v10
            else [
                "CREATE TABLE fulltextWords (wordID INTEGER PRIMARY KEY, word TEXT UNIQUE)",
                "CREATE TABLE fulltextItemWords (wordID INT, itemID INT, PRIMARY KEY (wordID, itemID))",
            ]
        ),
        # A plugin's own table: real databases have foreign tables (llm-for-zotero does this).
        "CREATE TABLE llm_for_zotero_agent_transcript (id INTEGER PRIMARY KEY, body TEXT)",
    ]


@dataclass
class _Writer:
    db: sqlite3.Connection
    version: int
    type_ids: dict[str, int] = field(default_factory=dict)
    field_ids: dict[str, int] = field(default_factory=dict)
    value_ids: dict[str, int] = field(default_factory=dict)
    creator_ids: dict[tuple[str, str, int], int] = field(default_factory=dict)
    tag_ids: dict[str, int] = field(default_factory=dict)
    collection_ids: dict[str, int] = field(default_factory=dict)
    next_item_id: int = 1
    rows: dict[str, list[tuple[object, ...]]] = field(default_factory=dict)

    def add(self, table: str, row: tuple[object, ...]) -> None:
        self.rows.setdefault(table, []).append(row)

    def value(self, v: str) -> int:
        vid = self.value_ids.get(v)
        if vid is None:
            vid = self.value_ids[v] = len(self.value_ids) + 1
            self.add("itemDataValues", (vid, v, v.casefold()) if self.version >= 129 else (vid, v))
        return vid

    def creator(self, c: tuple[str, str] | str) -> int:
        first, last, mode = ("", c, 1) if isinstance(c, str) else (c[0], c[1], 0)
        k = (first, last, mode)
        cid = self.creator_ids.get(k)
        if cid is None:
            cid = self.creator_ids[k] = len(self.creator_ids) + 1
            row: tuple[object, ...] = (cid, first, last, mode)
            if self.version >= 129:
                row += (first.casefold(), last.casefold())
            self.add("creators", row)
        return cid

    def tag(self, name: str) -> int:
        tid = self.tag_ids.get(name)
        if tid is None:
            tid = self.tag_ids[name] = len(self.tag_ids) + 1
            self.add("tags", (tid, name))
        return tid

    def item_row(self, type_name: str, key: str, modified: str) -> int:
        iid = self.next_item_id
        self.next_item_id += 1
        row: tuple[object, ...] = (iid, self.type_ids[type_name], "2023-06-01 10:00:00", modified, modified, 1, key, 5, 1)
        if self.version >= 129:
            row += (0,)
        self.add("items", row)
        return iid

    def flush(self) -> None:
        for table, rows in self.rows.items():
            if rows:
                marks = ",".join("?" * len(rows[0]))
                self.db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
        self.rows.clear()


def _multipart(date: str) -> str:
    """Zotero's stored date: 'YYYY-MM-DD original' (month/day 00 when unknown)."""
    import re

    m = re.search(r"(\d{4})", date)
    year = m.group(1) if m else "0000"
    return f"{year}-00-00 {date}"


def build_zotero_dir(
    path: Path,
    items: Iterable[FixtureItem],
    collections: Iterable[FixtureCollection] = (),
    *,
    version: int = 123,
) -> Path:
    """Write `path/zotero.sqlite` and `path/storage/*/.zotero-ft-cache`; returns the database path.
    A v129 database is left in WAL mode, checkpointed and closed as a Zotero that quit cleanly leaves it."""
    path.mkdir(parents=True, exist_ok=True)
    dbp = path / "zotero.sqlite"
    if dbp.exists():
        raise FileExistsError(dbp)
    db = sqlite3.connect(dbp, isolation_level=None)
    try:
        if version >= 129:
            db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN")
        for stmt in _schema(version):
            db.execute(stmt)
        w = _Writer(db, version)
        db.executemany("INSERT INTO version VALUES (?, ?)", [("userdata", version), ("system", 33), ("triggers", 18)])
        db.execute("INSERT INTO libraries (libraryID, type, editable, filesEditable) VALUES (1, 'user', 1, 1)")
        for n, t in enumerate(ITEM_TYPES, start=1):
            w.type_ids[t] = n
            db.execute("INSERT INTO itemTypes VALUES (?, ?, NULL, 1)", (n, t))
        for n, f in enumerate(FIELDS, start=1):
            w.field_ids[f] = n
            db.execute("INSERT INTO fields VALUES (?, ?, NULL)", (n, f))
        for t, base, f in BASE_MAPPINGS:
            db.execute("INSERT INTO baseFieldMappings VALUES (?, ?, ?)", (w.type_ids[t], w.field_ids[base], w.field_ids[f]))
        for n, ct in enumerate(CREATOR_TYPES, start=1):
            db.execute("INSERT INTO creatorTypes VALUES (?, ?)", (n, ct))
        _write_collections(w, list(collections))
        for item in items:
            _write_item(w, path, item)
            if len(w.rows.get("itemData", ())) > 50_000:
                w.flush()
        w.flush()
        db.execute("COMMIT")
        if version >= 129:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return dbp


def _write_collections(w: _Writer, collections: list[FixtureCollection]) -> None:
    pending = list(collections)
    while pending:  # parents first, whatever order they came in
        progressed = False
        for c in list(pending):
            if c.parent is None or c.parent in w.collection_ids:
                cid = len(w.collection_ids) + 1
                w.collection_ids[c.key] = cid
                parent = w.collection_ids[c.parent] if c.parent else None
                w.db.execute(
                    "INSERT INTO collections (collectionID, collectionName, parentCollectionID, libraryID, key) VALUES (?, ?, ?, 1, ?)",
                    (cid, c.name, parent, c.key),
                )
                if c.trashed:
                    w.db.execute("INSERT INTO deletedCollections (collectionID) VALUES (?)", (cid,))
                pending.remove(c)
                progressed = True
        if not progressed:
            raise ValueError(f"collections with unknown parents: {[c.key for c in pending]}")


def _write_item(w: _Writer, data_dir: Path, item: FixtureItem) -> None:
    iid = w.item_row(item.item_type, item.key, item.date_modified)
    title_field = "caseName" if item.item_type == "case" else "title"
    values = {title_field: item.title, "abstractNote": item.abstract, "DOI": item.doi, "url": item.url}
    if item.date:
        values["dateDecided" if item.item_type == "case" else "date"] = _multipart(item.date)
    for name, value in values.items():
        if value:
            w.add("itemData", (iid, w.field_ids[name], w.value(value)))
    for order, c in enumerate(item.creators):
        w.add("itemCreators", (iid, w.creator(c), 1, order))
    for order, ckey in enumerate(item.collections):
        w.add("collectionItems", (w.collection_ids[ckey], iid, order))
    for t in item.tags:
        w.add("itemTags", (iid, w.tag(t), 0))
    if item.trashed:
        w.add("deletedItems", (iid, "2024-02-01 00:00:00"))
    for att in item.attachments:
        aid = w.item_row("attachment", att.key, item.date_modified)
        w.add("itemData", (aid, w.field_ids["title"], w.value("Full Text PDF")))
        row: tuple[object, ...] = (aid, iid, att.link_mode, att.content_type, None, f"storage:{att.filename}", 0, 1700000000000, "0" * 32, None)
        if w.version >= 125:
            row += (None,)
        w.add("itemAttachments", row)
        if att.trashed:
            w.add("deletedItems", (aid, "2024-02-01 00:00:00"))
        if att.text is not None or att.raw is not None:
            folder = data_dir / "storage" / att.key
            folder.mkdir(parents=True, exist_ok=True)
            data = att.raw if att.raw is not None else att.text.encode("utf-8")  # type: ignore[union-attr]
            (folder / ".zotero-ft-cache").write_bytes(data)
            pages = (att.text or "").count(PAGE_BREAK) + 1
            w.add("fulltextItems", (aid, pages, pages, len(data), len(data), 1, 1))


def touch_items(db_path: Path, keys: Sequence[str], *, title_suffix: str = " (revised)", when: str = "2025-05-05 05:05:05") -> None:
    """Edit items as Zotero does: a new title value, and both modification stamps."""
    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        db.execute("BEGIN")
        (title_id,) = db.execute("SELECT fieldID FROM fields WHERE fieldName='title'").fetchone()
        for key in keys:
            (iid,) = db.execute("SELECT itemID FROM items WHERE key=?", (key,)).fetchone()
            old = db.execute(
                "SELECT v.value FROM itemData d JOIN itemDataValues v USING (valueID) WHERE d.itemID=? AND d.fieldID=?", (iid, title_id)
            ).fetchone()
            new = (old[0] if old else key) + title_suffix
            cols = [r[1] for r in db.execute("PRAGMA table_info(itemDataValues)")]
            if "valueNormalized" in cols:
                db.execute("INSERT OR IGNORE INTO itemDataValues (value, valueNormalized) VALUES (?, ?)", (new, new.casefold()))
            else:
                db.execute("INSERT OR IGNORE INTO itemDataValues (value) VALUES (?)", (new,))
            (vid,) = db.execute("SELECT valueID FROM itemDataValues WHERE value=?", (new,)).fetchone()
            db.execute("INSERT OR REPLACE INTO itemData VALUES (?, ?, ?)", (iid, title_id, vid))
            db.execute("UPDATE items SET dateModified=?, clientDateModified=? WHERE itemID=?", (when, when, iid))
        db.execute("COMMIT")
    finally:
        db.close()


# --- the small library with known answers --------------------------------------------------------


def sample_library() -> tuple[list[FixtureItem], list[FixtureCollection]]:
    """Known items for the tests. Collections: RAG0COLL > DENSE0CO > HYDECOL2 (nested), MISCCOLL,
    and TRASHCOL (trashed). Items:
    - LEWIS202 (RAG, in RAG0COLL, full text with three pages),
    - KARPDPR1 (DPR, in DENSE0CO, full text without page markers),
    - GAOHYDE1 (HyDE, in HYDECOL2, full text with pages),
    - BEEKEEP1 (bees, in MISCCOLL, abstract only, no attachment),
    - ROEWADE1 (a case: title from caseName; no collection),
    - TRASHED1 (trashed; its text mentions HyDE and must never be found),
    - ORPHANED (its only attachment is trashed).
    """
    pb = PAGE_BREAK
    collections = [
        FixtureCollection("RAG0COLL", "Retrieval-augmented generation"),
        FixtureCollection("DENSE0CO", "Dense retrieval", parent="RAG0COLL"),
        FixtureCollection("HYDECOL2", "Zero-shot", parent="DENSE0CO"),
        FixtureCollection("MISCCOLL", "Miscellany"),
        FixtureCollection("TRASHCOL", "Old stuff", trashed=True),
    ]
    items = [
        FixtureItem(
            "LEWIS202", "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks",
            creators=[("Patrick", "Lewis"), ("Ethan", "Perez")], date="2020", collections=["RAG0COLL"], tags=["rag", "nlp"],
            abstract="Large pre-trained language models store factual knowledge in their parameters.",
            doi="10.48550/arXiv.2005.11401", url="https://arxiv.org/abs/2005.11401",
            attachments=[FixtureAttachment("LEWISPDF", text=(
                "Introduction. Language models struggle to access and precisely manipulate knowledge." + pb
                + "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index of Wikipedia." + pb
                + "Results. RAG sets the state of the art on open-domain question answering."))],
        ),
        FixtureItem(
            "KARPDPR1", "Dense Passage Retrieval for Open-Domain Question Answering",
            creators=[("Vladimir", "Karpukhin")], date="2020-11-01", collections=["DENSE0CO"],
            attachments=[FixtureAttachment("KARPPDF1", text=(
                "Dense passage retrieval encodes questions and passages with two BERT encoders and outperforms BM25. "
                "The dual encoder is trained with in-batch negatives."))],
        ),
        FixtureItem(
            "GAOHYDE1", "Precise Zero-Shot Dense Retrieval without Relevance Labels",
            creators=[("Luyu", "Gao"), ("Xueguang", "Ma"), ("Jimmy", "Lin"), ("Jamie", "Callan")], date="December 2022",
            collections=["HYDECOL2", "TRASHCOL"],
            attachments=[FixtureAttachment("GAOHPDF1", text=(
                "Abstract. We propose hypothetical document embeddings." + pb
                + "HyDE asks a language model to write a hypothetical document, then embeds it to retrieve real ones. "
                "The hypothetical document captures relevance patterns even when it is factually wrong."))],
        ),
        FixtureItem(
            "BEEKEEP1", "Honeybee Colony Collapse and Varroa Mites", item_type="book", creators=["Apiary Research Council"],
            date="2018", collections=["MISCCOLL"],
            abstract="Varroa mites weaken honeybee colonies; beekeepers treat hives with oxalic acid in winter.",
        ),
        FixtureItem("ROEWADE1", "Roe v. Wade", item_type="case", date="1973",
                    abstract="A landmark decision of the Supreme Court on privacy."),
        FixtureItem(
            "TRASHED1", "Deleted Draft about HyDE", trashed=True, collections=["HYDECOL2"],
            attachments=[FixtureAttachment("TRASHPDF", text="HyDE hypothetical document trash secret zeppelin.")],
        ),
        FixtureItem(
            "ORPHANED", "An Item Whose PDF Was Trashed",
            attachments=[FixtureAttachment("ORPHPDF1", text="zeppelin airship in the trash", trashed=True)],
        ),
    ]
    return items, collections


# --- a large library for the benchmark -----------------------------------------------------------


def _syllable_words(rng: random.Random, n: int) -> list[str]:
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "pl", "gr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
    codas = ["", "n", "r", "s", "l", "x", "nd", "st"]
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 3))) + rng.choice(codas))
    return sorted(words)


@dataclass
class GeneratedLibrary:
    items: list[FixtureItem]
    collections: list[FixtureCollection]
    vocabulary: list[str]  # content words, most frequent first (Zipf)
    fulltext_keys: list[str]  # items that have a full text


def generate_library(
    n_items: int = 10_000, n_fulltexts: int = 2_000, pages: int = 20, page_chars: int = 3000, seed: int = 4
) -> GeneratedLibrary:
    """A pseudo-random library. Text is Zipf-distributed words from a synthetic vocabulary, so
    term statistics look like real prose (a few very common words, a long tail of rare ones);
    sentences come from a precomputed pool, so making ~120 MB of text is quick."""
    rng = random.Random(seed)
    vocab = _syllable_words(rng, 20_000)
    rng.shuffle(vocab)
    cum: list[float] = []
    acc = 0.0
    for r in range(len(vocab)):
        acc += 1.0 / (r + 1)
        cum.append(acc)
    common = "the of and to in a is that for with as by on are this we from be".split()

    def sentence() -> str:
        words = rng.choices(vocab, cum_weights=cum, k=rng.randint(8, 20))
        for i in range(0, len(words), 3):
            words[i] = rng.choice(common) + " " + words[i]
        return " ".join(words).capitalize() + "."

    pool = [sentence() for _ in range(20_000)]
    keys: set[str] = set()

    def key() -> str:
        while True:
            k = "".join(rng.choice(KEY_CHARS) for _ in range(8))
            if k not in keys:
                keys.add(k)
                return k

    collections: list[FixtureCollection] = []
    for top in range(20):
        ck = key()
        collections.append(FixtureCollection(ck, f"Topic {top}"))
        for sub in range(4):
            collections.append(FixtureCollection(key(), f"Topic {top}.{sub}", parent=ck))
    with_text = set(rng.sample(range(n_items), min(n_fulltexts, n_items)))
    items: list[FixtureItem] = []
    fulltext_keys: list[str] = []
    for n in range(n_items):
        k = key()
        title = " ".join(rng.choices(vocab[50:5000], k=rng.randint(4, 10))).capitalize()
        atts: list[FixtureAttachment] = []
        if n in with_text:
            page_texts = []
            for _ in range(pages):
                sents: list[str] = []
                size = 0
                while size < page_chars:
                    s = rng.choice(pool)
                    sents.append(s)
                    size += len(s) + 1
                page_texts.append(" ".join(sents))
            atts.append(FixtureAttachment(key(), text=PAGE_BREAK.join(page_texts)))
            fulltext_keys.append(k)
        items.append(
            FixtureItem(
                k, title,
                creators=[(rng.choice(vocab).capitalize(), rng.choice(vocab).capitalize()) for _ in range(rng.randint(1, 4))],
                date=str(rng.randint(1980, 2025)),
                abstract=" ".join(rng.choice(pool) for _ in range(rng.randint(2, 5))),
                collections=[rng.choice(collections).key] if rng.random() < 0.8 else [],
                attachments=atts,
                trashed=rng.random() < 0.01,
            )
        )
    return GeneratedLibrary(items, collections, vocab, fulltext_keys)
