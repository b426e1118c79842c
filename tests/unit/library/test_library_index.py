"""library.db: scoped BM25 search, incremental refresh, removal, corrupt or foreign index files."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from zoterofixture import FixtureAttachment, FixtureItem, build_zotero_dir, sample_library, touch_items

from zocratesd.library import index as index_module
from zocratesd.library import zotero_db
from zocratesd.library.index import INDEX_NAME, match_expression
from zocratesd.library.retrieval import Scope
from zocratesd.library.service import Library


def make(tmp_path: Path, version: int = 123) -> Library:
    items, colls = sample_library()
    build_zotero_dir(tmp_path, items, colls, version=version)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    return lib


def keys(lib: Library, query: str, scope: Scope | None = None) -> list[str]:
    hits = asyncio.run(lib.search(query, scope or Scope()))
    return [h.passage.item_key for h in hits]


@pytest.mark.parametrize(("version", "small_scope"), [(123, 500), (129, 500), (129, 0)])
def test_scopes(tmp_path: Path, version: int, small_scope: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scope is ranked within itself when it is small (SMALL_SCOPE_CHUNKS), else in the whole
    index with its chunks as a filter: the same papers either way."""
    monkeypatch.setattr(index_module, "SMALL_SCOPE_CHUNKS", small_scope)
    lib = make(tmp_path, version)
    assert keys(lib, "What does HyDE do?")[0] == "GAOHYDE1"
    assert "TRASHED1" not in keys(lib, "hypothetical document zeppelin")
    assert keys(lib, "zeppelin airship") == []  # only in the trash
    # papers: only the selection, even when other items match better
    assert set(keys(lib, "dense retrieval passages", Scope("papers", ("LEWIS202",)))) == {"LEWIS202"}
    # collection: members of the collection and of its subcollections
    assert set(keys(lib, "retrieval", Scope("collection", (), "DENSE0CO"))) == {"KARPDPR1", "GAOHYDE1"}
    assert set(keys(lib, "retrieval", Scope("collection", (), "RAG0COLL"))) == {"LEWIS202", "KARPDPR1", "GAOHYDE1"}
    assert keys(lib, "retrieval", Scope("collection", (), "MISCCOLL")) == []
    assert keys(lib, "retrieval", Scope("collection", (), "TRASHCOL")) == []


def test_hits_carry_provenance(tmp_path: Path) -> None:
    lib = make(tmp_path)
    (hit,) = asyncio.run(lib.search("non-parametric memory Wikipedia", Scope("papers", ("LEWIS202",)), top_k=1))
    p = hit.passage
    assert (p.item_key, p.attachment_key, p.page, p.year) == ("LEWIS202", "LEWISPDF", 2, 2020)
    assert p.creators == ("Patrick Lewis", "Ethan Perez") and p.collections == ("RAG0COLL",)
    assert "non-parametric memory" in p.text and hit.score > 0
    assert p.citation() == "Patrick Lewis et al. (2020). Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks, p. 2"


@pytest.mark.parametrize(
    "query", ['"', "AND OR NOT", "NEAR(a b", "title:x", "*", "a' OR 1=1 --", "\x00\x01", "ünïcödé — 検索", "x" * 5000]
)
def test_any_query_text_is_safe(tmp_path: Path, query: str) -> None:
    lib = make(tmp_path)
    keys(lib, query)  # no exception
    assert match_expression("the of and") is None


@pytest.mark.parametrize("ckey", ["../../etc", "' OR 1=1 --", "", "rag0coll", "RAG0COLL/../x", None])
def test_hostile_collection_keys_find_nothing(tmp_path: Path, ckey: str | None) -> None:
    lib = make(tmp_path)
    assert keys(lib, "retrieval", Scope("collection", (), ckey)) == []
    assert keys(lib, "retrieval", Scope("papers", ("'; DROP TABLE items; --",))) == []


