"""The fixture writer speaks Zotero's real schema: its facts match Zotero's schema.json files, its
databases have Zotero's tables, ids, triggers and version rows, and its storage files are shaped
as Zotero writes them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from zocratesd import zotero_schema as schema
from zocratesd.demo import zotero_dir as w

# Zotero's schema.json of three releases, kept outside the repository (read in place, never copied).
SCHEMA_DIR = Path(__file__).resolve().parents[4] / "shared" / "data" / "zotero-schema"
RELEASES = ("7.0.32", "9.0.6", "10.0.0")


def _facts_from(schema: dict[str, Any]) -> tuple[list[str], list[str], list[str], dict[str, list[str]], dict[str, list[str]], set[tuple[str, str, str]]]:
    """Item types, then fields and creator types in the order Zotero numbers them
    (Zotero.Schema._updateGlobalSchema: each field, then its base field, as first met)."""
    types: list[str] = []
    fields: list[str] = []
    creator_types: list[str] = []
    per_type_fields: dict[str, list[str]] = {}
    per_type_creators: dict[str, list[str]] = {}
    mappings: set[tuple[str, str, str]] = set()
    for t in schema["itemTypes"]:
        types.append(t["itemType"])
        per_type_fields[t["itemType"]] = [f["field"] for f in t["fields"]]
        per_type_creators[t["itemType"]] = [c["creatorType"] for c in t["creatorTypes"]]
        for f in t["fields"]:
            for name in (f["field"], f.get("baseField")):
                if name and name not in fields:
                    fields.append(name)
            if f.get("baseField"):
                mappings.add((t["itemType"], f["baseField"], f["field"]))
        for c in t["creatorTypes"]:
            if c["creatorType"] not in creator_types:
                creator_types.append(c["creatorType"])
    return types, fields, creator_types, per_type_fields, per_type_creators, mappings


@pytest.mark.parametrize("release", RELEASES)
def test_embedded_facts_match_zoteros_schema_json(release: str) -> None:
    path = SCHEMA_DIR / release / "schema.json"
    assert path.is_file(), f"Zotero's schema file is missing: {path}"
    types, fields, creator_types, per_type_fields, per_type_creators, mappings = _facts_from(json.loads(path.read_text()))
    assert list(schema.ITEM_TYPES) == types and len(types) == 40
    assert list(schema.FIELDS) == fields
    assert list(schema.CREATOR_TYPES) == creator_types
    assert {k: list(v) for k, v in schema.TYPE_FIELDS.items()} == per_type_fields
    assert {k: list(v) for k, v in schema.TYPE_CREATOR_TYPES.items()} == per_type_creators
    assert {(t, b, f) for b, pairs in schema.BASE_FIELDS.items() for t, f in pairs} == mappings
    # The ids a new database gives: what a reader must look up by name rather than assume.
    assert schema.CREATOR_TYPE_IDS["author"] == 10 and schema.FIELD_IDS["title"] == 1 and schema.ITEM_TYPE_IDS["journalArticle"] == 22


def _small() -> w.Library:
    return w.Library(
        items=[w.Item("PAPER001", "A paper", creators=[("Ann", "Author"), w.Creator("Editor", "Ed", creator_type="editor")],
                      date="March 2017", fields={"abstractNote": "An abstract."}, collections=["COLL0001"],
                      attachments=[w.Attachment("PDF00001", pages=["One.", "", "Three."],
                                                annotations=[w.Annotation("ANNOT001", text="One", comment="why", page_label="ii")])],
                      notes=[w.Note("NOTE0001", "Child note")]),
               w.Item("CASE0001", "Roe v. Wade", item_type="case", date="January 22, 1973")],
        collections=[w.Collection("COLL0001", "Papers")],
        attachments=[w.Attachment("SYNCED01", pages=["Synced text."], unprocessed=True)],
        groups=[w.Group(777, "Lab", items=[w.Item("PAPER001", "Same key, other library")])],
        feeds=[w.Feed("News", "https://example.org/feed", items=[w.Item("FEEDITEM", "A feed item")])],
    )


@pytest.mark.parametrize("version", w.VERSIONS)
def test_database_has_zoteros_tables_ids_triggers_and_versions(tmp_path: Path, version: int) -> None:
    db = w.write(tmp_path, _small(), version=version)
    conn = sqlite3.connect(db)
    kinds = dict(conn.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')"))
    for combined in ("itemTypesCombined", "fieldsCombined", "itemTypeFieldsCombined", "baseFieldMappingsCombined"):
        assert kinds[combined] == "table"
    assert "view" not in kinds.values()
    assert ("fulltextWords" in kinds) == (version < w.ZOTERO_10)
    triggers = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert {"insert_creators", "fki_collectionItems_itemID_parentItemID", "fki_tags", "fki_collectionItems_libraryID"} <= triggers
    versions = dict(conn.execute("SELECT schema, version FROM version"))
    assert versions["system"] == 32 and versions["userdata"] == version and versions["triggers"] == 18
    cols = {r[1] for r in conn.execute("PRAGMA table_info(items)")}
    assert ("clientVersion" in cols) == (version >= w.ZOTERO_10)
    assert ("lastRead" in {r[1] for r in conn.execute("PRAGMA table_info(itemAttachments)")}) == (version >= w.ZOTERO_9)
    # Creator types by schema.json order: author is 10, editor 12, as in a database Zotero creates.
    rows = conn.execute("SELECT ct.creatorType, ic.creatorTypeID FROM itemCreators ic JOIN creatorTypes ct USING (creatorTypeID)").fetchall()
    assert sorted(rows) == [("author", 10), ("editor", 12)]
    # Dates as Zotero stores them; a case's title and date in its own fields.
    values = {r[0] for r in conn.execute("SELECT value FROM itemDataValues")}
    assert {"2017-03-00 March 2017", "1973-01-22 January 22, 1973"} <= values
    (case_fields,) = conn.execute(
        "SELECT group_concat(f.fieldName) FROM items i JOIN itemData d USING (itemID) JOIN fieldsCombined f USING (fieldID) "
        "WHERE i.key = 'CASE0001'").fetchone()
    assert set(case_fields.split(",")) == {"caseName", "dateDecided"}
    libs = conn.execute("SELECT libraryID, type FROM libraries ORDER BY libraryID").fetchall()
    assert libs == [(1, "user"), (2, "group"), (3, "feed")]
    assert conn.execute("SELECT groupID, libraryID FROM groups").fetchall() == [(777, 2)]
    assert conn.execute("SELECT count(*) FROM items WHERE key = 'PAPER001'").fetchone()[0] == 2
    note = conn.execute("SELECT note, title, parentItemID IS NOT NULL FROM itemNotes").fetchone()
    assert note == ('<div data-schema-version="9"><p>Child note</p></div>', "Child note", 1)
    ann = conn.execute("SELECT type, text, comment, pageLabel, position FROM itemAnnotations").fetchone()
    assert ann[:4] == (1, "One", "why", "ii") and json.loads(ann[4])["pageIndex"] == 0
    assert conn.execute("SELECT fi.synced FROM fulltextItems fi JOIN items i USING (itemID) WHERE i.key = 'SYNCED01'").fetchone() == (2,)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()
    assert (db.read_bytes()[18] == 2) == (version >= w.ZOTERO_10)  # WAL header in Zotero 10


def test_triggers_enforce_zoteros_rules(tmp_path: Path) -> None:
    conn = sqlite3.connect(w.write(tmp_path, _small()))
    (note_id,) = conn.execute("SELECT itemID FROM itemNotes").fetchone()
    with pytest.raises(sqlite3.IntegrityError, match="fki_collectionItems_itemID_parentItemID"):
        conn.execute("INSERT INTO collectionItems VALUES (1, ?, 5)", (note_id,))
    with pytest.raises(sqlite3.IntegrityError, match="Creator names cannot be empty"):
        conn.execute("INSERT INTO creators (firstName, lastName, fieldMode) VALUES ('', '', 0)")
    with pytest.raises(sqlite3.IntegrityError, match="Tag cannot be blank"):
        conn.execute("INSERT INTO tags (name) VALUES ('  ')")
    conn.close()


def test_storage_files_are_shaped_as_zotero_writes_them(tmp_path: Path) -> None:
    w.write(tmp_path, _small())
    cache = (tmp_path / "storage" / "PDF00001" / ".zotero-ft-cache").read_text()
    # pdf-worker getFulltext: each page + "\n\n", "\f" between pages, trimmed; an empty page keeps its place.
    assert cache == "One.\n\n\f\n\n\fThree."
    synced = json.loads((tmp_path / "storage" / "SYNCED01" / ".zotero-ft-unprocessed").read_text())
    assert synced["text"] == "Synced text." and synced["totalPages"] == 1
    assert not (tmp_path / "storage" / "SYNCED01" / ".zotero-ft-cache").exists()


def test_refuses_an_existing_database_and_impossible_items(tmp_path: Path) -> None:
    w.write(tmp_path / "a", _small())
    before = (tmp_path / "a" / "zotero.sqlite").read_bytes()
    with pytest.raises(FileExistsError):
        w.write(tmp_path / "a", _small())
    assert (tmp_path / "a" / "zotero.sqlite").read_bytes() == before
    with pytest.raises(w.WriterError, match="no field 'caseName'"):
        w.write(tmp_path / "b", w.Library(items=[w.Item("PAPER001", "x", fields={"caseName": "y"})]))
    assert not (tmp_path / "b" / "zotero.sqlite").exists()
    with pytest.raises(w.WriterError, match="cannot be in a collection"):
        w.write(tmp_path / "c", w.Library(items=[w.Item("PAPER001", "x", notes=[w.Note("NOTE0001", "n", collections=["COLL0001"])])],
                                          collections=[w.Collection("COLL0001", "c")]))


@pytest.mark.parametrize(("typed", "stored"), [
    ("2020", "2020-00-00 2020"), ("March 2017", "2017-03-00 March 2017"), ("2020-11-01", "2020-11-01 2020-11-01"),
    ("December 2022", "2022-12-00 December 2022"), ("5 May 1999", "1999-05-05 5 May 1999"), ("n.d.", "0000-00-00 n.d."),
])
def test_multipart_dates(typed: str, stored: str) -> None:
    assert w.multipart_date(typed) == stored


def test_the_fixtures_catch_a_reader_that_assumes_author_is_creator_type_1(tmp_path: Path) -> None:
    """The old fixtures numbered author 1, so a reader keeping only creatorTypeID = 1 passed every
    test; in a database Zotero creates (and ours), 1 is `artist` and no author has it."""
    from zoterofixture import build_zotero_dir, sample_library

    from zocratesd.library.zotero_db import open_zotero, read_library

    items, colls = sample_library()
    db = build_zotero_dir(tmp_path, items, colls)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT creatorType FROM creatorTypes WHERE creatorTypeID = 1").fetchone() == ("artist",)
    assert conn.execute("SELECT count(*) FROM itemCreators WHERE creatorTypeID = 1").fetchone() == (0,)
    conn.close()
    with open_zotero(tmp_path, tmp_path / "zocrates-data") as (zconn, how):
        lewis = {i.key: i for i in read_library(zconn, tmp_path, how).items}["LEWIS202"]
    assert lewis.creators == ("Patrick Lewis", "Ethan Perez")  # what test_library_reader asserts too
