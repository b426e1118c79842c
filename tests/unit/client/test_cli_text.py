"""What the command-line tools print, without a daemon: the library status in words (every field,
including ones a later daemon adds), text from outside escaped for a terminal, and the installer's
warning about a service that would run out of a source clone."""

from __future__ import annotations

from pathlib import Path

from zocratesd.logtext import escape_for_terminal
from zocratesd.rpc import library_status
from zocratesd.service_manager.installer import source_tree_of

READY = {
    "state": "ready", "source": "sqlite", "zotero_schema_version": 123, "items_total": 9921, "items_to_index": 0,
    "items_done": 0, "percent": 100.0, "items_indexed": 9921, "chunks_indexed": 120344, "attachments_with_text": 2000,
    "collections": 100, "last_refresh": "2026-12-03T10:00:00+00:00", "last_refresh_ms": 5021.5, "refreshes": 1,
    "message": None, "warnings": [], "index_path": "/home/ada/Zotero/zocrates-data/library.db",
}


def test_headlines_say_what_the_library_is_doing() -> None:
    assert library_status.headline(READY) == "library ready: 9,921 items, 2,000 full texts"
    indexing = {**READY, "state": "indexing", "items_done": 1204, "items_to_index": 9921, "percent": 12.1}
    assert library_status.headline(indexing) == "indexing 1,204 of 9,921 items (12%)"
    missing = {**READY, "state": "unavailable", "message": "no Zotero library found in /x: set --zotero-data-dir"}
    assert library_status.headline(missing) == "library unavailable: no Zotero library found in /x: set --zotero-data-dir"
    assert library_status.settled(READY) and not library_status.settled(indexing)


def test_the_daemons_summary_is_the_headline() -> None:
    """The line the daemon logs (per kind, per library, where from) heads the status, said once."""
    summary = "library ready: 9,921 items, 2,000 full texts, 40 notes in 2 libraries (from /home/ada/Zotero/zotero.sqlite)"
    status = {**READY, "summary": summary, "kinds": {"items": 9921, "notes": 40}}
    assert library_status.headline(status) == summary
    lines = library_status.describe(status)
    assert lines[0] == summary and not any(line.lstrip().startswith("summary") for line in lines[1:])
    assert "kinds" in "\n".join(lines)  # the per-kind fields still show below it
    counted = {**status, "items_total": 33, "counts": {"items": 31, "notes": 2, "annotations": 7, "attachments": 30}}
    text = library_status.describe(counted)
    assert ["counts", "items=31, notes=2, annotations=7, attachments=30"] in [line.split(None, 1) for line in text]
    broken = {**READY, "state": "error", "message": "database disk image is malformed",
              "summary": "the library in /x cannot be read: database disk image is malformed"}
    assert library_status.headline(broken) == broken["summary"]  # the message is in it already: not said twice
    hostile = {**READY, "summary": "library ready: 1 items \x1b[2J(from /tmp/\u202e)"}
    assert "\x1b" not in library_status.headline(hostile) and "\u202e" not in library_status.headline(hostile)
    disabled = {**READY, "state": "disabled", "message": "no library configured", "summary": "no library configured"}
    assert library_status.headline(disabled) == "library disabled: no library configured"


def test_describe_shows_every_other_field_even_new_ones_escaped() -> None:
    status = {**READY, "warnings": ["item ABCD1234 kept\x1b[2J"], "libraries": [{"kind": "group", "name": "Lab\x07", "items": 12}]}
    lines = library_status.describe(status)
    text = "\n".join(lines)
    assert lines[0] == "library ready: 9,921 items, 2,000 full texts"
    assert "chunks_indexed" in text and "120,344" in text and "index_path" in text
    assert "    - item ABCD1234 kept\\x1b[2J" in lines
    assert "    - kind=group, name=Lab\\x07, items=12" in lines  # a per-kind list a later daemon may add
    assert "\x1b" not in text and "\x07" not in text
    assert "message" not in text  # empty fields are left out


def test_escape_for_terminal_keeps_lines_and_escapes_the_rest() -> None:
    raw = "line one\n\tline two \x1b]52;c;AAAA\x07 \r\x1b[2J \u202e \x85 C:\\path"
    assert escape_for_terminal(raw) == "line one\n\tline two \\x1b]52;c;AAAA\\x07 \\r\\x1b[2J \\u202e \\x85 C:\\path"


def test_a_venv_inside_a_clone_is_found(tmp_path: Path) -> None:
    clone = tmp_path / "zocratesd-clone"
    (clone / "zocratesd").mkdir(parents=True)
    (clone / "pyproject.toml").write_text("[project]\n")
    venv = clone / ".venv-3.11"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    installed = tmp_path / "site-packages" / "zocratesd"
    installed.mkdir(parents=True)
    assert source_tree_of(str(venv / "bin" / "python"), installed) == clone  # the venv is in the clone
    assert source_tree_of("/usr/bin/python3", clone / "zocratesd") == clone  # an editable install
    assert source_tree_of("/opt/pipx/venvs/zocrates/bin/python", installed) is None  # installed for good
