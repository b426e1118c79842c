"""`zocratesd demo`'s library: 30 papers written by the schema-true writer, read back by our own
Zotero reader, and the command that writes it (idempotent, never over a real library)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from zocratesd import demo
from zocratesd.demo import zotero_dir as writer
from zocratesd.demo.papers import PAPERS


def test_the_demo_library_is_realistic(tmp_path: Path) -> None:
    assert demo.write_demo(tmp_path / "d")
    db = sqlite3.connect(tmp_path / "d" / writer.ZOTERO_DB)
    try:
        regular = db.execute(
            "SELECT count(*) FROM items JOIN itemTypes USING (itemTypeID) WHERE typeName NOT IN ('attachment', 'note', 'annotation')"
        ).fetchone()[0]
        collections = db.execute("SELECT count(*) FROM collections WHERE parentCollectionID IS NOT NULL").fetchone()[0]
        notes = db.execute("SELECT count(*) FROM itemNotes").fetchone()[0]
    finally:
        db.close()
    assert regular == len(PAPERS) == 30 and collections == 1 and notes >= 4
    caches = sorted((tmp_path / "d" / "storage").glob("*/.zotero-ft-cache"))
    assert len(caches) == sum(1 for p in PAPERS if p.pages) >= 15
    assert all(c.read_text().count("\f") >= 2 for c in caches)  # several pages each, as Zotero's cache has them
    assert len({p.key for p in PAPERS}) == 30 and all(len(p.abstract) > 100 for p in PAPERS)


def test_the_command_is_idempotent_and_never_touches_a_real_library(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "zocratesd", "demo", "--dir", str(tmp_path / "d")]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0 and first.stdout.startswith("wrote a demo Zotero library"), first
    assert f"export ZOTERO_DATA_DIR={tmp_path / 'd'}" in first.stdout and "zocrates ask" in first.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.startswith("already there"), again
    real = tmp_path / "real"
    real.mkdir()
    (real / writer.ZOTERO_DB).write_bytes(b"")
    refused = subprocess.run([*cmd[:-1], str(real)], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1 and "already holds a Zotero library" in refused.stderr, refused
    assert (real / writer.ZOTERO_DB).read_bytes() == b""