def test_incremental_refresh_reindexes_only_what_changed(tmp_path: Path) -> None:
    lib = make(tmp_path)
    first = lib.status()
    assert first["items_to_index"] == 6 and first["state"] == "ready" and first["items_indexed"] == 6
    lib.indexer.refresh(None)
    assert lib.status()["items_to_index"] == 0
    touch_items(tmp_path / "zotero.sqlite", ["BEEKEEP1", "KARPDPR1"], title_suffix=" quokka")
    lib.indexer.refresh(None)
    assert lib.status()["items_to_index"] == 2
    assert set(keys(lib, "quokka")) == {"BEEKEEP1", "KARPDPR1"}
    # a cache file rewritten by Zotero (re-extracted text) is picked up without a date change
    (tmp_path / "storage" / "KARPPDF1" / ".zotero-ft-cache").write_text("Now about wombats.")
    lib.indexer.refresh(None)
    assert lib.status()["items_to_index"] == 1 and keys(lib, "wombats") == ["KARPDPR1"]
    # an item moved to the trash leaves the index
    conn = sqlite3.connect(tmp_path / "zotero.sqlite")
    conn.execute("INSERT INTO deletedItems (itemID) SELECT itemID FROM items WHERE key = 'BEEKEEP1'")
    conn.commit()
    conn.close()
    lib.indexer.refresh(None)
    assert set(keys(lib, "quokka")) == {"KARPDPR1"} and lib.status()["items_indexed"] == 5


@pytest.mark.parametrize("damage", ["garbage", "truncated", "foreign_schema", "dropped_table"])
def test_a_bad_index_is_rebuilt(tmp_path: Path, damage: str) -> None:
    lib = make(tmp_path)
    index = tmp_path / "zocrates-data" / INDEX_NAME
    lib.reader.close()
    if damage == "garbage":
        for suffix in ("-wal", "-shm"):
            Path(f"{index}{suffix}").unlink(missing_ok=True)
        index.write_bytes(b"\x00garbage" * 4096)
    elif damage == "truncated":
        conn = sqlite3.connect(index)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        data = index.read_bytes()
        index.write_bytes(data[: len(data) // 3] + b"\xff" * 8192 + data[len(data) // 3 :][8192:])
    elif damage == "foreign_schema":
        conn = sqlite3.connect(index)
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
        conn.commit()
        conn.close()
    else:
        conn = sqlite3.connect(index)
        conn.execute("DROP TABLE chunks_fts")
        conn.commit()
        conn.close()
    asyncio.run(lib.search("HyDE", Scope()))  # never raises, whatever the damage
    lib.indexer.refresh(None)
    assert lib.status()["state"] == "ready" and lib.status()["items_indexed"] == 6
    assert keys(lib, "What does HyDE do?")[0] == "GAOHYDE1"


def test_search_on_a_damaged_index_answers_nothing_and_asks_for_a_rebuild(tmp_path: Path) -> None:
    lib = make(tmp_path)
    index = tmp_path / "zocrates-data" / INDEX_NAME
    conn = sqlite3.connect(index)
    conn.execute("DROP TABLE chunks")
    conn.commit()
    conn.close()
    assert keys(lib, "HyDE") == []
    assert lib.indexer._rebuild  # the indexer thread rebuilds it at its next wake-up


def test_a_busy_index_answers_nothing_for_now_and_is_not_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that cannot get the index (another connection holds it) is not damage: the index stays
    as it is (a rebuild of a large library costs minutes) and the next read finds everything."""
    lib = make(tmp_path)
    monkeypatch.setattr(index_module, "READ_BUSY_TIMEOUT_S", 0.05)
    lib.reader.invalidate()  # the next read opens a connection with the short wait
    holder = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE meta SET value = value WHERE key = 'vectors_missing'")
    try:
        assert keys(lib, "HyDE") == []
        assert asyncio.run(lib.collections()) == []
        assert not lib.indexer._rebuild
    finally:
        holder.rollback()
        holder.close()
    assert keys(lib, "What does HyDE do?")[0] == "GAOHYDE1"
    assert not lib.indexer._rebuild


def test_a_read_that_finds_the_index_busy_once_is_tried_again_and_answers(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A transient failure is not answered as "no such collection": the read is tried once more on a
    fresh connection, and the index is neither rebuilt nor emptied."""
    lib = make(tmp_path)
    monkeypatch.setattr(index_module, "READ_BUSY_TIMEOUT_S", 0.05)
    lib.reader.invalidate()
    holder = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME, check_same_thread=False)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE meta SET value = value WHERE key = 'vectors_missing'")
    dropped = lib.reader.drop_thread_connection
    released: list[bool] = []

    def release_then_drop() -> None:  # the other connection lets go between the two tries
        if not released:
            holder.rollback()
            holder.close()
            released.append(True)
        dropped()

    monkeypatch.setattr(lib.reader, "drop_thread_connection", release_then_drop)
    assert asyncio.run(lib.collections()) != []
    assert released == [True] and not lib.indexer._rebuild


def test_no_library_and_unreadable_library_are_reported(tmp_path: Path) -> None:
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None, poll_interval_s=0.05)
    lib.start()
    try:
        for _ in range(200):
            if lib.status()["state"] != "starting":
                break
            asyncio.run(asyncio.sleep(0.01))
        st = lib.status()
        assert st["state"] == "unavailable" and "no zotero.sqlite" in st["message"]
        assert not (tmp_path / "zocrates-data" / INDEX_NAME).exists()
        assert keys(lib, "anything") == []
        (tmp_path / "zotero.sqlite").write_bytes(b"not a database" * 100)
        lib.status(refresh=True)
        for _ in range(200):
            if lib.status()["state"] == "error":
                break
            asyncio.run(asyncio.sleep(0.01))
        assert "not an SQLite database" in lib.status()["message"]
    finally:
        asyncio.run(lib.aclose())


