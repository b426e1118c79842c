"""Ranking behaviour found by bench/bench_retrieval.py (BEIR SciFact): an item whose metadata chunk
would be only its title (no abstract) must not win on its title's words with a passage that has
nothing to quote; its text chunks carry the title instead."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from zocratesd.demo import zotero_dir as zw
from zocratesd.library.index import INDEX_NAME
from zocratesd.library.retrieval import Scope
from zocratesd.library.service import Library

QUESTION = "Does vitamin D supplementation reduce fracture risk in older adults?"
# The item that answers: its abstract says what the trial found.
ANSWER = zw.Item(
    "ANSWERS1", "Bone health in later life: a randomised trial", creators=[("Ann", "Smith")], date="2019",
    fields={"abstractNote": (
        "We randomised 2,000 older adults living at home to daily vitamin D supplementation or placebo for five years. "
        "Supplementation did not reduce fracture risk: 112 fractures in the vitamin D group against 109 with placebo. "
        "Falls, bone mineral density and mortality did not differ between the groups either."
    )},
)
# Its title has most of the question's words; it has no abstract, and its PDF's text is about
# the fracture registry the study used (the words the question asks about are in the title only).
TITLE_ONLY = zw.Item(
    "TITLEONL", "Vitamin D supplementation and fracture risk in older adults: a registry protocol", date="2021",
    attachments=[zw.Attachment("TITLEPDF", pages=[
        "This protocol describes the national registry from which cases are drawn. Hospitals report every admission "
        "with its diagnosis codes; records are linked by a pseudonymous identifier and checked each quarter. "
        "We describe the linkage, the audit of coding quality, the governance of access and the timetable of releases. "
        "Analyses will be prespecified and published before any data are released to investigators."
    ])],
)

# Other papers, so that the question's words are rare, as in a real library (BM25's idf).
TOPICS = ("soil microbiome", "glacier retreat", "protein folding", "urban traffic", "coral bleaching", "lithium batteries",
          "language acquisition", "exoplanet atmospheres", "wheat genomics", "monetary policy", "bird migration", "graphene")
OTHERS = [
    zw.Item(f"OTHER{n:03d}", f"Advances in {topic}", fields={"abstractNote": (
        f"We review recent work on {topic}: the methods used, the main findings of the last decade and the questions "
        f"that remain open. Study {n} pooled data from several cohorts and registries and reports effect sizes with "
        f"their confidence intervals; the analysis plan was registered in advance."
    )})
    for n, topic in enumerate(TOPICS)
]


def make(tmp_path: Path) -> Library:
    zw.write(tmp_path, zw.Library(items=[ANSWER, TITLE_ONLY, *OTHERS]), version=zw.ZOTERO_10)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    return lib


def test_a_title_only_metadata_chunk_no_longer_comes_first(tmp_path: Path) -> None:
    """With its title on it, TITLEONL's metadata chunk (title, year) was the top hit for this
    question (16.7 against 12.3 for the abstract that answers), with nothing to quote."""
    lib = make(tmp_path)
    hits = asyncio.run(lib.search(QUESTION, Scope()))
    found = [(h.passage.item_key, h.passage.kind) for h in hits]
    assert ("TITLEONL", "metadata") not in found, found
    # Both papers come first, each through text an answer can quote.
    assert {k for k, _ in found[:2]} == {"ANSWERS1", "TITLEONL"}, found
    assert "did not reduce fracture risk" in next(h.passage.text for h in hits if h.passage.item_key == "ANSWERS1")
    assert "registry" in next(h.passage.text for h in hits if h.passage.item_key == "TITLEONL")


def test_the_bare_metadata_chunk_still_finds_an_item_by_its_title_and_authors(tmp_path: Path) -> None:
    lib = make(tmp_path)
    # Words only in the title: found (the text chunks carry it).
    assert [h.passage.item_key for h in asyncio.run(lib.search("registry protocol", Scope()))][:1] == ["TITLEONL"]
    # An item with no abstract and no text keeps its title on its metadata chunk.
    conn = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    titles = dict(conn.execute(
        "SELECT c.item_key || ':' || c.kind, f.title FROM chunks c JOIN chunks_fts f ON f.rowid = c.id WHERE c.kind = 'metadata'"
    ))
    conn.close()
    assert titles["ANSWERS1:metadata"] == ANSWER.title and titles["TITLEONL:metadata"] == ""


def test_an_item_with_only_a_title_is_found_by_it(tmp_path: Path) -> None:
    zw.write(tmp_path, zw.Library(items=[zw.Item("ONLYTITL", "Sleep spindles in adolescents")]), version=zw.ZOTERO_10)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    hits = asyncio.run(lib.search("sleep spindles", Scope()))
    assert [(h.passage.item_key, h.passage.kind) for h in hits] == [("ONLYTITL", "metadata")]


def test_a_passages_file_is_searched_through_the_same_index(tmp_path: Path) -> None:
    """library_passages.jsonl goes into the FTS5 index and its search (stemmed, scoped in SQL),
    not into a separate in-memory BM25 without stemming; hits are the passages as the file gives them."""
    import json

    from zocratesd.library.passages import PassagesFile

    path = tmp_path / "library_passages.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in (
        {"item_key": "LEWIS202", "title": "Retrieval-Augmented Generation", "text": "A retriever fetches passages for the generator.",
         "page": 3, "collections": ["RAG0COLL"], "creators": ["Patrick Lewis"], "year": 2020},
        {"item_key": "KARPDPR1", "title": "Dense Passage Retrieval", "text": "Dual encoders retrieved the answers better than BM25.",
         "attachment_key": "KARPPDF1", "page": 5},
        *({"item_key": f"OTHER{n:03d}", "title": f"Unrelated paper {n}", "text": f"Soil and weather, season {n}."} for n in range(8)),
    )))
    pf = PassagesFile(path)
    hits = asyncio.run(pf.search("an encoder that retrieves an answer", Scope()))
    top = hits[0].passage
    # Found only with stemming (encoder: encoders, answer: answers); the old in-memory BM25 had none.
    assert (top.item_key, top.attachment_key, top.page, top.kind) == ("KARPDPR1", "KARPPDF1", 5, "fulltext")
    assert top.text == "Dual encoders retrieved the answers better than BM25." and top.link is None
    scoped = asyncio.run(pf.search("retriever passages", Scope("collection", (), "RAG0COLL")))
    assert [(h.passage.item_key, h.passage.page, h.passage.attachment_key) for h in scoped] == [("LEWIS202", 3, None)]
    assert scoped[0].passage.creators == ("Patrick Lewis",) and scoped[0].passage.year == 2020
    assert asyncio.run(pf.search("retriever", Scope("papers", ("OTHER001",)))) == []
    assert (tmp_path / "library_passages.db").exists()


def test_a_long_abstract_is_chunked_like_any_text(tmp_path: Path) -> None:
    """An abstract longer than a chunk is cut as a PDF's text is (fulltext.CHUNK_CHARS, at sentence
    ends): one BM25 row the length of two would be ranked against ~1,200-character chunks
    (SciFact, abstract layout: 0.706 -> 0.716 test nDCG@10). The header stays on the first part,
    and a quote from a later part starts at its own text."""
    from zocratesd.engine.answer.evidence import _body
    from zocratesd.library.fulltext import CHUNK_CHARS

    first = "Sleep spindles were recorded in 40 adolescents over two nights. " * 12
    later = "Spindle density predicted overnight memory consolidation in the oldest group only. " * 8
    item = zw.Item("LONGABST", "Sleep spindles and memory", creators=[("Kim", "Lee")], date="2022",
                   fields={"abstractNote": f"{first.strip()} {later.strip()}"})
    zw.write(tmp_path, zw.Library(items=[item, *OTHERS]), version=zw.ZOTERO_10)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    conn = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    bodies = [b for (b,) in conn.execute(
        "SELECT f.body FROM chunks c JOIN chunks_fts f ON f.rowid = c.id WHERE c.item_key = 'LONGABST' AND c.kind = 'metadata' ORDER BY c.id"
    )]
    conn.close()
    assert len(bodies) >= 2 and all(len(b) <= CHUNK_CHARS + 20 for b in bodies), [len(b) for b in bodies]
    assert bodies[0].startswith("Kim Lee 2022\n\nSleep spindles")
    assert all(b.startswith("\n\n") for b in bodies[1:])
    hits = asyncio.run(lib.search("spindle density memory consolidation", Scope()))
    top = hits[0].passage
    assert (top.item_key, top.kind) == ("LONGABST", "metadata")
    assert _body({"kind": "metadata", "text": top.text}).startswith("Spindle density predicted"), top.text[:80]


def test_a_chunk_with_no_words_is_not_indexed(tmp_path: Path) -> None:
    """An item with a PDF and no creators, date, tags or abstract has a bare metadata chunk with
    nothing in it. As an FTS5 row it matched nothing and halved the average row length BM25
    normalises by in a library of short texts (SciFact, full-text layout: -0.008 nDCG@10)."""
    bare = zw.Item("BAREPDF1", "Registry linkage", attachments=[zw.Attachment("BAREPDF2", pages=[
        "Records are linked by a pseudonymous identifier and checked each quarter for coding quality."])])
    zw.write(tmp_path, zw.Library(items=[bare, ANSWER]), version=zw.ZOTERO_10)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    conn = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    kinds = conn.execute("SELECT item_key, kind FROM chunks ORDER BY id").fetchall()
    empty = conn.execute("SELECT count(*) FROM chunks_fts WHERE title = '' AND trim(body) = ''").fetchone()[0]
    conn.close()
    assert ("BAREPDF1", "metadata") not in kinds and ("BAREPDF1", "fulltext") in kinds, kinds
    assert ("ANSWERS1", "metadata") in kinds and empty == 0
    # Still found by its title (its text chunk carries it) and by its text.
    assert [h.passage.item_key for h in asyncio.run(lib.search("registry linkage", Scope()))][:1] == ["BAREPDF1"]
    assert lib.status()["items_indexed"] == 2
