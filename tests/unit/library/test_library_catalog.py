"""library/catalog.py: the library as a catalogue (items with their children, collections, tags,
recent items), read from an index built from schema-true Zotero data (demo/zotero_dir.py), both a
Zotero 7 and a Zotero 10 database; and what the local API's items become."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from zoterofixture import Attachment, Collection, Item, Library, Note, rich_library

from zocratesd.demo.zotero_dir import write
from zocratesd.library import catalog
from zocratesd.library.service import Library as LibraryIndex

T = TypeVar("T")


def library() -> Library:
    rich = rich_library()
    extra = [
        Item("RAGPAPR1", "Retrieval-augmented generation", creators=[("Patrick", "Lewis")], date="2020", tags=["rag", "nlp"],
             collections=["SUBCOL01"], date_added="2025-03-01 09:00:00", date_modified="2025-05-01 09:00:00",
             fields={"abstractNote": "A retriever and a generator.", "DOI": "10.1000/rag"},
             notes=[Note("LONGNOTE", "word " * 30_000)],
             attachments=[Attachment("RAGPDF01", pages=[f"Page {n} text about retrieval. " * 200 for n in range(1, 9)])]),
        Item("HYDEPAPR", "Hypothetical document embeddings", creators=[("Luyu", "Gao")], date="2022", tags=["rag"],
             collections=["SUBCOL01"], date_added="2025-04-01 09:00:00"),
    ]
    return Library(items=[*rich.items, *extra], attachments=rich.attachments, notes=rich.notes, groups=rich.groups,
                   feeds=rich.feeds, collections=[*rich.collections, Collection("SUBCOL01", "Retrieval", parent="FIELDCOL"),
                                                  Collection("SUBSUB01", "Dense", parent="SUBCOL01")])


@pytest.fixture(scope="module", params=[123, 129])
def index(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> LibraryIndex:
    d = tmp_path_factory.mktemp(f"cat{request.param}")
    write(d, library(), version=request.param)
    lib = LibraryIndex(d, d / "zocrates-data", local_api_url=None)
    lib.indexer.refresh(None)
    return lib


def read(lib: LibraryIndex, fn: Callable[[sqlite3.Connection], T]) -> T:
    found = asyncio.run(lib.read(fn))
    assert found is not None
    return found


def item(lib: LibraryIndex, key: str, library: str | None = None, **kw: Any) -> dict[str, Any] | None:
    def get(conn: sqlite3.Connection) -> dict[str, Any] | None:
        uid = catalog.find_uid(conn, key, library)
        return None if uid is None else catalog.get_item(conn, uid, **kw)

    return asyncio.run(lib.read(get))


def test_an_item_has_its_metadata_notes_annotations_and_attachments(index: LibraryIndex) -> None:
    paper = item(index, "ANNPAPER")
    assert paper is not None
    assert (paper["title"], paper["creators"], paper["year"], paper["library"]) == ("Interpreting language models", ["Kim Lee"], 2021, "user")
    assert paper["date_added"] == "2023-06-01 10:00:00" and paper["link"] == "zotero://select/library/items/ANNPAPER"
    highlight = next(a for a in paper["annotations"] if a["key"] == "ANNOTHL1")
    assert highlight == {
        "key": "ANNOTHL1", "attachment_key": "ANNPDF01", "type": "highlight",
        "text": "The transformer attention heads specialise in syntax.", "comment": "", "color": "#ffd400",
        "page_label": "xii", "page": 3, "tags": ["key-finding"],
        "link": "zotero://open-pdf/library/items/ANNPDF01?page=3&annotation=ANNOTHL1",
    }
    assert paper["attachments"] == [{"key": "ANNPDF01", "content_type": "application/pdf", "link_mode": 0, "has_text": True,
                                     "indexed_pages": 3, "total_pages": 3, "link": "zotero://open-pdf/library/items/ANNPDF01"}]
    assert paper["fulltext_chunks"] == 3 and "fulltext" not in paper
    noted = item(index, "NOTEPAR1")
    assert noted is not None and [n["key"] for n in noted["notes"]] == ["NOTECHL1"]
    assert "axolotl regeneration" in noted["notes"][0]["text"] and noted["notes"][0]["link"] == "zotero://select/library/items/NOTECHL1"
    assert noted["collections"] == [{"key": "FIELDCOL", "name": "Field notes"}]
    rag = item(index, "RAGPAPR1")
    assert rag is not None and rag["doi"] == "10.1000/rag" and rag["abstract"] == "A retriever and a generator."
    assert rag["date_modified"] == "2025-05-01 09:00:00"
    # A note too long to store whole is cut (its full text stays searchable in the index's chunks).
    assert rag["notes"][0]["truncated"] and len(rag["notes"][0]["text"]) == catalog.MAX_NOTE_CHARS


def test_full_text_comes_a_page_of_chunks_at_a_time(index: LibraryIndex) -> None:
    first = item(index, "RAGPAPR1", fulltext=True)
    assert first is not None
    page = first["fulltext"]
    total = first["fulltext_chunks"]
    assert page["offset"] == 0 and page["total_chunks"] == total and total > len(page["chunks"]) >= 1
    assert sum(len(c["text"]) for c in page["chunks"]) <= catalog.FULLTEXT_PAGE_CHARS
    seen = list(page["chunks"])
    while page["next_offset"] is not None:
        nxt = item(index, "RAGPAPR1", fulltext=True, fulltext_offset=page["next_offset"])
        assert nxt is not None
        page = nxt["fulltext"]
        seen += page["chunks"]
    assert len(seen) == total and [c["page"] for c in seen] == sorted(c["page"] for c in seen)
    assert seen[0]["link"] == "zotero://open-pdf/library/items/RAGPDF01?page=1"
    past = item(index, "RAGPAPR1", fulltext=True, fulltext_offset=total + 5)
    assert past is not None and past["fulltext"]["chunks"] == [] and past["fulltext"]["next_offset"] is None


def test_a_key_is_looked_up_in_the_user_library_first_then_the_groups(index: LibraryIndex) -> None:
    mine = item(index, "GRPPAPR1")
    assert mine is not None and mine["library"] == "groups/4242"  # only the group has it
    assert mine["link"] == "zotero://select/groups/4242/items/GRPPAPR1"
    assert item(index, "GRPPAPR1", "user") is None
    shared = item(index, "LEWIS202", "groups/4242")
    assert shared is not None and "okapi" in shared["abstract"]
    assert item(index, "NOPE0000") is None and item(index, "../../x") is None


def test_collections_have_paths_and_counts_with_their_subcollections(index: LibraryIndex) -> None:
    cols = {c["key"]: c for c in read(index, lambda conn: catalog.collections(conn))}
    assert cols["SUBSUB01"]["path"] == "Field notes / Retrieval / Dense" and cols["SUBSUB01"]["items"] == 0
    assert (cols["SUBCOL01"]["items"], cols["SUBCOL01"]["items_with_subcollections"]) == (2, 2)
    assert (cols["FIELDCOL"]["items"], cols["FIELDCOL"]["items_with_subcollections"]) == (2, 4)
    assert cols["GRPCOLL1"]["library"] == "groups/4242" and cols["GRPCOLL1"]["library_name"] == "Lab Group"
    assert [c["key"] for c in read(index, lambda conn: catalog.collections(conn, "groups/4242"))] == ["GRPCOLL1"]


def test_tags_by_use_paged_and_filtered(index: LibraryIndex) -> None:
    tags = read(index, lambda conn: catalog.tags(conn))
    assert tags["tags"] == [{"tag": "rag", "items": 2}, {"tag": "nlp", "items": 1}] and tags["total"] == 2
    page = read(index, lambda conn: catalog.tags(conn, limit=1, offset=1))
    assert page["tags"] == [{"tag": "nlp", "items": 1}] and page["next_offset"] is None
    assert read(index, lambda conn: catalog.tags(conn, limit=1))["next_offset"] == 1
    assert read(index, lambda conn: catalog.tags(conn, contains="AG"))["tags"] == [{"tag": "rag", "items": 2}]
    assert read(index, lambda conn: catalog.tags(conn, "groups/4242"))["total"] == 0


def test_items_newest_first_by_date_added_or_modified(index: LibraryIndex) -> None:
    added = read(index, lambda conn: catalog.items(conn, limit=2))
    assert [i["item_key"] for i in added["items"]] == ["HYDEPAPR", "RAGPAPR1"] and added["next_offset"] == 2
    assert added["total"] == 13  # every item of every library: regular items, standalone notes and attachments
    assert read(index, lambda conn: catalog.items(conn, order="modified", limit=1))["items"][0]["item_key"] == "RAGPAPR1"
    group = read(index, lambda conn: catalog.items(conn, "groups/4242"))
    assert {i["item_key"] for i in group["items"]} == {"GRPPAPR1", "LEWIS202"} and group["next_offset"] is None


def test_the_local_apis_dates_are_stored_as_zotero_stores_them() -> None:
    from zocratesd.library.local_api import _sql_date

    assert _sql_date("2023-06-01T10:00:00Z") == "2023-06-01 10:00:00"
    assert _sql_date("2023-06-01 10:00:00") == "2023-06-01 10:00:00"
    assert _sql_date(None) == "" and _sql_date("yesterday") == "" and _sql_date(17) == ""


def test_a_missing_index_reads_as_none(tmp_path: Path) -> None:
    lib = LibraryIndex(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    assert asyncio.run(lib.read(lambda conn: catalog.collections(conn))) is None
