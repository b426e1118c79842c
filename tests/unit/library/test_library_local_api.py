"""The local-API path against a real HTTP server on 127.0.0.1 that answers as Zotero's does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_zotero_api import FakeZoteroApi
from zoterofixture import build_zotero_dir, sample_library

from zocratesd.config import ConfigError, load_config
from zocratesd.engine.retrieval import Scope
from zocratesd.library import Library
from zocratesd.library.local_api import LocalApi, check_loopback


@pytest.fixture
def api() -> Iterator[FakeZoteroApi]:
    items, colls = sample_library()
    server = FakeZoteroApi(items, colls)
    yield server
    server.close()


def test_reads_the_library_through_the_local_api(tmp_path: Path, api: FakeZoteroApi) -> None:
    client = LocalApi(api.base_url, tmp_path)
    try:
        assert client.probe() and client.schema_version == 31
        snap = client.read()
    finally:
        client.close()
    by_key = {i.key: i for i in snap.items}
    assert set(by_key) == {"LEWIS202", "KARPDPR1", "GAOHYDE1", "BEEKEEP1", "ROEWADE1", "ORPHANED"}
    assert by_key["GAOHYDE1"].collections == ("HYDECOL2",) and by_key["GAOHYDE1"].year == 2022
    assert by_key["ROEWADE1"].title == "Roe v. Wade" and by_key["BEEKEEP1"].creators == ("Apiary Research Council",)
    assert [a.key for a in by_key["LEWIS202"].attachments] == ["LEWISPDF"] and by_key["ORPHANED"].attachments == ()
    assert {c.key for c in snap.collections} == {"RAG0COLL", "DENSE0CO", "HYDECOL2", "MISCCOLL"}
    # 25 objects per page by default on the server; we asked for 100 and paged to the end
    assert any("limit=100" in r for r in api.requests)


def test_indexer_prefers_the_local_api_and_gets_text_from_fulltext(tmp_path: Path, api: FakeZoteroApi) -> None:
    # No zotero.sqlite and no cache files on disk: everything comes over HTTP.
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=api.base_url, poll_interval_s=0.05)
    lib.start()
    try:
        for _ in range(500):
            if lib.status()["state"] == "ready":
                break
            asyncio.run(asyncio.sleep(0.01))
        st = lib.status()
        assert st["state"] == "ready" and st["source"] == "local_api" and st["attachments_with_text"] == 3
        hits = asyncio.run(lib.search("What does HyDE do?", Scope("collection", (), "RAG0COLL")))
        assert hits[0].passage.item_key == "GAOHYDE1" and hits[0].passage.page == 2
        assert any(r.endswith("/GAOHPDF1/fulltext") for r in api.requests)
        # An edit in Zotero bumps Last-Modified-Version; the next poll re-indexes the changed item.
        items, colls = sample_library()
        items[3].title = "Honeybees and quokkas"
        items[3].date_modified = "2025-01-01 00:00:00"
        api.set_library(items, colls)
        for _ in range(500):
            if lib.status()["refreshes"] >= 2:
                break
            asyncio.run(asyncio.sleep(0.01))
        assert lib.status()["items_to_index"] == 1
        assert [h.passage.item_key for h in asyncio.run(lib.search("quokkas", Scope()))] == ["BEEKEEP1"]
    finally:
        asyncio.run(lib.aclose())


def test_a_disabled_local_api_falls_back_to_the_database(tmp_path: Path, api: FakeZoteroApi) -> None:
    items, colls = sample_library()
    build_zotero_dir(tmp_path, items, colls, version=125)
    api.enabled = False  # 403 Local API is not enabled
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=api.base_url)
    api_client = LocalApi(api.base_url, tmp_path)
    try:
        assert not api_client.probe()
        lib.indexer._maybe_refresh(api_client)  # what the indexer thread does at each poll
    finally:
        api_client.close()
    assert lib.status()["source"] == "sqlite" and lib.status()["items_indexed"] == 6


def test_nothing_listening_is_not_an_error(tmp_path: Path) -> None:
    client = LocalApi("http://127.0.0.1:9", tmp_path)  # the discard port: nothing answers HTTP there
    try:
        assert client.probe() is False
    finally:
        client.close()


@pytest.mark.parametrize("url", ["https://api.zotero.org", "http://example.com:23119", "file:///etc/passwd", "http://10.0.0.1:23119"])
def test_the_local_api_must_be_loopback(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        check_loopback(url)
    (tmp_path / "zocrates-data").mkdir()
    (tmp_path / "zocrates-data" / "zocrates_config.json").write_text('{"library": {"local_api_url": "%s"}}' % url)
    with pytest.raises(ConfigError, match="library.local_api_url"):
        load_config(tmp_path)
