"""Ranking on a large library without scoring every chunk a common word is in (index.py,
CANDIDATE_CHUNKS, RANKING_SHARE): the index counts its common words once a pass has written, a
question's commonest words are left out of the ranking, only chunks with one of its rarest words
are scored (over the rare and the other words), and the results are the ones the full ranking
gives where it matters (bench/bench_heavy_library.py has the time, bench/bench_retrieval.py the
ranking on SciFact)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from zocratesd.demo import zotero_dir as zw
from zocratesd.library import index
from zocratesd.library.index import INDEX_NAME, Candidates, WordRanking, _query_stemmer, _rank_candidates, _word_ranking, match_expression
from zocratesd.library.retrieval import Scope
from zocratesd.library.service import Library

# Every paper is about cells in patients (the common words); each has words of its own.
TOPICS = ("ferroptosis", "autophagy", "senescence", "pyroptosis", "necroptosis", "mitophagy", "efferocytosis",
          "anoikis", "entosis", "parthanatos", "netosis", "cuproptosis")


@pytest.fixture(autouse=True)
def small_libraries_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """These libraries are small: shares and candidates are used on them as on a large one (a
    topic is in 4 of 48 papers here), and so is the ranking of a scope in the whole index."""
    monkeypatch.setattr(index, "MIN_CHUNKS_FOR_SHARES", 1)
    monkeypatch.setattr(index, "CANDIDATE_CHUNKS", 6)
    monkeypatch.setattr(index, "SMALL_SCOPE_CHUNKS", 0)  # a collection is ranked in the whole index


def paper(n: int, topic: str) -> zw.Item:
    return zw.Item(f"PAPER{n:03d}", f"{topic.capitalize()} of cells in patients", fields={"abstractNote": (
        f"We studied {topic} of cells taken from patients. Cells from each patient were cultured and the study "
        f"measured {topic} markers over time; patients' cells differed from the cells of controls."
    )})


def make(tmp_path: Path, items: list[zw.Item]) -> Library:
    zw.write(tmp_path, zw.Library(items=items), version=zw.ZOTERO_10)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    return lib


def ranking(db: Path, question: str) -> WordRanking | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    try:
        expr = match_expression(question)
        assert expr is not None
        _query_stemmer(conn)
        conn.execute("BEGIN")
        try:
            return _word_ranking(conn, expr)
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_common_words_leave_the_ranking_and_rare_ones_choose_the_candidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "_dense_embedder", lambda conn: None)  # BM25's order, which this test is about
    # On both topics, each named once: on either topic alone it ranks below that topic's papers.
    both = zw.Item("PAPER900", "Two ways cells die in patients", fields={"abstractNote": (
        "Cells from patients underwent ferroptosis in one arm and cuproptosis in the other; cells from each patient were cultured.")})
    lib = make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS * 4)] + [both])
    db = tmp_path / "zocrates-data" / INDEX_NAME
    conn = sqlite3.connect(db)
    counted = dict(conn.execute("SELECT term, chunks FROM term_stats"))
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    in_topic = conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'cuproptosis'").fetchone()[0]
    conn.close()
    # Stemmed as the index stores words: "cells" and "patients" are in every chunk.
    assert counted["cell"] == chunks and counted["patient"] == chunks, counted
    assert in_topic <= index.CANDIDATE_CHUNKS < 2 * in_topic, in_topic
    # The common words are gone from the ranking; words in no chunk cost nothing and the rarest
    # word that is in some chunk always chooses the candidates.
    words = ranking(db, "Is it true that cuproptosis kills cells in patients with this study design?")
    assert words == WordRanking(("true", "kills", "design", "cuproptosis"), (0, 0, 0, in_topic)), words
    assert words.split(index.CANDIDATE_CHUNKS) == Candidates('"true" OR "kills" OR "design" OR "cuproptosis"', None, False)
    # Two topics: one chooses the candidates (both together are in more than CANDIDATE_CHUNKS),
    # the other ranks them.
    words = ranking(db, "ferroptosis and cuproptosis of cells in patients")
    assert words is not None and words.split(index.CANDIDATE_CHUNKS) == Candidates('"ferroptosis"', '"cuproptosis"', False), words
    # The paper on both ranks first: the candidates are scored over the other topic too. (One
    # hit asked for: the five candidates are enough, so the search ranks those alone.)
    hits = asyncio.run(lib.search("ferroptosis and cuproptosis of cells in patients", Scope(), top_k=1))
    assert hits[0].passage.item_key == "PAPER900", [h.passage.item_key for h in hits]
    hits = asyncio.run(lib.search("Is it true that cuproptosis kills cells in patients?", Scope()))
    assert {h.passage.item_key for h in hits[:5]} == {f"PAPER{n:03d}" for n in (11, 23, 35, 47, 900)}, [h.passage.item_key for h in hits]


@pytest.mark.parametrize("widening", [10, 1])
def test_a_scope_without_the_rare_words_ranks_every_word_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, widening: int) -> None:
    """In a collection that holds none of the candidates, the question's other words still find
    its papers: the search takes more candidates (CANDIDATE_WIDENING), and when those are still
    too few, ranks every word there."""
    monkeypatch.setattr(index, "CANDIDATE_WIDENING", widening)
    items = [paper(n, t) for n, t in enumerate(TOPICS * 4)]
    for item in items:
        if "Ferroptosis" in item.title:
            item.collections = ["FERROCOL"]
    zw.write(tmp_path, zw.Library(items=items, collections=[zw.Collection("FERROCOL", "Ferroptosis")]), version=zw.ZOTERO_10)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    words = ranking(tmp_path / "zocrates-data" / INDEX_NAME, "cuproptosis or ferroptosis of cells in patients")
    assert words is not None and words.split(index.CANDIDATE_CHUNKS).common is not None, words
    in_collection = Scope(mode="collection", collection="FERROCOL")
    hits = asyncio.run(lib.search("cuproptosis or ferroptosis of cells in patients", in_collection))
    assert {h.passage.item_key for h in hits} == {f"PAPER{n:03d}" for n in (0, 12, 24, 36)}, [h.passage.item_key for h in hits]


def test_a_rarest_word_past_the_budget_scores_its_chunks_with_a_common_word_first(tmp_path: Path) -> None:
    """When the rarest word alone is in more chunks than CANDIDATE_CHUNKS, its chunks that also
    hold a common word are scored; the others only when those are not enough."""
    both = zw.Item("PAPER900", "Two ways cells die in patients", fields={"abstractNote": (
        "Cells from patients underwent ferroptosis in one arm and cuproptosis in the other.")})
    make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS * 4)] + [both])
    conn = sqlite3.connect(f"file:{tmp_path / 'zocrates-data' / INDEX_NAME}?mode=ro", uri=True, isolation_level=None)
    try:
        uid_of = dict(conn.execute("SELECT id, item_key FROM chunks"))
        over = Candidates('"ferroptosis"', '"cuproptosis"', True)
        assert {uid_of[r] for r, _ in _rank_candidates(conn, over, "", 30, 1)} == {"PAPER900"}
        # Fewer than enough: the rarest word's other chunks are scored too, below the paper on both.
        ranked = _rank_candidates(conn, over, "", 30, 2)
        assert uid_of[ranked[0][0]] == "PAPER900"
        assert {uid_of[r] for r, _ in ranked} == {"PAPER900", "PAPER000", "PAPER012", "PAPER024", "PAPER036"}
    finally:
        conn.close()


def test_a_question_of_common_words_alone_keeps_its_two_rarest(tmp_path: Path) -> None:
    make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS * 2)])
    words = ranking(tmp_path / "zocrates-data" / INDEX_NAME, "cells from patients in the study")
    assert words is not None and len(words.words) == index.MIN_RANKING_TERMS, words


def test_a_small_library_ranks_every_word(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below MIN_CHUNKS_FOR_SHARES no count is made and every word ranks: a topic in 3 of 10
    papers is what the question is about there, not a common word."""
    monkeypatch.setattr(index, "MIN_CHUNKS_FOR_SHARES", 10_000)
    make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS)])
    db = tmp_path / "zocrates-data" / INDEX_NAME
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM term_stats").fetchone()[0] == 0
    conn.close()
    question = "autophagy of cells in patients"
    assert ranking(db, question) is None


