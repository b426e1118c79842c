"""`.zotero-ft-cache` files: pages, chunks, and malformed or hostile files that must not crash or block."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from zoterofixture import FixtureAttachment, FixtureItem, build_zotero_dir

from zocratesd.library.fulltext import CHUNK_CHARS, MAX_CACHE_BYTES, cache_path, chunks, pages, read_cache
from zocratesd.library.service import Library


def write_cache(data_dir: Path, key: str, data: bytes) -> Path:
    folder = data_dir / "storage" / key
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / ".zotero-ft-cache"
    p.write_bytes(data)
    return p


def test_pages_follow_form_feeds() -> None:
    assert pages("no markers here") == [(None, "no markers here")]
    assert pages("one\ftwo\f\fthree") == [(1, "one"), (2, "two"), (4, "three")]  # an empty page keeps its number


def test_chunks_stay_within_pages_and_size() -> None:
    sentence = "Dense retrieval encodes passages with a BERT encoder. "
    text = sentence * 60 + "\f" + "Short page two."
    out = chunks(text)
    assert {p for p, _ in out} == {1, 2}
    assert all(len(c) <= CHUNK_CHARS for _, c in out)
    assert out[-1] == (2, "Short page two.")
    giant = "x" * (CHUNK_CHARS * 3 + 5)  # no spaces, no sentence ends
    assert "".join(c.replace(" ", "") for _, c in chunks(giant)) == giant


def test_malformed_caches_give_nothing_or_cleaned_text(tmp_path: Path) -> None:
    write_cache(tmp_path, "BINARY01", bytes(range(256)) * 50)
    assert read_cache(tmp_path, "BINARY01") is None
    write_cache(tmp_path, "LATIN001", "café résumé naïve".encode("latin-1"))
    assert read_cache(tmp_path, "LATIN001") is not None  # not UTF-8: replaced characters, still text
    write_cache(tmp_path, "EMPTY001", b"  \n ")
    assert read_cache(tmp_path, "EMPTY001") is None
    write_cache(tmp_path, "NULS0001", b"text with a \x00 nul and \x1b escape")
    assert read_cache(tmp_path, "NULS0001") == "text with a   nul and   escape"
    write_cache(tmp_path, "HUGE0001", b"word " * (MAX_CACHE_BYTES // 5 + 1000))
    assert len(read_cache(tmp_path, "HUGE0001") or "") == MAX_CACHE_BYTES
    (tmp_path / "storage" / "ADIR0001" / ".zotero-ft-cache").mkdir(parents=True)
    assert read_cache(tmp_path, "ADIR0001") is None
    assert read_cache(tmp_path, "MISSING1") is None


def test_hostile_keys_and_symlinks_out_of_storage(tmp_path: Path) -> None:
    assert cache_path(tmp_path, "../../etc") is None and read_cache(tmp_path, "../x") is None
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's private notes")
    folder = tmp_path / "storage" / "LINKOUT1"
    folder.mkdir(parents=True)
    os.symlink(secret, folder / ".zotero-ft-cache")
    assert read_cache(tmp_path, "LINKOUT1") is None


def _unblock(fifo: Path) -> None:
    """Open the FIFO's writing end once, so a reader blocked in open() (today's bug) returns."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass  # no reader is blocked: nothing to release


def _finishes(fn: Callable[[], object], fifo: Path, within_s: float = 5.0) -> tuple[bool, object]:
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    t.start()
    t.join(within_s)
    blocked = t.is_alive()
    _unblock(fifo)
    t.join(5)
    return not blocked, result[0] if result else None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_a_fifo_in_the_caches_place_does_not_block(tmp_path: Path) -> None:
    folder = tmp_path / "storage" / "FIFO0001"
    folder.mkdir(parents=True)
    fifo = folder / ".zotero-ft-cache"
    os.mkfifo(fifo)
    done, text = _finishes(lambda: read_cache(tmp_path, "FIFO0001"), fifo)
    assert done and text is None
    os.mkdir(tmp_path / "storage" / "LINKFIF1")  # a link to it, inside storage/, is refused too
    os.symlink(fifo, tmp_path / "storage" / "LINKFIF1" / ".zotero-ft-cache")
    done, text = _finishes(lambda: read_cache(tmp_path, "LINKFIF1"), fifo)
    assert done and text is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_the_indexer_goes_past_a_fifo(tmp_path: Path) -> None:
    items = [FixtureItem("PIPEITEM", "Pipes and valves", attachments=[FixtureAttachment("PIPEATT1", text="placeholder")]),
             FixtureItem("BEEKEEP1", "Honeybees", abstract="Varroa mites.")]
    build_zotero_dir(tmp_path, items)
    fifo = tmp_path / "storage" / "PIPEATT1" / ".zotero-ft-cache"
    fifo.unlink()
    os.mkfifo(fifo)
    lib = Library(tmp_path, tmp_path / "zocrates-data", local_api_url=None)
    done, _ = _finishes(lambda: lib.indexer.refresh(None), fifo)
    assert done, "the indexer blocked on the FIFO"
    st = lib.status()
    assert st["state"] == "ready" and st["items_indexed"] == 2 and st["attachments_with_text"] == 0, st
