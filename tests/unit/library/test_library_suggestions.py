"""Questions drawn from the user's own library (zocratesd/library/suggestions.py), on real indexes
of schema-true Zotero data dirs: which papers, collections and tags, the scope of each, and what a
library without collections or tags, an empty one, or none at all gets."""

from __future__ import annotations

import asyncio
from pathlib import Path

from zoterofixture import FixtureCollection, FixtureItem, Note, build_zotero_dir, sample_library

from zocratesd.library.service import Library
from zocratesd.library.suggestions import MAX_NAME_CHARS, MAX_SUGGESTIONS, Suggestion


def indexed(d: Path, items: list[FixtureItem], collections: list[FixtureCollection]) -> Library:
    build_zotero_dir(d, items, collections)
    library = Library(d, d / "zocrates-data", local_api_url=None)
    library.indexer.refresh(None)
    return library


def suggest(library: Library, limit: int = 4) -> list[Suggestion]:
    return asyncio.run(library.suggestions(limit))


def test_a_paper_a_collection_a_tag_then_more_papers_each_with_its_scope(tmp_path: Path) -> None:
    items, collections = sample_library()
    # The paper the user worked with most comes first: here the one with a note.
    items = [FixtureItem(**{**vars(it), "notes": [Note("NOTEGAO1", "<p>Read again: the HyDE prompt.</p>")]})
             if it.key == "GAOHYDE1" else it for it in items]
    lib = indexed(tmp_path, items, collections)
    got = suggest(lib, 4)
    assert [s.kind for s in got] == ["paper", "collection", "tag", "paper"]
    first = got[0]
    assert first.items == (("GAOHYDE1", "Precise Zero-Shot Dense Retrieval without Relevance Labels"),)
    assert first.mode == "papers" and first.library == "user"
    assert first.text == "What are the main findings of “Precise Zero-Shot Dense Retrieval without Relevance Labels”?"
    coll = got[1]
    assert coll.mode == "collection" and coll.collection is not None and coll.items == ()
    assert coll.text == f"What do the papers in my “{coll.collection[1]}” collection find?"
    assert coll.collection[0] in {"RAG0COLL", "DENSE0CO", "HYDECOL2", "MISCCOLL"}  # never the trashed one
    tag = got[2]
    assert tag.mode == "library" and tag.library is None and tag.text.startswith("What does my library say about ")
    # Papers are distinct, never trashed, and have something to quote.
    papers = [s.items[0][0] for s in got if s.kind == "paper"]
    assert len(set(papers)) == len(papers) and "TRASHED1" not in papers
    assert got == suggest(lib, 4)  # the same library, the same questions
    assert len(suggest(lib, 1)) == 1 and suggest(lib, 1)[0] == first
    assert len(suggest(lib, 99)) <= MAX_SUGGESTIONS
    for s in suggest(lib, MAX_SUGGESTIONS):
        j = s.to_json()
        assert set(j) == {"text", "kind", "mode", "library", "items", "collection"}


def test_a_library_without_collections_or_tags_gets_papers(tmp_path: Path) -> None:
    items = [
        FixtureItem(f"PAPER00{n}", f"Paper number {n}", date=str(2000 + n), abstract=f"Findings of paper {n}.")
        for n in range(2, 7)
    ] + [FixtureItem("NOTEXT22", "A paper with nothing to quote")]
    got = suggest(indexed(tmp_path, items, []), 4)
    assert [s.kind for s in got] == ["paper"] * 4
    # The newest first, and never one without a full text or an abstract.
    assert [s.items[0][0] for s in got] == ["PAPER006", "PAPER005", "PAPER004", "PAPER003"]


def test_long_or_odd_titles_are_cut_to_a_line_or_two(tmp_path: Path) -> None:
    title = "A   title\nwith a line break " + "and many words " * 20
    items = [FixtureItem("LONGTTL2", title, abstract="Something.", tags=["  deep   learning "]),
             FixtureItem("LONGTTL3", "Other", abstract="Else.", tags=["Deep learning"])]
    got = suggest(indexed(tmp_path, items, []), 4)
    paper = next(s for s in got if s.items and s.items[0][0] == "LONGTTL2")
    name = paper.text.removeprefix("What are the main findings of “").removesuffix("”?")
    assert len(name) == MAX_NAME_CHARS and name.endswith("…") and "\n" not in name and "  " not in name
    assert paper.items[0][1] == title  # the scope keeps the real title
    # A tag counts once per paper, whatever its case or spacing.
    assert [s.text for s in got if s.kind == "tag"] == ["What does my library say about deep learning?"]


def test_an_empty_library_or_none_yet_gets_none(tmp_path: Path) -> None:
    assert suggest(indexed(tmp_path / "empty", [], [])) == []
    # Before the first refresh there is no index file at all.
    d = tmp_path / "later"
    items, collections = sample_library()
    build_zotero_dir(d, items, collections)
    assert suggest(Library(d, d / "zocrates-data", local_api_url=None)) == []
