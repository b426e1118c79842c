"""library_passages.jsonl: loaded with its count logged, reloaded when it changes, a bad line
skipped with the wrong field named, `creators` as one string accepted."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from zocratesd.library import dense
from zocratesd.library.passages import PassagesFile
from zocratesd.library.retrieval import Scope


def lines(*objs: object) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


def test_load_reload_and_bad_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="zocratesd.library.passages")
    path = tmp_path / "library_passages.jsonl"
    path.write_text(lines(
        {"item_key": "LEWIS202", "title": "RAG", "text": "Retrieval augments generation.", "creators": "Lewis, Patrick; Perez, Ethan"},
        {"item_key": "BADYEAR1", "title": "x", "text": "y", "year": "twenty"},
        {"item_key": "NOTITLE1", "text": "no title here"},
        "not json at all",
        {"item_key": "KARPDPR1", "title": "DPR", "text": "Dense passage retrieval.", "creators": ["Vladimir Karpukhin"], "year": "2020"},
    ))
    pf = PassagesFile(path)
    assert [p.item_key for p in pf.passages] == ["LEWIS202", "KARPDPR1"]
    assert pf.passages[0].creators == ("Lewis, Patrick", "Perez, Ethan") and pf.passages[1].year == 2020
    text = caplog.text
    assert "line 2 skipped: field 'year' must be an integer" in text
    assert "line 3 skipped: field 'title' is missing" in text
    assert "line 4 skipped: not JSON" in text
    assert "loaded 2 passages of 2 items from" in text

    caplog.clear()
    hits = asyncio.run(pf.search("dense retrieval", Scope()))
    assert hits[0].passage.item_key == "KARPDPR1" and "reloaded" not in caplog.text  # unchanged: not read again
    path.write_text(lines({"item_key": "GAOHYDE1", "title": "HyDE", "text": "Hypothetical document embeddings."}))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    hits = asyncio.run(pf.search("hypothetical document", Scope()))
    assert [h.passage.item_key for h in hits] == ["GAOHYDE1"]
    assert "reloaded 1 passages of 1 items from" in caplog.text
    assert asyncio.run(pf.search("dense retrieval", Scope())) == []  # the old passages are gone


def test_every_passage_gets_its_vector_and_no_embedding_thread_is_left(tmp_path: Path) -> None:
    """The index of a passages file is written in one batch: its vectors, computed while the
    writer goes on, are in the file when the load returns (none missing, no flag), and the
    thread that waited for them is gone."""
    if not dense.model_name():
        pytest.skip("the dense stage is not installed")
    path = tmp_path / "library_passages.jsonl"
    path.write_text(lines(*({"item_key": f"ITEM{n:04d}", "title": f"Paper {n}", "text": f"Coral reefs and heat, finding {n}."}
                            for n in range(30))))
    pf = PassagesFile(path)
    assert asyncio.run(pf.search("coral reefs", Scope()))
    conn = sqlite3.connect(pf.index_path)
    try:
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        vectors = conn.execute("SELECT count(*) FROM chunk_vectors").fetchone()[0]
        missing = conn.execute("SELECT value FROM meta WHERE key = 'vectors_missing'").fetchone()
    finally:
        conn.close()
    assert chunks == 30 and vectors == chunks and missing is None, (chunks, vectors, missing)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("zocrates-embed")]