def test_batches_commit_as_they_go(tmp_path: Path) -> None:
    items = [FixtureItem(f"ITEM{n:04d}", f"Paper {n} about axolotls", attachments=[FixtureAttachment(f"ATT0{n:04d}", text="Axolotls regrow limbs.")])
             for n in range(250)]
    build_zotero_dir(tmp_path, items)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    seen: list[tuple[int, int, int]] = []
    lib.indexer.on_batch = lambda done, total: seen.append((done, total, int(lib.status()["percent"])))
    lib.indexer.refresh(None)
    assert [s[:2] for s in seen] == [(100, 250), (200, 250), (250, 250)]
    assert [s[2] for s in seen] == [40, 80, 100]


def test_zotero_taking_its_database_during_a_build_pauses_it_and_the_next_look_finishes_it(tmp_path: Path) -> None:
    """The items' records are read batch by batch while the build runs: when Zotero starts
    mid-build and locks its database, the pass stops between batches, asks for the next look,
    and that look (a private copy while Zotero holds the file) indexes the rest."""
    items = [FixtureItem(f"ITEM{n:04d}", f"Paper {n} about axolotls", attachments=[FixtureAttachment(f"ATT0{n:04d}", text="Axolotls regrow limbs.")])
             for n in range(250)]
    db = build_zotero_dir(tmp_path, items)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    zotero = sqlite3.connect(db, isolation_level=None)

    def zotero_starts(done: int, total: int) -> None:
        if done == 100:  # as Zotero holds its database: an exclusive lock, kept
            zotero.execute("PRAGMA locking_mode=EXCLUSIVE")
            zotero.execute("BEGIN EXCLUSIVE")

    lib.indexer.on_batch = zotero_starts
    lib.indexer.refresh(None)
    status = lib.status()
    assert status["state"] == "indexing" and status["items_done"] == 100, status
    assert lib.indexer._forced  # the next poll looks again at once
    lib.indexer.on_batch = None
    zotero.execute("COMMIT")  # still held (exclusive locking mode): the next look reads a copy
    lib.indexer.refresh(None)
    status = lib.status()
    assert status["state"] == "ready" and status["items_indexed"] == 250 and status["items_to_index"] == 150, status
    assert status["source"] == "snapshot"
    assert len(keys(lib, "axolotls")) == 6
    zotero.close()


