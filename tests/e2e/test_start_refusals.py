"""A real `zocratesd serve` refusing what it cannot use, with a sentence and no traceback: a config
nested past the parser, allowed origins that every page can claim, a poll interval or connection
cap out of range; warning of a keyless model endpoint on plain http to another machine; stopping at
a damaged sessions.db and leaving it and its -wal byte for byte as they were; and refusing offsets
past `limits.MAX_OFFSET` on its socket as invalid params.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from daemonproc import READY_TIMEOUT_S, DaemonProc
from rawrpc import RawConn
from zoterofixture import rich_library

from zocratesd.demo.zotero_dir import write
from zocratesd.limits import MAX_OFFSET

pytestmark = pytest.mark.e2e


def _outcome(d: DaemonProc, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Start `zocratesd serve` and wait until it exits (its code) or serves (None: stopped again);
    and what it wrote to stderr."""
    seen = d.stderr_path.stat().st_size if d.stderr_path.exists() else 0
    with open(d.stderr_path, "ab") as err:
        proc = subprocess.Popen([sys.executable, "-m", "zocratesd", "serve", "--zotero-data-dir", str(d.data_dir)],
                                env=env or d.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    info = d.state_dir / "daemon.json"
    deadline = time.monotonic() + READY_TIMEOUT_S
    code: int | None = None
    while (code := proc.poll()) is None:
        try:
            if json.loads(info.read_text())["pid"] == proc.pid:
                break  # it serves: the config was accepted
        except (OSError, ValueError, KeyError):
            pass
        assert time.monotonic() < deadline, "zocratesd neither served nor exited"
        time.sleep(0.02)
    if code is None:
        d.proc = proc
        d.stop()
    return code, d.stderr_path.read_bytes()[seen:].decode(errors="replace")


DEEP = "[" * 20_000 + "]" * 20_000  # far past the parser's depth, within a variable's 128 KiB


@pytest.mark.parametrize(("config", "env", "said"), [
    ('{"http": {"allowed_origins": ' + DEEP + "}}", {}, "nested deeper than the JSON parser goes"),
    ("{}", {"ZOCRATES_HTTP__ALLOWED_ORIGINS": DEEP}, "$ZOCRATES_HTTP__ALLOWED_ORIGINS: nested deeper"),
    ('{"http": {"allowed_origins": ["null"]}}', {}, "http.allowed_origins: 'null' is refused"),
    ('{"http": {"allowed_origins": ["*"]}}', {}, "http.allowed_origins: '*' is refused: a wildcard"),
    ('{"http": {"allowed_origins": ["https://*.example.org"]}}', {}, "is refused: a wildcard"),
    ('{"http": {"allowed_origins": ["http://localhost:3000/app"]}}', {}, "is not an origin"),
    ('{"http": {"allowed_origins": ["http://a.test;script-src"]}}', {}, "is not an origin"),
    ('{"library": {"poll_interval_s": 1e-9}}', {}, "library.poll_interval_s: expected a number >= 0.1"),
    ('{"library": {"poll_interval_s": 1e300}}', {}, "library.poll_interval_s: expected a number <= 86400"),
    ('{"http": {"max_connections": 1e300}}', {}, "http.max_connections: expected an integer <= 65536"),
], ids=["deep-file", "deep-variable", "origin-null", "origin-star", "origin-wildcard", "origin-path", "origin-directive", "poll-tiny",
        "poll-huge", "connections-huge"])
def test_a_config_out_of_bounds_stops_the_start_with_a_sentence(
    daemon_factory: Any, config: str, env: dict[str, str], said: str
) -> None:
    d = daemon_factory()
    d.state_dir.mkdir(parents=True)
    (d.state_dir / "zocrates_config.json").write_text(config)
    code, stderr = _outcome(d, {**d.env, **env})
    assert code == 2, stderr[-2000:]
    assert said in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert len(stderr) < 2000  # a sentence, not the value echoed back
    assert not (d.state_dir / "daemon.json").exists()


def test_a_keyless_plain_http_model_on_another_machine_is_warned_about(daemon_factory: Any) -> None:
    d = daemon_factory()
    d.state_dir.mkdir(parents=True)
    model = {"provider": "openai", "name": "m", "base_url": "http://192.0.2.7:8080/v1"}  # TEST-NET: nothing answers
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"model": model, "http": {"enabled": False}}))
    d.start()
    d.stop()
    warned = [line for line in (d.state_dir / "zocratesd.log").read_text().splitlines() if "travels unencrypted" in line]
    assert len(warned) == 1 and "WARNING" in warned[0] and "http://192.0.2.7:8080/v1 is plain http://" in warned[0], warned
    assert "travels unencrypted" in d.stderr_tail()
    # The same endpoint on this machine, or declared safe, is not warned about.
    for safe in ({**model, "base_url": "http://127.0.0.1:8080/v1"}, {**model, "allow_insecure_http": True}):
        (d.state_dir / "zocrates_config.json").write_text(json.dumps({"model": safe, "http": {"enabled": False}}))
        (d.state_dir / "zocratesd.log").unlink()
        d.start()
        d.stop()
        assert "travels unencrypted" not in (d.state_dir / "zocratesd.log").read_text()


