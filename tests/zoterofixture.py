"""Build Zotero data dirs for tests and benchmarks: a thin layer over `zocratesd.demo.zotero_dir`,
which writes `zotero.sqlite` exactly as Zotero makes it (schema.json's ids: author is creator type
10; real `*Combined` tables; triggers; `version` rows of a real release) and the storage folder
(`.zotero-ft-cache` as Zotero's PDF worker writes it, `.zotero-ft-unprocessed`).

- `build_zotero_dir(path, items, collections, version=123|125|129, notes=, groups=, feeds=, ...)`
  writes one data dir. `items` are `FixtureItem`s (kept for the existing tests) or the writer's
  `Item`s. v129 is a Zotero 10 database: WAL, `clientVersion`, `*Normalized` columns, no
  `fulltextWords`.
- `sample_library()` is a small library with known answers (nested collections, a trashed item,
  an item in a trashed parent's place, attachments with and without pages, a case whose title is
  the base-mapped `caseName`).
- `rich_library()` adds what users keep beside papers: notes (child and standalone), annotations
  with page labels, a group library, a feed, Chinese text, accents, an unprocessed full text.
- `generate_library(n_items, n_fulltexts, pages)` is a large pseudo-random one for the benchmark.
- `touch_items()` edits items as Zotero would (title and `dateModified`/`clientDateModified`).
- `printed_pages(pages, PageFurniture(...))` lays page texts out as a journal prints them and
  Zotero extracts them: a running header (odd and even pages may differ, "{page}" is the printed
  page number) and a page-number footer on each page, each a line of its own; the body one line
  per paragraph as Zotero 7's PDF worker writes it, or (`width`) in printed lines with long words
  hyphenated at a line's end, as pdftotext in earlier Zotero wrote it.
  `FixtureAttachment(printing=...)` does it to its text; without it, text is written as given.

Nothing here is imported by the daemon.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zocratesd.demo.zotero_dir import (
    KEY_ALPHABET,
    LINK_MODES,
    Annotation,
    Attachment,
    Collection,
    Creator,
    Feed,
    Group,
    Item,
    Library,
    Note,
    write,
)

KEY_CHARS = KEY_ALPHABET  # Zotero's key alphabet (no 0, 1, O)
SUPPORTED_VERSIONS = (123, 125, 129)
PAGE_BREAK = "\f"  # the PDF worker's page separator in .zotero-ft-cache (after each page's "\n\n")
_LINK_MODE_NAMES = {n: name for name, n in LINK_MODES.items()}
__all__ = [
    "Annotation", "Attachment", "Collection", "Creator", "Feed", "FixtureAttachment", "FixtureCollection", "FixtureItem",
    "Group", "Item", "Library", "Note", "PageFurniture", "build_zotero_dir", "generate_library", "key_maker", "printed_pages", "rich_library",
    "sample_library", "touch_items",
]


@dataclass(frozen=True)
class PageFurniture:
    """How a journal prints its pages: `odd_header` atop odd printed pages, `even_header` atop even
    ones (the same if None), each with "{page}" for the printed page number; `footer` below each
    page ("{page}", "Page {page} of {pages}"); the first page is printed as `first_page`; the title
    page has no header when `title_page`; body lines are `width` characters, or (None) each
    paragraph ("\n\n" in the page's text) is one line."""

    odd_header: str
    even_header: str | None = None
    footer: str = "{page}"
    first_page: int = 1
    title_page: bool = False
    width: int | None = None


def _hyphenated_lines(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` characters; a word of nine letters or more that would
    start the next line is split after its first half, with a hyphen, as typesetting does."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            room = width - len(line) - 2  # a space and the hyphen
            if word.isalpha() and word.islower() and len(word) >= 9 and room >= len(word) // 2:
                cut = len(word) // 2
                lines.append(f"{line} {word[:cut]}-")
                line = word[cut:]
                continue
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


def printed_pages(pages: Sequence[str], furniture: PageFurniture) -> list[str]:
    """Each page as the PDF worker extracts a printed one: header line, body lines, footer line."""
    out = []
    for n, body in enumerate(pages):
        page = furniture.first_page + n
        fill = {"page": page, "pages": furniture.first_page + len(pages) - 1}
        header = furniture.odd_header if page % 2 or furniture.even_header is None else furniture.even_header
        lines = [] if n == 0 and furniture.title_page else [header.format(**fill)]
        paragraphs = [" ".join(p.split()) for p in body.split("\n\n") if p.strip()]
        lines += paragraphs if furniture.width is None else [ln for p in paragraphs for ln in _hyphenated_lines(p, furniture.width)]
        lines.append(furniture.footer.format(**fill))
        out.append("\n".join(lines))
    return out


@dataclass
class FixtureAttachment:
    key: str
    text: str | None = None  # the PDF's text, pages separated by "\f"; None: no .zotero-ft-cache
    content_type: str = "application/pdf"
    filename: str = "paper.pdf"
    link_mode: int = 0  # imported_file
    raw: bytes | None = None  # exact cache bytes (malformed-input tests); wins over text
    trashed: bool = False
    unprocessed: bool = False  # the text waits in .zotero-ft-unprocessed (synced full text)
    annotations: Sequence[Annotation] = ()
    printing: PageFurniture | None = None  # lay the pages out as printed (printed_pages); None: as given

    def to_writer(self) -> Attachment:
        pages = None
        text = None
        if self.raw is None and self.text is not None:
            if self.content_type == "application/pdf":
                pages = self.text.split(PAGE_BREAK)
                if self.printing is not None:
                    pages = printed_pages(pages, self.printing)
            else:
                text = self.text
        return Attachment(
            self.key, content_type=self.content_type, filename=self.filename, link_mode=_LINK_MODE_NAMES[self.link_mode],
            pages=pages, text=text, cache_bytes=self.raw, trashed=self.trashed, unprocessed=self.unprocessed,
            annotations=self.annotations,
        )


@dataclass
class FixtureItem:
    key: str
    title: str
    item_type: str = "journalArticle"
    creators: Sequence[Creator | tuple[str, str] | str] = ()  # (first, last) or a single-field name
    date: str | None = None  # as typed: "2020", "March 2021"
    abstract: str | None = None
    doi: str | None = None
    url: str | None = None
    collections: Sequence[str] = ()
    tags: Sequence[str] = ()
    attachments: Sequence[FixtureAttachment | Attachment] = ()
    trashed: bool = False
    date_modified: str = "2024-01-01 00:00:00"
    notes: Sequence[Note] = ()

    def to_writer(self) -> Item:
        fields = {"abstractNote": self.abstract or "", "DOI": self.doi or "", "url": self.url or ""}
        return Item(
            self.key, self.title, item_type=self.item_type, creators=self.creators, date=self.date,
            fields={k: v for k, v in fields.items() if v}, tags=self.tags, collections=self.collections,
            attachments=[a.to_writer() if isinstance(a, FixtureAttachment) else a for a in self.attachments],
            notes=self.notes, trashed=self.trashed, date_modified=self.date_modified,
        )


@dataclass
class FixtureCollection:
    key: str
    name: str
    parent: str | None = None
    trashed: bool = False

    def to_writer(self) -> Collection:
        return Collection(self.key, self.name, self.parent, self.trashed)


def _item(it: FixtureItem | Item) -> Item:
    return it.to_writer() if isinstance(it, FixtureItem) else it


def build_zotero_dir(
    path: Path,
    items: Iterable[FixtureItem | Item],
    collections: Iterable[FixtureCollection | Collection] = (),
    *,
    version: int = 123,
    notes: Sequence[Note] = (),
    attachments: Sequence[Attachment] = (),
    groups: Sequence[Group] = (),
    feeds: Sequence[Feed] = (),
) -> Path:
    """Write `path/zotero.sqlite` and `path/storage/`; returns the database path. Real databases
    also carry plugins' tables: one is added (llm-for-zotero keeps its transcripts there)."""
    lib = Library(
        items=[_item(it) for it in items],
        collections=[c.to_writer() if isinstance(c, FixtureCollection) else c for c in collections],
        notes=notes, attachments=attachments, groups=groups, feeds=feeds,
    )
    dbp = write(path, lib, version=version)
    db = sqlite3.connect(dbp, isolation_level=None)
    try:
        db.execute("CREATE TABLE llm_for_zotero_agent_transcript (id INTEGER PRIMARY KEY, body TEXT)")
        if version >= 129:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return dbp


def touch_items(db_path: Path, keys: Sequence[str], *, title_suffix: str = " (revised)", when: str = "2025-05-05 05:05:05") -> None:
    """Edit items as Zotero does: a new title value, and both modification stamps."""
    db = sqlite3.connect(db_path, isolation_level=None)
    try:
        db.execute("BEGIN")
        (title_id,) = db.execute("SELECT fieldID FROM fields WHERE fieldName='title'").fetchone()
        for key in keys:
            (iid,) = db.execute("SELECT itemID FROM items WHERE key=? AND libraryID=1", (key,)).fetchone()
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


def rich_library() -> Library:
    """What users keep beside papers, each holding the only answer to one question:
    - NOTEPAR1 (a paper) with a child note NOTECHL1 (the only mention of "axolotl regeneration"),
      and a standalone note NOTESOL1 ("quokka census"), in collection FIELDCOL;
    - ANNPAPER with a PDF ANNPDF01 whose annotations carry page labels (the PDF's page 3 is
      labelled "xii"): ANNOTHL1 highlights "transformer attention heads" and ANNOTCM1's comment
      alone says "bioluminescent plankton"; the PDF's text also says "transformer attention
      heads" on its pages 1 and 2 (the highlight must rank first);
    - a group library 4242 "Lab Group" with GRPPAPR1 (only it mentions "tardigrade cryptobiosis"),
      and its own key LEWIS202 reused (keys are unique per library only), in collection GRPCOLL1;
    - ZHPAPER1, a Chinese paper (title and text: 机器学习, 神经网络);
    - LUBECK01, about Lübeck (accents folding both ways);
    - SYNCPAPR, whose PDF text is only in `.zotero-ft-unprocessed` ("pangolin scales keratin");
    - a standalone PDF STANDPDF ("manatee seagrass grazing"), a web page WEBPAGE1 with an HTML
      snapshot WEBSNAP1 ("coral spawning"), and LINKED01 whose PDF is a linked file LINKPDF1
      ("lichen symbiosis"; Zotero keeps a linked file's text in storage/<key>/ too);
    - a feed whose item FEEDITM1 says "narwhal tusk" (feeds are never indexed)."""
    filler = "Background on neural models and their training. " * 8
    return Library(
        items=[
            Item("NOTEPAR1", "Limb regrowth in amphibians", creators=[("Ana", "Silva")], date="March 2019",
                 collections=["FIELDCOL"], notes=[Note("NOTECHL1", "<h1>Reading notes</h1><p>Key point: axolotl regeneration "
                                                                     "depends on blastema cells &amp; nerves.</p>")]),
            Item("ANNPAPER", "Interpreting language models", creators=[("Kim", "Lee")], date="2021",
                 attachments=[Attachment("ANNPDF01", pages=[
                     "Introduction. We study transformer attention heads in passing. " + filler,
                     "Method. Transformer attention heads are probed. " + filler,
                     "Results. The transformer attention heads specialise in syntax. " + filler,
                 ], annotations=[
                     Annotation("ANNOTHL1", text="The transformer attention heads specialise in syntax.", page_label="xii",
                                page_index=2, color="#ffd400", tags=["key-finding"]),
                     Annotation("ANNOTCM1", type="note", comment="Compare with bioluminescent plankton signalling.",
                                page_label="xi", page_index=1),
                 ])]),
            Item("ZHPAPER1", "基于神经网络的机器学习方法", creators=["王伟"], date="2020",
                 attachments=[Attachment("ZHPDF001", pages=["本文研究机器学习中的神经网络训练方法。", "实验结果表明该方法有效。"])]),
            Item("LUBECK01", "Hanseatic trade in Lübeck", creators=[("Jörg", "Müller")], date="1999",
                 fields={"abstractNote": "Merchants of Lübeck and the Baltic salt route."}),
            Item("SYNCPAPR", "Scaly mammals", date="2022",
                 attachments=[Attachment("SYNCPDF1", pages=["Pangolin scales are made of keratin.", "Second page."], unprocessed=True)]),
            Item("WEBPAGE1", "Reef diary", item_type="webpage", date="2023-05-02", fields={"url": "https://example.org/reef"},
                 attachments=[Attachment("WEBSNAP1", title="Snapshot", content_type="text/html", link_mode="imported_url",
                                         filename="reef.html", url="https://example.org/reef",
                                         text="Coral spawning happens a few nights after the full moon.")]),
            Item("LINKED01", "Symbiosis in the tundra", item_type="book", date="2010",
                 attachments=[Attachment("LINKPDF1", link_mode="linked_file", path="/home/ada/papers/lichens.pdf",
                                         pages=["Lichen symbiosis pairs a fungus with an alga."])]),
        ],
        attachments=[Attachment("STANDPDF", title="scan-0042.pdf", filename="scan-0042.pdf",
                                pages=["Manatee seagrass grazing shapes coastal meadows."])],
        collections=[Collection("FIELDCOL", "Field notes")],
        notes=[Note("NOTESOL1", "Quokka census on Rottnest Island: 10,000 animals.", collections=["FIELDCOL"])],
        groups=[Group(4242, "Lab Group", items=[
            Item("GRPPAPR1", "Surviving extremes", creators=[("Tom", "Hart")], date="2018", collections=["GRPCOLL1"],
                 fields={"abstractNote": "Tardigrade cryptobiosis lets them survive desiccation."}),
            Item("LEWIS202", "A group copy that shares a key", fields={"abstractNote": "Group-only text about okapi stripes."}),
        ], collections=[Collection("GRPCOLL1", "Extremophiles")])],
        feeds=[Feed("Nature news", "https://example.org/nature.rss", items=[Item("FEEDITM1", "Narwhal tusk sensing")])],
    )


# --- a large library for the benchmark -----------------------------------------------------------


def _syllable_words(rng: random.Random, n: int) -> list[str]:
    onsets = ["b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "pl", "gr"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ou", "ea"]
    codas = ["", "n", "r", "s", "l", "x", "nd", "st"]
    words: set[str] = set()
    while len(words) < n:
        words.add("".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(rng.randint(1, 3))) + rng.choice(codas))
    return sorted(words)


def key_maker(rng: random.Random) -> Callable[[], str]:
    """A function giving a new Zotero key (8 of its characters) at each call, never one twice."""
    keys: set[str] = set()

    def key() -> str:
        while True:
            k = "".join(rng.choice(KEY_CHARS) for _ in range(8))
            if k not in keys:
                keys.add(k)
                return k

    return key


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
    key = key_maker(rng)

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
