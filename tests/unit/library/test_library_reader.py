"""Reading zotero.sqlite: every schema version, the trash, nested collections, bad databases,
and Zotero's exclusive lock (a second process holds it) with the user's files left byte-identical."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from zoterofixture import FixtureItem, build_zotero_dir, sample_library

from zocratesd.library.zotero_db import SNAPSHOT_PREFIX, ZoteroDbError, open_zotero, read_library


def read(data_dir: Path):  # type: ignore[no-untyped-def]
    """The library's snapshot with every record read (they are read while the connection is open)."""
    with open_zotero(data_dir, data_dir / "zocrates-data") as (conn, how):
        snap = read_library(conn, data_dir, how)
        snap.items = list(snap.items)
        return snap


@pytest.fixture(params=[123, 125, 129])
def lib_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    items, colls = sample_library()
    build_zotero_dir(tmp_path, items, colls, version=request.param)
    return tmp_path


def test_reads_items_metadata_collections_and_attachments(lib_dir: Path) -> None:
    before = {p.name: digest(p) for p in lib_dir.iterdir() if p.is_file()}
    snap = read(lib_dir)
    assert {p.name: digest(p) for p in lib_dir.iterdir() if p.is_file()} == before  # no -wal, -shm or -journal appeared
    by_key = {i.key: i for i in snap.items}
    assert set(by_key) == {"LEWIS202", "KARPDPR1", "GAOHYDE1", "BEEKEEP1", "ROEWADE1", "ORPHANED"}  # TRASHED1 is in the trash
    lewis = by_key["LEWIS202"]
    assert lewis.title.startswith("Retrieval-Augmented Generation")
    assert lewis.creators == ("Patrick Lewis", "Ethan Perez") and lewis.year == 2020
    assert lewis.doi == "10.48550/arXiv.2005.11401" and lewis.url == "https://arxiv.org/abs/2005.11401"
    assert lewis.tags == ("rag", "nlp") and lewis.item_type == "journalArticle"
    assert lewis.abstract.startswith("Large pre-trained") and [a.key for a in lewis.attachments] == ["LEWISPDF"]
    assert lewis.attachments[0].cache_stamp  # the cache file exists
    assert by_key["GAOHYDE1"].year == 2022 and by_key["GAOHYDE1"].collections == ("HYDECOL2",)  # TRASHCOL is trashed
    assert by_key["BEEKEEP1"].creators == ("Apiary Research Council",)  # a single-field name
    assert by_key["ROEWADE1"].title == "Roe v. Wade" and by_key["ROEWADE1"].year == 1973  # caseName/dateDecided -> base fields
    assert by_key["ORPHANED"].attachments == ()  # its PDF is in the trash
    colls = {c.key: c.parent_key for c in snap.collections}
    assert colls == {"RAG0COLL": None, "DENSE0CO": "RAG0COLL", "HYDECOL2": "DENSE0CO", "MISCCOLL": None}
    assert snap.schema_version in (123, 125, 129) and not snap.warnings
    assert snap.source == ("snapshot" if snap.schema_version == 129 else "sqlite")
    assert not list((lib_dir / "zocrates-data").glob(SNAPSHOT_PREFIX + "*"))


def _set_version(db: Path, version: object) -> None:
    conn = sqlite3.connect(db)
    conn.execute("UPDATE version SET version = ? WHERE schema = 'userdata'", (version,))
    conn.commit()
    conn.close()


def test_schema_versions_old_unknown_and_newer(tmp_path: Path) -> None:
    items, colls = sample_library()
    db = build_zotero_dir(tmp_path, items, colls, version=123)
    _set_version(db, 110)
    with pytest.raises(ZoteroDbError, match="older than Zotero 7"):
        read(tmp_path)
    _set_version(db, 131)
    snap = read(tmp_path)
    assert len(snap.items) == 6 and "newer than this zocratesd knows" in snap.warnings[0]
    _set_version(db, "x")
    with pytest.raises(ZoteroDbError, match="no usable userdata schema"):
        read(tmp_path)