def test_a_database_failure_during_a_build_is_an_error_not_a_pause(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a database Zotero holds (busy, locked) pauses a build; any other failure reading the
    records is raised, for the indexer's thread to report and retry later, never a look at once
    after every poll."""
    items = [FixtureItem(f"ITEM{n:04d}", f"Paper {n} about axolotls") for n in range(150)]
    build_zotero_dir(tmp_path, items)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    metadata = zotero_db._metadata
    calls = []

    def failing(*args: object) -> object:
        calls.append(1)
        if len(calls) > 1:
            exc = sqlite3.OperationalError("disk I/O error")
            exc.sqlite_errorcode = sqlite3.SQLITE_IOERR  # as SQLite's own errors carry it
            raise exc
        return metadata(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(zotero_db, "_metadata", failing)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        lib.indexer.refresh(None)
    assert not lib.indexer._forced and lib.status()["items_done"] == 100


def test_collection_membership_alone_is_a_change(tmp_path: Path) -> None:
    lib = make(tmp_path)
    assert "BEEKEEP1" not in keys(lib, "varroa", Scope("collection", (), "RAG0COLL"))
    conn = sqlite3.connect(tmp_path / "zotero.sqlite")  # no date touched: only collectionItems changes
    conn.execute("INSERT INTO collectionItems SELECT c.collectionID, i.itemID, 9 FROM collections c, items i "
                 "WHERE c.key = 'HYDECOL2' AND i.key = 'BEEKEEP1'")
    conn.commit()
    conn.close()
    lib.indexer.refresh(None)
    assert lib.status()["items_to_index"] == 1
    assert keys(lib, "varroa", Scope("collection", (), "RAG0COLL")) == ["BEEKEEP1"]  # via a subcollection


@pytest.mark.parametrize(("small_scope", "slots"), [(500, 4), (0, 4), (500, 2), (0, 1)])
def test_one_connection_keeps_each_scope_right_across_scopes_and_changes(tmp_path: Path, small_scope: int, slots: int,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A read connection keeps the chunks of the scopes it searched last (SCOPE_SLOTS; and a small
    scope's words): a scope it no longer holds, or one whose index changed, is gathered again."""
    monkeypatch.setattr(index_module, "SMALL_SCOPE_CHUNKS", small_scope)
    monkeypatch.setattr(index_module, "SCOPE_SLOTS", slots)
    lib = make(tmp_path)
    reader = index_module.IndexReader(tmp_path / "zocrates-data" / INDEX_NAME)
    conn = reader.connection()
    assert conn is not None

    def found(query: str, scope: Scope) -> set[str]:
        return {h.passage.item_key for h in index_module.search(conn, query, scope, 6)}

    rag = Scope("collection", (), "RAG0COLL")
    assert found("retrieval", rag) == {"LEWIS202", "KARPDPR1", "GAOHYDE1"}
    assert "BEEKEEP1" not in found("varroa", rag)
    assert found("retrieval", Scope("collection", (), "DENSE0CO")) == {"KARPDPR1", "GAOHYDE1"}
    assert found("dense retrieval passages", Scope("papers", ("LEWIS202",))) == {"LEWIS202"}
    assert conn.execute("SELECT count(*) FROM temp.scope_of").fetchone()[0] == min(3, slots)
    assert found("retrieval", rag) == {"LEWIS202", "KARPDPR1", "GAOHYDE1"}
    assert "BEEKEEP1" in found("varroa", Scope())
    zotero = sqlite3.connect(tmp_path / "zotero.sqlite")
    zotero.execute("INSERT INTO collectionItems SELECT c.collectionID, i.itemID, 9 FROM collections c, items i "
                   "WHERE c.key = 'HYDECOL2' AND i.key = 'BEEKEEP1'")
    zotero.commit()
    zotero.close()
    assert "BEEKEEP1" not in found("varroa", rag)
    lib.indexer.refresh(None)
    assert found("varroa", rag) == {"BEEKEEP1"}
    reader.close()


def test_indexing_runs_off_the_event_loop(tmp_path: Path) -> None:
    """start() returns at once, and the loop keeps ticking while the thread indexes."""
    from zoterofixture import generate_library

    gen = generate_library(n_items=600, n_fulltexts=150, pages=10, seed=9)
    build_zotero_dir(tmp_path, gen.items, gen.collections, version=129)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)

    async def run() -> tuple[float, float, list[str]]:
        t0 = time.perf_counter()
        lib.start()
        started = time.perf_counter() - t0
        worst, states = 0.0, []
        while lib.status()["state"] != "ready":
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            worst = max(worst, time.perf_counter() - before - 0.01)
            states.append(lib.status()["state"])
            assert time.perf_counter() - t0 < 300  # a hang, not a slow machine
        await lib.aclose()
        return started, worst, states

    started, worst_lag, states = asyncio.run(run())
    print(f"start() {started * 1000:.1f} ms; worst event-loop lag while indexing: {worst_lag * 1000:.1f} ms")
    # Counted in the loop's ticks, not in time (which a loaded machine stretches): indexing on the
    # loop would let it tick at most once while the state says "indexing".
    assert states.count("indexing") >= 3, states


