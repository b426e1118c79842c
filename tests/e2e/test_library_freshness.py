"""An edit made in Zotero is searchable within seconds, whatever the index was doing: right after a
long first build, and during one. The daemon finds it by its own polling (no refresh asked for).

The first build is made long on purpose: the embedding child waits before each request
(daemon_entry.py EMBED_HOLD_ENV), as a large library's build takes minutes. How soon the next look
comes must not depend on how long that build took."""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import pytest
from daemon_entry import EMBED_HOLD_ENV
from daemonproc import TEST_ENTRY
from rawrpc import RawConn
from test_cli import zocrates_command
from test_library import wait_ready
from zoterofixture import build_zotero_dir, sample_library, touch_items

pytestmark = pytest.mark.e2e

# The embedding child's wait per request: the first build takes at least this long.
BUILD_HOLD_S = 6.0
POLL_S = 0.5
# A hang guard, not the promise: with the build above, a daemon that waits 20 times the build
# before its next look sees the edit after two minutes at the earliest; this daemon looks every
# POLL_S, and the edit's own pass (one item, one held embedding request) takes seconds.
EDIT_SEEN_WITHIN_S = 60.0
WORD = "zanzibarquux"


def freshness_daemon(daemon_factory: Any) -> Any:
    d = daemon_factory()
    items, colls = sample_library()
    build_zotero_dir(d.data_dir, items, colls, version=129)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(
        json.dumps({"library": {"local_api": False, "poll_interval_s": POLL_S}}))
    d.command = TEST_ENTRY
    d.env[EMBED_HOLD_ENV] = str(BUILD_HOLD_S)
    return d


def found(c: RawConn) -> list[str]:
    passages = c.result("_zocrates/library/search", {"query": WORD, "topK": 3})["passages"]
    return [p["item_key"] for p in passages]


def wait_found(c: RawConn) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < EDIT_SEEN_WITHIN_S:
        if found(c) == ["BEEKEEP1"]:
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"the edit was not searchable {EDIT_SEEN_WITHIN_S:.0f} s after it was made: "
                         f"{c.result('_zocrates/library/status', {})}")


def test_an_edit_right_after_a_long_first_build_is_searchable_at_the_next_look(daemon_factory: Any) -> None:
    d = freshness_daemon(daemon_factory)
    d.start()
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready" and st["refreshes"] == 1, st
        assert st["last_refresh_ms"] >= BUILD_HOLD_S * 1000, st  # the build was long
        assert found(c) == []
        touch_items(d.data_dir / "zotero.sqlite", ["BEEKEEP1"], title_suffix=f" {WORD}")
        wait_found(c)
    d.stop()


def test_an_edit_made_during_the_first_build_is_searchable_soon_after_it(daemon_factory: Any) -> None:
    d = freshness_daemon(daemon_factory)
    d.start()
    with RawConn(d.socket_path) as c:
        deadline = time.monotonic() + EDIT_SEEN_WITHIN_S
        while c.result("_zocrates/library/status", {})["state"] != "indexing":
            assert time.monotonic() < deadline, "the first build never started"
            time.sleep(0.02)
        touch_items(d.data_dir / "zotero.sqlite", ["BEEKEEP1"], title_suffix=f" {WORD}")
        assert wait_ready(c)["state"] == "ready"
        wait_found(c)
    d.stop()


def test_library_refresh_looks_now_and_status_says_when_it_last_looked(daemon_factory: Any) -> None:
    """`zocrates library refresh`: a daemon that would look again only in an hour reads an edit now,
    and the command returns once it is indexed; `library status` says when the index last looked."""
    d = daemon_factory()
    items, colls = sample_library()
    build_zotero_dir(d.data_dir, items, colls, version=129)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False, "poll_interval_s": 3600}}))
    d.start()
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
        touch_items(d.data_dir / "zotero.sqlite", ["BEEKEEP1"], title_suffix=f" {WORD}")
        assert found(c) == []
        out = subprocess.run([*zocrates_command(), "--zotero-data-dir", str(d.data_dir), "library", "refresh"],
                             env=d.env, capture_output=True, text=True, timeout=EDIT_SEEN_WITHIN_S, stdin=subprocess.DEVNULL)
        assert out.returncode == 0, out
        assert out.stdout.startswith("library ready: 6 items"), out.stdout
        assert found(c) == ["BEEKEEP1"]  # indexed when the command returned
        shown = subprocess.run([*zocrates_command(), "--zotero-data-dir", str(d.data_dir), "library", "status"],
                               env=d.env, capture_output=True, text=True, timeout=EDIT_SEEN_WITHIN_S, stdin=subprocess.DEVNULL)
        assert re.search(r"^  last_look +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$", shown.stdout, re.M), shown.stdout
    d.stop()