def _digests(state_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in state_dir.iterdir()
            if p.name in ("sessions.db", "sessions.db-wal")}


def test_a_damaged_store_stops_the_start_and_is_left_as_it_was(daemon_factory: Any) -> None:
    d = daemon_factory()
    d.start()
    with RawConn(d.socket_path) as c:
        c.call("initialize", {"protocolVersion": 1})
        for i in range(30):
            sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
            c.result("_zocrates/session/rename", {"sessionId": sid, "title": f"session {i} " + "x" * 150})
    assert d.stop() == 0
    # A writer that died with committed pages in the -wal (not yet folded into the file)...
    subprocess.run([sys.executable, "-c", (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA wal_autocheckpoint=0')\n"
        "c.execute('CREATE TABLE scratch(x)')\n"
        "c.execute('INSERT INTO scratch VALUES (randomblob(20000))')\n"
        "os._exit(0)\n"
    ), str(d.db_path)], check=True, timeout=60)
    # ...and then the file damaged: every page past the schema's scribbled over.
    data = bytearray(d.db_path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    for start in range(2 * page, len(data), page):
        data[start + 8 : start + 200] = os.urandom(192)
    d.db_path.write_bytes(bytes(data))
    before = _digests(d.state_dir)
    assert set(before) == {"sessions.db", "sessions.db-wal"}

    code, stderr = _outcome(d)
    assert code == 1 and "Traceback" not in stderr, stderr[-3000:]
    said = stderr.splitlines()[-2] if "stopped" in stderr.splitlines()[-1] else stderr.splitlines()[-1]
    assert f"the session store {d.db_path} is damaged (SQLite: " in said, said
    assert "It was left as it is, with its sessions.db-wal" in said and ".recover" in said, said
    assert _digests(d.state_dir) == before
    assert not (d.state_dir / "daemon.json").exists()
    with sqlite3.connect(f"{d.db_path.as_uri()}?mode=ro", uri=True) as conn:  # the -wal's pages still readable
        assert conn.execute("SELECT length(x) FROM scratch").fetchone() == (20000,)


def test_offsets_past_the_bound_on_the_socket_are_invalid_params(daemon_factory: Any) -> None:
    d = daemon_factory()
    write(d.data_dir, rich_library())
    d.start()
    with RawConn(d.socket_path) as c:
        c.call("initialize", {"protocolVersion": 1})
        deadline = time.monotonic() + 60
        while not c.result("_zocrates/library/items", {"limit": 1})["items"]:
            assert time.monotonic() < deadline, "the library was not indexed"
            time.sleep(0.2)
        key = c.result("_zocrates/library/items", {"limit": 1})["items"][0]["item_key"]
        for method, params in (("_zocrates/library/items", {"offset": 10**30}), ("_zocrates/library/tags", {"offset": 10**30}),
                               ("_zocrates/library/items", {"offset": MAX_OFFSET + 1}),
                               ("_zocrates/library/item", {"itemKey": key, "fulltext": True, "fulltextOffset": 10**30})):
            error = c.call(method, params)["error"]
            assert error["code"] == -32602 and f"less than or equal to {MAX_OFFSET}" in json.dumps(error), error
        assert c.result("_zocrates/library/items", {"offset": MAX_OFFSET})["items"] == []
        page = c.result("_zocrates/library/item", {"itemKey": key, "fulltext": True, "fulltextOffset": MAX_OFFSET})
        assert page["fulltext"]["chunks"] == []
    d.stop()
    assert "Traceback" not in d.stderr_text()
