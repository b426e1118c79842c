"""Everything a user keeps, found and cited: notes, annotations (with page labels and links),
group libraries (and group scope), Chinese text, accents, full text Zotero has not processed yet;
feeds never. Built from schema-true fixtures (zocratesd/demo/zotero_dir.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from zoterofixture import rich_library

from zocratesd.demo.zotero_dir import write
from zocratesd.library.retrieval import Hit, Scope
from zocratesd.library.service import Library


@pytest.fixture(scope="module", params=[123, 129])
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Library:
    d = tmp_path_factory.mktemp(f"rich{request.param}")
    write(d, rich_library(), version=request.param)
    library = Library(d, d / "zocrates-data", local_api_url=None)
    library.indexer.refresh(None)
    return library


def search(lib: Library, query: str, scope: Scope | None = None, top_k: int = 6) -> list[Hit]:
    return asyncio.run(lib.search(query, scope or Scope(), top_k))


def test_a_child_note_is_found_and_cited_with_its_parent(lib: Library) -> None:
    top = search(lib, "axolotl regeneration blastema")[0].passage
    assert (top.item_key, top.kind, top.source_key) == ("NOTEPAR1", "note", "NOTECHL1")
    assert "blastema cells & nerves" in top.text and top.title == "Limb regrowth in amphibians"
    assert top.link == "zotero://select/library/items/NOTECHL1"


def test_a_standalone_note_is_an_item_of_its_own(lib: Library) -> None:
    top = search(lib, "quokka census")[0].passage
    assert (top.item_key, top.kind, top.source_key) == ("NOTESOL1", "note", "NOTESOL1")
    assert top.title.startswith("Quokka census") and top.collections == ("FIELDCOL",)
    assert {h.passage.item_key for h in search(lib, "quokka", Scope("collection", (), "FIELDCOL"))} == {"NOTESOL1"}


def test_an_annotation_comment_is_cited_with_its_page_label_and_link(lib: Library) -> None:
    top = search(lib, "bioluminescent plankton")[0].passage
    assert (top.item_key, top.kind, top.source_key, top.attachment_key) == ("ANNPAPER", "annotation", "ANNOTCM1", "ANNPDF01")
    assert (top.page, top.page_label) == (2, "xi")
    assert top.link == "zotero://open-pdf/library/items/ANNPDF01?page=2&annotation=ANNOTCM1"
    assert top.citation().endswith(", p. xi")


def test_a_highlight_ranks_above_the_same_words_elsewhere_in_the_paper(lib: Library) -> None:
    hits = search(lib, "transformer attention heads", Scope("papers", ("ANNPAPER",)))
    assert hits[0].passage.kind == "annotation" and hits[0].passage.source_key == "ANNOTHL1"
    assert hits[0].passage.page_label == "xii"
    # The PDF's own pages: numbered by the cache's form feeds, labelled where an annotation names the label.
    pages = {h.passage.page: h.passage.page_label for h in hits if h.passage.kind == "fulltext"}
    assert pages and set(pages) <= {1, 2, 3}
    assert pages.get(2, "xi") == "xi" and pages.get(1, "1") == "1"


def test_group_items_are_found_addressed_and_scoped(lib: Library) -> None:
    top = search(lib, "tardigrade cryptobiosis")[0].passage
    assert (top.item_key, top.library) == ("GRPPAPR1", "groups/4242")
    assert top.link == "zotero://select/groups/4242/items/GRPPAPR1"
    # A group may reuse a key of the user library: both are indexed, each in its own library.
    assert {h.passage.library for h in search(lib, "okapi stripes retrieval", Scope("papers", ("LEWIS202",)))} == {"groups/4242"}
    assert search(lib, "tardigrade", Scope(library="user")) == []
    assert [h.passage.item_key for h in search(lib, "tardigrade", Scope(library="groups/4242"))] == ["GRPPAPR1"]
    assert [h.passage.item_key for h in search(lib, "tardigrade", Scope("collection", (), "GRPCOLL1"))] == ["GRPPAPR1"]
    assert search(lib, "okapi", Scope("papers", ("LEWIS202",), library="user")) == []


def test_chinese_text_is_found(lib: Library) -> None:
    for query in ("机器学习", "神经网络的训练", "实验结果", "什么是机器学习？"):
        hits = search(lib, query)
        assert hits and hits[0].passage.item_key == "ZHPAPER1", query
    assert search(lib, "实验结果")[0].passage.page == 2
    assert search(lib, "深海鱼类") == []  # no shared bigram


@pytest.mark.parametrize("query", ["Lübeck", "Lubeck", "LUBECK salt", "muller"])
def test_accents_fold_both_ways(lib: Library, query: str) -> None:
    assert search(lib, query)[0].passage.item_key == "LUBECK01"


def test_unprocessed_full_text_is_read_until_the_cache_appears(lib: Library) -> None:
    top = search(lib, "pangolin keratin")[0].passage
    assert (top.item_key, top.attachment_key, top.kind, top.page) == ("SYNCPAPR", "SYNCPDF1", "fulltext", 1)
    assert top.link == "zotero://open-pdf/library/items/SYNCPDF1?page=1"


def test_feeds_are_never_indexed(lib: Library) -> None:
    assert search(lib, "narwhal tusk") == []


def test_status_per_library_and_kind(lib: Library) -> None:
    st = lib.status()
    assert st["state"] == "ready"
    by_lib = {row["library"]: row for row in st["libraries"]}
    assert set(by_lib) == {"user", "groups/4242"}
    assert by_lib["groups/4242"]["name"] == "Lab Group" and by_lib["groups/4242"]["items"] == 2
    assert by_lib["user"]["notes"] == 2 and by_lib["user"]["annotations"] == 2 and by_lib["user"]["texts"] == 6
    assert st["kinds"] == {"items": 10, "notes": 2, "annotations": 2, "texts": 6}
    assert st["summary"].startswith("library ready: 10 items, 6 full texts, 2 notes, 2 annotations in 2 libraries")


def test_status_counts_each_zotero_kind_apart(lib: Library) -> None:
    st = lib.status()
    # 9 regular items (7 in the user library, 2 in the group); notes NOTECHL1 (child) and NOTESOL1
    # (standalone); 2 annotations; 6 attachments, the standalone STANDPDF among them. The feed's
    # item counts nowhere.
    assert st["counts"] == {"items": 9, "notes": 2, "annotations": 2, "attachments": 6}
    # items_total counts records, the unit of items_to_index: the 9 plus the standalone note and PDF.
    assert st["items_total"] == 11


def test_counts_leave_out_the_trash(tmp_path: Path) -> None:
    import sqlite3

    lib = _fresh(tmp_path)
    conn = sqlite3.connect(tmp_path / "zotero.sqlite")
    # Trash the paper with the child note, the standalone note and the paper with the annotated PDF
    # (Zotero marks only the item itself: its children go with it).
    conn.execute("INSERT INTO deletedItems (itemID) SELECT itemID FROM items WHERE key IN ('NOTEPAR1', 'NOTESOL1', 'ANNPAPER')")
    conn.commit()
    conn.close()
    lib.indexer.refresh(None)
    st = lib.status()
    assert st["counts"] == {"items": 7, "notes": 0, "annotations": 0, "attachments": 5}
    assert st["items_total"] == 8


def _fresh(tmp_path: Path, version: int = 123) -> Library:
    write(tmp_path, rich_library(), version=version)
    library = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    library.indexer.refresh(None)
    return library


def test_the_cache_replaces_the_unprocessed_text_when_it_appears(tmp_path: Path) -> None:
    lib = _fresh(tmp_path)
    folder = tmp_path / "storage" / "SYNCPDF1"
    # Zotero processes the synced text: it writes the cache and removes the -unprocessed file.
    (folder / ".zotero-ft-cache").write_text("Pangolin scales are made of keratin.\n\n\fArmadillo shells are bone.")
    (folder / ".zotero-ft-unprocessed").unlink()
    lib.indexer.refresh(None)
    top = search(lib, "armadillo bone")[0].passage
    assert (top.item_key, top.attachment_key, top.page) == ("SYNCPAPR", "SYNCPDF1", 2)


def test_an_edited_annotation_is_reindexed(tmp_path: Path) -> None:
    import sqlite3

    lib = _fresh(tmp_path)
    conn = sqlite3.connect(tmp_path / "zotero.sqlite")
    (ann_id,) = conn.execute("SELECT itemID FROM items WHERE key = 'ANNOTCM1'").fetchone()
    # Zotero saves an annotation edit on the annotation item only, not on its paper.
    conn.execute("UPDATE itemAnnotations SET comment = 'Compare with firefly synchrony.' WHERE itemID = ?", (ann_id,))
    conn.execute("UPDATE items SET dateModified = '2025-01-01 00:00:00', clientDateModified = '2025-01-01 00:00:00' "
                 "WHERE itemID = ?", (ann_id,))
    conn.commit()
    conn.close()
    lib.indexer.refresh(None)
    assert search(lib, "bioluminescent plankton") == []
    top = search(lib, "firefly synchrony")[0].passage
    assert (top.item_key, top.source_key, top.page_label) == ("ANNPAPER", "ANNOTCM1", "xi")


def test_an_index_of_the_previous_format_is_rebuilt(tmp_path: Path) -> None:
    import sqlite3

    index = tmp_path / "zocrates-data" / "library.db"
    index.parent.mkdir(parents=True)
    old = sqlite3.connect(index)  # the tables of INDEX_SCHEMA_VERSION 1, with a stale row
    old.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('schema_version', '1');"
        "CREATE TABLE items (item_key TEXT PRIMARY KEY, signature TEXT); INSERT INTO items VALUES ('STALE001', 'x');"
        "CREATE VIRTUAL TABLE chunks_fts USING fts5 (title, body);"
    )
    old.close()
    lib = _fresh(tmp_path)
    assert lib.status()["state"] == "ready" and lib.status()["kinds"]["items"] == 10
    assert search(lib, "quokka")[0].passage.item_key == "NOTESOL1"


def test_prompt_context_carries_a_library_scope() -> None:
    from zocratesd.core.context import PromptContext
    from zocratesd.errors import InvalidInput

    ctx = PromptContext.build(library="groups/4242")
    assert ctx.scope().library == "groups/4242" and ctx.state_delta()["active_library"] == "groups/4242"
    assert PromptContext.build().state_delta()["active_library"] is None
    for bad in ("groups/", "groups/abc", "group/1", "feeds/3", 7):
        with pytest.raises(InvalidInput, match="library must be"):
            PromptContext.build(library=bad)  # type: ignore[arg-type]


def test_a_group_items_link_scopes_the_prompt_to_that_group() -> None:
    from zocratesd.rpc.agent import prompt_input

    def ctx(*uris: str, meta: dict[str, object] | None = None) -> tuple[str | None, tuple[str, ...]]:
        blocks = [{"type": "text", "text": "q"}] + [{"type": "resource_link", "uri": u, "name": "n"} for u in uris]
        _, c = prompt_input(blocks, {"zocrates": meta or {}})
        return c.library, tuple(k for k, _ in c.items)

    assert ctx("zotero://select/groups/4242/items/GRPPAPR1") == ("groups/4242", ("GRPPAPR1",))
    assert ctx("zotero://select/library/items/LEWIS202") == (None, ("LEWIS202",))  # the user's: every library, as before
    # Links from two libraries, or an explicit library, leave the choice to the client.
    assert ctx("zotero://select/groups/4242/items/GRPPAPR1", "zotero://select/library/items/LEWIS202")[0] is None
    assert ctx("zotero://select/groups/4242/items/GRPPAPR1", meta={"library": "user"})[0] == "user"


def test_standalone_pdfs_web_snapshots_and_linked_files(lib: Library) -> None:
    top = search(lib, "manatee seagrass")[0].passage
    assert (top.item_key, top.attachment_key, top.title) == ("STANDPDF", "STANDPDF", "scan-0042.pdf")
    top = search(lib, "coral spawning full moon")[0].passage
    assert (top.item_key, top.attachment_key, top.page) == ("WEBPAGE1", "WEBSNAP1", None)  # HTML text has no pages
    assert top.link == "zotero://open-pdf/library/items/WEBSNAP1"
    top = search(lib, "lichen symbiosis")[0].passage
    assert (top.item_key, top.attachment_key, top.page) == ("LINKED01", "LINKPDF1", 1)


def test_cjk_queries_are_routed_to_bigrams() -> None:
    from zocratesd.library.index import cjk_bigrams, cjk_expression, match_expression

    assert cjk_bigrams("机器学习") == "机器 器学 学习"
    assert cjk_bigrams("東京の大学 and 한국어 문장") == "東京 京の の大 大学 한국 국어 문장"
    assert cjk_expression("学") == '"学"*'  # a lone character: any bigram that starts with it
    assert cjk_expression("BERT 模型") == '"模型"' and match_expression("BERT 模型") == '"bert"'
    assert cjk_expression("plain English") is None