def test_polls_skip_unchanged_libraries_and_hold_back_after_long_refreshes(tmp_path: Path) -> None:
    items, colls = sample_library()
    build_zotero_dir(tmp_path, items, colls, version=123)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    ix = lib.indexer
    ix._maybe_refresh(None)
    assert ix.status().refreshes == 1
    ix._maybe_refresh(None)  # nothing changed: not even a read
    assert ix.status().refreshes == 1
    touch_items(tmp_path / "zotero.sqlite", ["BEEKEEP1"])
    ix._next_allowed = time.monotonic() + 60  # as after a refresh that took 3 s
    ix._maybe_refresh(None)
    assert ix.status().refreshes == 1  # held back; the change waits for a later poll
    lib.status(refresh=True)  # ...unless someone asks
    ix._maybe_refresh(None)
    assert ix.status().refreshes == 2 and ix.status().items_to_index == 1


def test_an_inconsistent_index_row_is_skipped(tmp_path: Path) -> None:
    lib = make(tmp_path)
    conn = sqlite3.connect(tmp_path / "zocrates-data" / INDEX_NAME)
    conn.execute("DELETE FROM chunks WHERE item_key = 'GAOHYDE1' AND page = 2")  # its FTS row stays
    conn.commit()
    conn.close()
    hits = asyncio.run(lib.search("hypothetical document", Scope()))
    assert [(h.passage.item_key, h.passage.page) for h in hits] == [("GAOHYDE1", 1)]


def test_pdfs_whose_page_labels_cannot_be_read_are_one_log_line_per_pass(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A library of damaged PDFs says so once, with a count and a few names, not a line per file."""
    keys_ = [f"BROKEN{n:02d}" for n in range(8)]
    items = [FixtureItem(f"PAPER{n:03d}", f"Paper {n}", attachments=[FixtureAttachment(k, text=f"Page one of paper {n}.")])
             for n, k in enumerate(keys_)]
    build_zotero_dir(tmp_path, items)
    for k in keys_:
        for pdf in (tmp_path / "storage" / k).glob("*.pdf"):
            pdf.write_bytes(b"%PDF-1.7 damaged beyond repair")
        if not list((tmp_path / "storage" / k).glob("*.pdf")):
            (tmp_path / "storage" / k / "paper.pdf").write_bytes(b"%PDF-1.7 damaged beyond repair")
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    with caplog.at_level(logging.INFO, logger="zocratesd.library"):
        lib.indexer.refresh(None)
    lines = [r.getMessage() for r in caplog.records if "page labels" in r.getMessage()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("library: the page labels of 8 PDFs could not be read (storage/BROKEN00 (")
    assert lines[0].endswith(" and 3 more); their pages are cited by number"), lines[0]
    assert lib.status()["state"] == "ready" and keys(lib, "paper one")


def test_reads_during_a_first_build_never_take_the_new_index_for_a_damaged_one(tmp_path: Path) -> None:
    """A client polling the library while its index is first created (the sidebar at a first start)
    must see "nothing indexed yet" or a whole index, never a file without its tables: that read
    would be taken for damage, and the index just built thrown away and built again (minutes on a
    large library, and "no such item" answers meanwhile)."""
    items, colls = sample_library()
    build_zotero_dir(tmp_path, items, colls)
    index = tmp_path / "zocrates-data" / INDEX_NAME
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    stop = threading.Event()
    seen: list[object] = []

    async def polls() -> None:  # one loop: its few worker threads each keep one read connection
        while not stop.is_set():
            seen.append(await lib.read(lambda conn: conn.execute("SELECT count(*) FROM items").fetchone()[0]))

    reader = threading.Thread(target=lambda: asyncio.run(polls()))
    reader.start()
    try:
        for _ in range(40):
            lib.reader.invalidate()
            index_module.remove_index(index)
            lib.indexer.refresh(None)
            assert not lib.indexer._rebuild, "a read during the build was taken for a damaged index"
    finally:
        stop.set()
        reader.join()
        lib.reader.close()
    assert {n for n in seen if n is not None} <= set(range(len(items) + 1)) and len(seen) > 40