def test_not_a_zotero_database(tmp_path: Path) -> None:
    with pytest.raises(ZoteroDbError, match="no zotero.sqlite"):
        read(tmp_path)
    (tmp_path / "zotero.sqlite").write_bytes(b"this is not sqlite at all" * 10)
    with pytest.raises(ZoteroDbError, match="not an SQLite database"):
        read(tmp_path)
    (tmp_path / "zotero.sqlite").unlink()
    conn = sqlite3.connect(tmp_path / "zotero.sqlite")
    conn.execute("CREATE TABLE unrelated (x)")
    conn.commit()
    conn.close()
    with pytest.raises(ZoteroDbError, match="no version table"):
        read(tmp_path)


def test_missing_table_is_named(tmp_path: Path) -> None:
    items, colls = sample_library()
    db = build_zotero_dir(tmp_path, items, colls, version=125)
    conn = sqlite3.connect(db)
    conn.execute("DROP TABLE itemAttachments")
    conn.commit()
    conn.close()
    with pytest.raises(ZoteroDbError, match="lacks table itemAttachments"):
        read(tmp_path)


def test_hostile_keys_in_the_database_are_skipped(tmp_path: Path) -> None:
    db = build_zotero_dir(tmp_path, [FixtureItem("GOODKEY1", "Fine")], version=123)
    conn = sqlite3.connect(db)
    conn.execute("INSERT INTO items (itemTypeID, libraryID, key) VALUES (4, 1, '../../etc')")
    conn.execute("INSERT INTO collections (collectionName, libraryID, key) VALUES ('x', 1, 'a/../b')")
    conn.commit()
    conn.close()
    snap = read(tmp_path)
    assert [i.key for i in snap.items] == ["GOODKEY1"] and snap.collections == []


# --- Zotero's exclusive lock -----------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("PRAGMA locking_mode=EXCLUSIVE")
    if sys.argv[2] == "wal":
        db.execute("PRAGMA journal_mode=WAL")
        # Zotero 10: committed writes that live only in the -wal until a checkpoint.
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("UPDATE itemDataValues SET value = 'Dense Passage Retrieval, revised' WHERE value LIKE 'Dense Passage%'")
    db.execute("BEGIN EXCLUSIVE")
    db.execute("INSERT INTO settings VALUES ('zq', 'held', 1)")
    print("held", flush=True)
    sys.stdin.readline()
    db.execute("ROLLBACK")
    """
)


def digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture
def holder() -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def hold(db: Path, mode: str) -> None:
        p = subprocess.Popen([sys.executable, "-c", HOLDER, str(db), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert p.stdout is not None and p.stdout.readline().strip() == "held"

    yield hold
    for p in procs:
        p.communicate("\n", timeout=10)


@pytest.mark.parametrize("version,mode", [(123, "rollback"), (129, "wal")])
def test_exclusive_lock_reads_a_snapshot_and_leaves_the_database_alone(tmp_path: Path, holder, version: int, mode: str) -> None:  # type: ignore[no-untyped-def]
    items, colls = sample_library()
    db = build_zotero_dir(tmp_path, items, colls, version=version)
    holder(db, mode)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1).execute("SELECT 1 FROM items").fetchone()
    files = [db, Path(f"{db}-wal"), Path(f"{db}-journal"), Path(f"{db}-shm")]
    before = {f.name: digest(f) for f in files}
    snap = read(tmp_path)
    assert snap.source == "snapshot" and len(snap.items) == 6
    titles = {i.key: i.title for i in snap.items}
    if mode == "wal":  # the snapshot replays what Zotero committed to the -wal
        assert titles["KARPDPR1"] == "Dense Passage Retrieval, revised"
    assert {f.name: digest(f) for f in files} == before
    assert not list((tmp_path / "zocrates-data").glob(SNAPSHOT_PREFIX + "*"))
