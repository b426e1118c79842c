"""`zocrates note | tag | untag | collect | undo | writes` as a person or a script uses them: the
terminal asks before anything is written, `--yes` is the script's consent, and without either the
write waits (and the message says how to confirm or drop it). Zotero is the Zotero 10 stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fake_zotero_api import FakeZoteroApi
from rawrpc import RawConn
from test_ask_cli import Terminal
from test_cli import zocrates, zocrates_command
from test_library import wait_ready
from test_writes_zotero import daemon_for, notes_on, tags_of

pytestmark = pytest.mark.e2e



@pytest.fixture
def daemon(daemon_factory: Any, zotero10: FakeZoteroApi) -> Iterator[Any]:
    d = daemon_for(daemon_factory, zotero10)
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
    yield d
    d.stop()


def test_a_script_writes_with_yes_and_without_it_the_write_waits_for_a_confirm(daemon: Any, zotero10: FakeZoteroApi) -> None:
    done = zocrates(daemon, "tag", "LEWIS202", "KARPDPR1", "--tag", "to-read", "--yes")
    assert done.returncode == 0, done
    assert done.stdout.startswith("written: w-") and "zocrates undo" in done.stderr
    assert tags_of(zotero10, "KARPDPR1") == ["to-read"]

    waiting = zocrates(daemon, "tag", "BEEKEEP1", "--tag", "bees")
    assert waiting.returncode == 1 and waiting.stdout == ""
    assert "waits for your consent" in waiting.stderr and "zocrates writes confirm w-" in waiting.stderr, waiting
    wid = waiting.stderr.split("zocrates writes confirm ")[1].split("`")[0]
    assert tags_of(zotero10, "BEEKEEP1") == []
    listed = zocrates(daemon, "writes", "--pending")
    assert wid in listed.stdout and "awaiting_consent" in listed.stdout and "Honeybee Colony Collapse" in listed.stdout
    confirmed = zocrates(daemon, "writes", "confirm", wid)
    assert confirmed.returncode == 0 and tags_of(zotero10, "BEEKEEP1") == ["bees"], confirmed

    undone = zocrates(daemon, "undo")  # the newest applied write: the "bees" tag
    assert undone.returncode == 0 and tags_of(zotero10, "BEEKEEP1") == [], undone
    shown = zocrates(daemon, "writes", "show", wid)
    assert "undone" in shown.stdout and 'Add the tag "bees"' in shown.stdout


def test_a_collection_is_created_and_filled_in_one_command(daemon: Any, zotero10: FakeZoteroApi) -> None:
    out = zocrates(daemon, "collect", "Thesis chapter 2", "LEWIS202", "GAOHYDE1", "--create", "--parent", "Miscellany", "--yes")
    assert out.returncode == 0, out
    made = [c for c in zotero10.collections if c["data"]["name"] == "Thesis chapter 2"]
    assert len(made) == 1 and made[0]["data"]["parentCollection"] == "MISCCOLL"
    assert made[0]["key"] in zotero10.item("GAOHYDE1")["collections"]
    unknown = zocrates(daemon, "collect", "No such collection", "LEWIS202", "--yes")
    assert unknown.returncode == 1 and "No such collection" in unknown.stderr, unknown


def test_the_terminal_asks_and_always_stops_asking_for_that_kind(daemon: Any, zotero10: FakeZoteroApi) -> None:
    t = Terminal([*zocrates_command(), "--zotero-data-dir", str(daemon.data_dir), "note", "--on", "GAOHYDE1",
                  "# HyDE\n\nA *hypothetical* document is embedded."], daemon.env)
    try:
        t.expect("[N] no: ")
        assert 'Save a note "HyDE" on "Precise Zero-Shot Dense Retrieval without Relevance Labels"' in t.output
        assert notes_on(zotero10, "GAOHYDE1") == []
        t.type("a\n")
        assert t.wait() == 0, t.output
    finally:
        t.kill()
    assert len(notes_on(zotero10, "GAOHYDE1")) == 1
    again = Terminal([*zocrates_command(), "--zotero-data-dir", str(daemon.data_dir), "note", "--on", "GAOHYDE1", "Second."],
                     daemon.env)
    try:
        assert again.wait() == 0, again.output
        assert "[N] no" not in again.output  # allowed always for notes
    finally:
        again.kill()
    assert len(notes_on(zotero10, "GAOHYDE1")) == 2
    declined = Terminal([*zocrates_command(), "--zotero-data-dir", str(daemon.data_dir), "tag", "GAOHYDE1", "-t", "x"],
                        daemon.env)
    try:
        declined.expect("[N] no: ")
        declined.type("\n")
        assert declined.wait() == 1 and "nothing was written" in declined.output
    finally:
        declined.kill()
    assert tags_of(zotero10, "GAOHYDE1") == []


def test_with_zotero_closed_the_write_waits_and_says_so(daemon: Any, zotero10: FakeZoteroApi) -> None:
    zotero10.stop()
    out = zocrates(daemon, "untag", "LEWIS202", "-t", "nlp", "--yes")
    assert out.returncode == 0 and "Zotero is not running" in out.stderr and "writes --pending" in out.stderr, out
    zotero10.start()
