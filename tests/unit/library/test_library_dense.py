"""The dense stage (library/dense.py): wordllama's static embeddings re-rank the word
index's candidates by meaning; without the package search is BM25 alone, and an index whose
vectors do not match what the process can compute is rebuilt. wordllama is part of the default
install: these tests fail, never skip, without it."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from zocratesd.demo import zotero_dir as zw
from zocratesd.library import dense
from zocratesd.library.index import INDEX_NAME, IndexCorrupt, open_index
from zocratesd.library.retrieval import Scope
from zocratesd.library.service import Library

QUESTION = "injuries from automobile collisions"
# Both papers have one of the question's words once. The factory paper is shorter, so BM25 puts
# it first; the crash paper is about what the question asks, in other words (cars crash, hurt,
# fractures, wounds), which only the embeddings see.
CRASHES = zw.Item("CRASHES1", "Trauma in road traffic accidents", fields={"abstractNote": (
    "Drivers and passengers hurt when cars crash on the motorway: fractures, whiplash, head wounds "
    "and deaths in hospital after each automobile accident.")})
FACTORY = zw.Item("FACTORY1", "Steel prices and car plants", fields={"abstractNote": (
    "We model how steel prices move the cost of each automobile leaving the plant.")})
OTHERS = [
    zw.Item(f"OTHER{n:03d}", f"Advances in {topic}", fields={"abstractNote": (
        f"We review recent work on {topic}: the methods, findings and open questions of the last decade.")})
    for n, topic in enumerate(("soil microbiome", "glacier retreat", "protein folding", "coral bleaching",
                               "bird migration", "graphene", "monetary policy", "wheat genomics"))
]


@pytest.fixture
def no_dense() -> Iterator[None]:
    """The process as it is without wordllama (the loader's cached answer: unavailable)."""
    saved = list(dense._loaded)
    dense._loaded[:] = [None]
    try:
        yield
    finally:
        dense._loaded[:] = saved


def make(tmp_path: Path) -> Library:
    zw.write(tmp_path, zw.Library(items=[CRASHES, FACTORY, *OTHERS]), version=zw.ZOTERO_10)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    return lib


def ranked(lib: Library, query: str = QUESTION) -> list[str]:
    return [h.passage.item_key for h in asyncio.run(lib.search(query, Scope()))]


def test_the_dense_stage_is_installed_for_the_tests() -> None:
    assert dense.embedder() is not None, "wordllama is a dependency: pip install -e ."
    assert dense.model_name() == dense.MODEL_NAME


def test_dense_reranking_puts_the_paper_about_the_question_first(tmp_path: Path) -> None:
    lib = make(tmp_path)
    assert ranked(lib)[:2] == ["CRASHES1", "FACTORY1"]
    conn = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    try:
        assert conn.execute("SELECT value FROM meta WHERE key = 'dense_model'").fetchone() == (dense.MODEL_NAME,)
        # every chunk with words has its vector (int8, DIM bytes)
        n_chunks, n_vectors, sizes = conn.execute(
            "SELECT (SELECT count(*) FROM chunks), count(*), group_concat(DISTINCT length(v)) FROM chunk_vectors"
        ).fetchone()
        assert n_chunks == n_vectors == 10 and sizes == str(dense.DIM)
    finally:
        conn.close()


def test_without_the_package_search_is_bm25_alone(tmp_path: Path, no_dense: None) -> None:
    lib = make(tmp_path)
    assert ranked(lib)[:2] == ["FACTORY1", "CRASHES1"]
    conn = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    try:
        assert conn.execute("SELECT value FROM meta WHERE key = 'dense_model'").fetchone() == ("",)
        assert conn.execute("SELECT count(*) FROM chunk_vectors").fetchone() == (0,)
    finally:
        conn.close()


def test_an_index_is_rebuilt_when_the_dense_stage_comes_or_goes(tmp_path: Path) -> None:
    index = tmp_path / INDEX_NAME
    open_index(index).close()  # with vectors
    saved = list(dense._loaded)
    dense._loaded[:] = [None]
    try:
        with pytest.raises(IndexCorrupt, match="vectors from wordllama.*want none"):
            open_index(index)
        assert not index.exists()
        open_index(index).close()  # without
    finally:
        dense._loaded[:] = saved
    with pytest.raises(IndexCorrupt, match="vectors from none, want wordllama"):
        open_index(index)
    # The indexer does this itself: the library is rebuilt with vectors and searched with them.
    lib = make(tmp_path / "lib")
    lib.reader.close()
    conn = sqlite3.connect(tmp_path / "lib" / "zocrates-data" / INDEX_NAME)
    conn.execute("UPDATE meta SET value = '' WHERE key = 'dense_model'")
    conn.execute("DELETE FROM chunk_vectors")
    conn.commit()
    conn.close()
    lib.indexer.refresh(None)
    assert lib.status()["items_indexed"] == 10 and ranked(lib)[:2] == ["CRASHES1", "FACTORY1"]


def test_a_removed_item_leaves_no_vectors(tmp_path: Path) -> None:
    lib = make(tmp_path)
    zconn = sqlite3.connect(tmp_path / "zotero.sqlite")  # FACTORY1 to the trash, as Zotero does it
    zconn.execute("INSERT INTO deletedItems (itemID) SELECT itemID FROM items WHERE key = 'FACTORY1'")
    zconn.commit()
    zconn.close()
    lib.indexer.refresh(None)
    assert lib.status()["items_indexed"] == 9
    conn = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    try:
        orphans = conn.execute("SELECT count(*) FROM chunk_vectors WHERE id NOT IN (SELECT id FROM chunks)").fetchone()
        assert orphans == (0,) and conn.execute("SELECT count(*) FROM chunk_vectors").fetchone() == (9,)
    finally:
        conn.close()
    assert ranked(lib)[:1] == ["CRASHES1"]


@pytest.fixture
def fresh_dense() -> Iterator[None]:
    """The process as a daemon starts it: the model not loaded, no search yet."""
    saved, searched = list(dense._loaded), dense._searched[0]
    dense._loaded.clear()
    dense._searched[0] = False
    try:
        yield
    finally:
        dense._loaded[:] = saved
        dense._searched[0] = searched


def test_indexing_releases_the_model_until_a_search_keeps_it(tmp_path: Path, fresh_dense: None) -> None:
    """The model costs ~50-65 MiB: an indexing pass loads it to embed and drops it after, unless a
    search has used it; from the first search on it stays. The index says it has vectors
    without the model being loaded."""
    lib = make(tmp_path)
    assert dense._loaded == [] and dense.model_name() == dense.MODEL_NAME and dense._loaded == []
    zconn = sqlite3.connect(tmp_path / "zotero.sqlite")  # a change to embed
    zconn.execute("UPDATE items SET clientDateModified = '2030-01-01 00:00:00' WHERE key = 'OTHER001'")
    zconn.commit()
    zconn.close()
    lib.indexer.refresh(None)
    assert lib.status()["items_to_index"] == 1 and dense._loaded == []
    assert ranked(lib)[:2] == ["CRASHES1", "FACTORY1"]  # the search loads it
    loaded = dense._loaded[0]
    assert loaded is not None
    lib.indexer.request_refresh(rebuild=True)
    lib.indexer.refresh(None)
    assert dense._loaded == [loaded]  # kept: searches use it


def test_the_model_loads_offline_and_wordllama_is_never_imported() -> None:
    """The weights and tokenizer come from the installed wheel: with every network connection
    refused, the embedder loads and embeds; wordllama's own code (which may download) is not run."""
    code = (
        "import socket, sys\n"
        "def refuse(*a, **k): raise OSError('network used')\n"
        "socket.socket.connect = refuse; socket.create_connection = refuse; socket.getaddrinfo = refuse\n"
        "from zocratesd.library import dense\n"
        "e = dense.embedder(); assert e is not None\n"
        "v = e.embed('bone fractures after car crashes'); assert v is not None and v.shape == (dense.DIM,)\n"
        "assert abs(float(v @ v) - 1.0) < 1e-4\n"
        "assert 'wordllama' not in sys.modules, 'wordllama was imported'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_library_dense_false_switches_the_stage_off_though_installed(tmp_path: Path) -> None:
    """config `library.dense = false`: the daemon's library searches with BM25 alone (and its index
    holds no vectors), with wordllama installed; set back on, the index is rebuilt with them."""
    from zocratesd.config import load_config
    from zocratesd.core.daemon import Daemon

    zw.write(tmp_path, zw.Library(items=[CRASHES, FACTORY, *OTHERS]), version=zw.ZOTERO_10)
    saved = list(dense._loaded)
    try:
        for on, first in ((False, ["FACTORY1", "CRASHES1"]), (True, ["CRASHES1", "FACTORY1"])):
            config = load_config(tmp_path, {"library": {"dense": on, "local_api": False}})
            daemon = Daemon(tmp_path, config, load_engine=False)
            _, lib = daemon.catalogue.make_source()
            assert lib is not None
            lib.indexer.refresh(None)
            assert dense.model_name() == (dense.MODEL_NAME if on else "")
            assert ranked(lib)[:2] == first
            lib.reader.close()
            asyncio.run(daemon.aclose())
    finally:
        dense.set_enabled(True)
        dense._loaded[:] = saved