def test_without_word_counts_the_question_ranks_whole(tmp_path: Path) -> None:
    """An index whose counts were never made (a first build under way) ranks every word."""
    make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS)])
    db = tmp_path / "zocrates-data" / INDEX_NAME
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DELETE FROM meta WHERE key = 'term_stats_chunks'")
    conn.close()
    question = "autophagy of cells in patients"
    assert ranking(db, question) is None


def test_the_counts_are_made_again_when_the_library_grows(tmp_path: Path) -> None:
    lib = make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS)])
    db = tmp_path / "zocrates-data" / INDEX_NAME
    conn = sqlite3.connect(db)
    before = int(conn.execute("SELECT value FROM meta WHERE key = 'term_stats_chunks'").fetchone()[0])
    conn.close()
    # Twelve more papers, all on one topic: "autophagy" goes from 1 in 12 chunks to 13 in 24.
    extra = [paper(100 + n, "autophagy") for n in range(12)]
    (tmp_path / "zotero.sqlite").unlink()
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"zotero.sqlite{suffix}").unlink(missing_ok=True)
    zw.write(tmp_path, zw.Library(items=[paper(n, t) for n, t in enumerate(TOPICS)] + extra), version=zw.ZOTERO_10)
    lib.indexer.refresh(None)
    conn = sqlite3.connect(db)
    after = int(conn.execute("SELECT value FROM meta WHERE key = 'term_stats_chunks'").fetchone()[0])
    autophagy = conn.execute("SELECT chunks FROM term_stats WHERE term = 'autophagi'").fetchone()
    conn.close()
    assert after > before and autophagy is not None and autophagy[0] >= 13, (before, after, autophagy)
