"""Ranking on a large library without scoring every chunk a common word is in (index.py,
RANKING_SHARE): the index counts its common words once a pass has written, a question's common
words are left out of the ranking and only chunks with one of its rare words are ranked, and the
results are the ones the full ranking gives where it matters (bench/bench_heavy_library.py has
the time, bench/bench_retrieval.py the ranking on SciFact)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from zocratesd.demo import zotero_dir as zw
from zocratesd.library import index
from zocratesd.library.index import INDEX_NAME, _query_stemmer, _ranking_expression, match_expression
from zocratesd.library.retrieval import Scope
from zocratesd.library.service import Library

# Every paper is about cells in patients (the common words); each has words of its own.
TOPICS = ("ferroptosis", "autophagy", "senescence", "pyroptosis", "necroptosis", "mitophagy", "efferocytosis",
          "anoikis", "entosis", "parthanatos", "netosis", "cuproptosis")


@pytest.fixture(autouse=True)
def small_libraries_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """These libraries are small: shares are used on them as on a large one."""
    monkeypatch.setattr(index, "MIN_CHUNKS_FOR_SHARES", 1)


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


def ranking(db: Path, question: str) -> tuple[str, str | None]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
    try:
        expr = match_expression(question)
        assert expr is not None
        _query_stemmer(conn)
        conn.execute("BEGIN")
        try:
            return _ranking_expression(conn, expr)
        finally:
            conn.execute("ROLLBACK")
    finally:
        conn.close()


def test_common_words_leave_the_ranking_and_rare_ones_choose_the_candidates(tmp_path: Path) -> None:
    lib = make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS * 4)])
    db = tmp_path / "zocrates-data" / INDEX_NAME
    conn = sqlite3.connect(db)
    counted = dict(conn.execute("SELECT term, chunks FROM term_stats"))
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    conn.close()
    # Stemmed as the index stores words: "cells" and "patients" are in every chunk.
    assert counted["cell"] == chunks and counted["patient"] == chunks, counted
    ranks, rare = ranking(db, "Is it true that cuproptosis kills cells in patients with this study design?")
    # The common words are gone from the ranking; the topic (in a twelfth of the chunks) ranks but
    # does not choose candidates (CANDIDATE_SHARE); words in no chunk do both.
    assert ranks == '"true" OR "cuproptosis" OR "kills" OR "design"', ranks
    assert rare == '"true" OR "kills" OR "design"', rare
    ranks, rare = ranking(db, "cuproptosis and ferroptosis of cells in patients")
    assert ranks == '"cuproptosis" OR "ferroptosis"' and rare is None, (ranks, rare)
    hits = asyncio.run(lib.search("Is it true that cuproptosis kills cells in patients?", Scope()))
    assert {h.passage.item_key for h in hits[:4]} == {f"PAPER{n:03d}" for n in (11, 23, 35, 47)}, [h.passage.item_key for h in hits]


def test_a_question_of_common_words_alone_keeps_its_two_rarest(tmp_path: Path) -> None:
    make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS * 2)])
    ranks, rare = ranking(tmp_path / "zocrates-data" / INDEX_NAME, "cells from patients in the study")
    assert len(ranks.split(" OR ")) == index.MIN_RANKING_TERMS and rare is None, ranks


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
    assert ranking(db, question) == (match_expression(question), None)


def test_without_word_counts_the_question_ranks_whole(tmp_path: Path) -> None:
    """An index whose counts were never made (a first build under way) ranks every word."""
    make(tmp_path, [paper(n, t) for n, t in enumerate(TOPICS)])
    db = tmp_path / "zocrates-data" / INDEX_NAME
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DELETE FROM meta WHERE key = 'term_stats_chunks'")
    conn.close()
    question = "autophagy of cells in patients"
    assert ranking(db, question) == (match_expression(question), None)


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
