"""The library over the socket, against a real `zocratesd serve`: a fixture Zotero data dir is
indexed in the background, and offline-model answers cite the right items in every scope; Zotero
holding its database exclusively does not stop search and the database stays byte-identical."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from daemon_entry import EMBED_HOLD_ENV, EMBED_MEMORY_ENV
from daemonproc import TEST_ENTRY, DaemonProc, daemon_env
from fake_zotero_api import FakeZoteroApi
from rawrpc import RawConn
from zoterofixture import build_zotero_dir, sample_library

pytestmark = pytest.mark.e2e

READY_TIMEOUT_S = 180.0  # a hang guard: indexing on a loaded machine takes many times its idle time


@contextmanager
def indexed_daemon(root: Path, data_dir: Path, stop_timeout_s: float = 30.0) -> Iterator[DaemonProc]:
    """A daemon serving `data_dir` (written already) with its runtime dir under `root`, once its
    index is built (a turn runs while it indexes; under load that can outlast a test's first
    turn); stopped, and `root` removed, at the end."""
    run = root / "run"
    run.mkdir(mode=0o700)
    d = DaemonProc(data_dir=data_dir, runtime_dir=run, env=daemon_env(run))
    d.start()
    try:
        with RawConn(d.socket_path) as c:
            assert wait_ready(c)["state"] == "ready"
        yield d
    finally:
        d.stop(stop_timeout_s)
        shutil.rmtree(root, ignore_errors=True)


def wait_ready(c: RawConn) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        st = c.result("_zocrates/library/status", {})
        if st["state"] in ("ready", "error", "unavailable"):
            return st
        time.sleep(0.05)
    raise AssertionError(f"the library index was not ready in {READY_TIMEOUT_S} s: {st}")


def ask(c: RawConn, sid: str, text: str, **meta: Any) -> str:
    reply = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}], "_meta": {"zocrates": meta}})
    assert reply["result"]["stopReason"] == "end_turn", reply
    ups = [n["params"]["update"] for n in c.notifications if n["method"] == "session/update"]
    c.notifications.clear()
    return "".join(u["content"]["text"] for u in ups if u["sessionUpdate"] == "agent_message_chunk")


def cited(answer: str) -> list[str]:
    sources = answer.split("# Cited Sources", 1)[1] if "# Cited Sources" in answer else ""
    return [line.rsplit("/items/", 1)[1].rstrip(")") for line in sources.splitlines() if "/items/" in line]


def library_daemon(daemon_factory: Any, version: int, config: dict[str, Any] | None = None) -> Any:
    d = daemon_factory()
    items, colls = sample_library()
    build_zotero_dir(d.data_dir, items, colls, version=version)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps(config or {"library": {"local_api": False}}))
    return d


def _mapped(pid: int, name: str) -> bool:
    return name in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_the_dense_model_is_loaded_by_the_first_search_not_at_start(daemon_factory: Any) -> None:
    """Issue 31: the dense stage is in the default install, and its ~50-65 MiB come with the first
    search: a daemon whose library is already indexed starts and idles without them."""
    d = library_daemon(daemon_factory, 129)
    d.start()  # indexes the library (and embeds it)
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
    d.stop()
    d.start()  # already indexed: nothing to embed
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        # An existing index answers "ready" at once; its first refresh (finding nothing to embed) may
        # still run: the model's absence is checked once that refresh is over.
        deadline = time.monotonic() + READY_TIMEOUT_S
        while st["refreshes"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
            st = c.result("_zocrates/library/status", {})
        assert st["state"] == "ready" and st["refreshes"] == 1, st
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        assert d.proc is not None and not _mapped(d.proc.pid, "tokenizers"), "the model was loaded before any search"
        assert cited(ask(c, sid, "What does HyDE do?", mode="library"))[0] == "GAOHYDE1"
        assert _mapped(d.proc.pid, "tokenizers"), "the search did not use the dense stage"


def _children(pid: int, *, python_only: bool = False) -> dict[int, str]:
    """The processes whose parent is `pid`: {pid: "state name"} ("Z": a zombie). `python_only`:
    only Python processes (the embedding child), not a short-lived helper a library the daemon
    imports may run (`ldconfig` through `ctypes.util.find_library`, say)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text.rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            continue
        if int(fields[1]) == pid and (not python_only or name.startswith("python")):
            out[int(stat.parent.name)] = f"{fields[0]} {name}"
    return out


def _embed_child(pid: int, timeout: float = READY_TIMEOUT_S) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in _children(pid):
            try:
                if b"embedproc" in Path(f"/proc/{child}/cmdline").read_bytes():
                    return child
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError("no embedding child process appeared")


def _vectors(index_path: str) -> tuple[dict[int, bytes | None], dict[int, str], str | None]:
    """Each chunk's stored vector (None: none stored), the text it was embedded from, and
    meta.vectors_missing."""
    db = sqlite3.connect(f"file:{index_path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT c.id, f.title, f.body, v.v FROM chunks c JOIN chunks_fts f ON f.rowid = c.id "
                          "LEFT JOIN chunk_vectors v ON v.id = c.id").fetchall()
        missing = db.execute("SELECT value FROM meta WHERE key = 'vectors_missing'").fetchone()
    finally:
        db.close()
    return {r[0]: r[3] for r in rows}, {r[0]: f"{r[1]}\n{r[2]}" for r in rows}, missing[0] if missing else None


def _as_in_process(texts: dict[int, str]) -> dict[int, bytes]:
    from zocratesd.library import dense

    emb = dense.embedder()
    assert emb is not None
    return {i: emb.pack(t) or bytes(dense.DIM) for i, t in texts.items()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_library_indexed_at_start_is_embedded_by_a_child_not_the_daemon(daemon_factory: Any) -> None:
    """Issue 31: indexing at start embedded the passages in the daemon, which then idled with numpy,
    the tokenizer and a fragmented heap (~170 MiB, over the budget). A child process embeds them
    now: the daemon maps neither numpy nor tokenizers once indexed, the child is gone (reaped), the
    vectors are the ones the model gives in-process, and a search still uses the dense stage."""
    d = library_daemon(daemon_factory, 129)
    d.start()
    assert d.proc is not None
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready" and st["chunks_indexed"] > 10, st
        for lib in ("numpy", "tokenizers"):
            assert not _mapped(d.proc.pid, lib), f"the daemon loaded {lib} to index"
        assert (left := _children(d.proc.pid, python_only=True)) == {}, f"the embedding child is still there: {left}"
        stored, texts, missing = _vectors(st["index_path"])
        assert missing is None and stored == _as_in_process(texts)
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        assert cited(ask(c, sid, "What does HyDE do?", mode="library"))[0] == "GAOHYDE1"
        assert _mapped(d.proc.pid, "tokenizers"), "the search did not use the dense stage"
    d.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_failing_embedding_child_leaves_bm25_and_the_next_start_fills_the_vectors(daemon_factory: Any) -> None:
    """A child that cannot load the model (here: its memory limit too small for numpy) is a
    logged error; the library is indexed and searched by its words; the next start computes the
    vectors that are missing."""
    d = library_daemon(daemon_factory, 129)
    d.command = TEST_ENTRY
    d.env[EMBED_MEMORY_ENV] = str(40 * 1024 * 1024)
    d.start()
    assert d.proc is not None
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready" and st["items_indexed"] == 6, st
        stored, _, missing = _vectors(st["index_path"])
        assert missing == "1" and set(stored.values()) == {None}
        assert (left := _children(d.proc.pid, python_only=True)) == {}, f"the failed child was not reaped: {left}"
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        assert cited(ask(c, sid, "What does HyDE do?", mode="library"))[0] == "GAOHYDE1"
    d.stop()
    assert "the process that computes the passages' vectors failed to start" in d.stderr_text()
    del d.env[EMBED_MEMORY_ENV]
    d.start()
    with RawConn(d.socket_path) as c:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (st := c.result("_zocrates/library/status", {}))["refreshes"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        stored, texts, missing = _vectors(st["index_path"])
        assert missing is None and stored == _as_in_process(texts)
    d.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("what", ["child killed", "daemon stopped", "daemon killed"])
def test_the_embedding_child_is_bounded_by_the_daemon(daemon_factory: Any, what: str) -> None:
    """The child, held mid-request (a test hook): killed, its batch is indexed without vectors
    (BM25 answers) and the error is logged; the daemon stopping or killed takes it along (no
    orphan left embedding, no zombie)."""
    d = library_daemon(daemon_factory, 129)
    d.command = TEST_ENTRY
    d.env[EMBED_HOLD_ENV] = "60"
    d.start()
    assert d.proc is not None
    child = _embed_child(d.proc.pid)
    if what == "child killed":
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _mapped(child, "tokenizers") and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # its model loaded: "ready" said, the first request is being held
        os.kill(child, signal.SIGKILL)
        with RawConn(d.socket_path) as c:
            st = wait_ready(c)
            assert st["state"] == "ready" and st["items_indexed"] == 6, st
            assert (left := _children(d.proc.pid, python_only=True)) == {}, f"the killed child was not reaped: {left}"
            assert _vectors(st["index_path"])[2] == "1"
            sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
            assert cited(ask(c, sid, "What does HyDE do?", mode="library"))[0] == "GAOHYDE1"
        d.stop()
        logged = d.stderr_text()
        # Killed while it holds the first request (or, on a slow machine, just before it answered "ready").
        assert ("the passages' vectors could not be computed (it ended (exit -9, SIGKILL))" in logged
                or "the process that computes the passages' vectors failed to start (it ended (exit -9, SIGKILL))" in logged)
        return
    t0 = time.monotonic()
    if what == "daemon stopped":
        assert d.stop() == 0 and time.monotonic() - t0 < 20.0
    else:
        d.kill()
    deadline = time.monotonic() + 30.0
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists(), f"the embedding child outlived the daemon ({what})"


@pytest.mark.parametrize("version", [123, 129])
def test_answers_cite_the_right_items_in_every_scope(daemon_factory: Any, version: int) -> None:
    d = library_daemon(daemon_factory, version)
    d.start()
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready" and st["items_indexed"] == 6 and st["percent"] == 100.0, st
        assert st["zotero_schema_version"] == version and st["source"] == ("snapshot" if version == 129 else "sqlite")
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]

        answer = ask(c, sid, "What does HyDE do?", mode="library")
        assert cited(answer)[0] == "GAOHYDE1" and "TRASHED1" not in answer
        assert "hypothetical document" in answer and "[1]" in answer

        answer = ask(c, sid, "How are passages retrieved?", mode="papers", activeItems=[{"item_key": "LEWIS202", "title": "RAG"}],
                     snippets=[{"kind": "text", "item_key": "LEWIS202", "key": "ANNOT001", "page": 2,
                                "text": "The retriever is a bi-encoder over Wikipedia passages."}])
        assert set(cited(answer)) == {"LEWIS202"}
        assert "- The retriever is a bi-encoder over Wikipedia passages. [1]" in answer  # the focal snippet comes first

        # A question both papers answer (issue 21: "How are passages retrieved?" no longer cites HyDE,
        # whose text never mentions passages).
        answer = ask(c, sid, "What does dense retrieval do?", mode="collection", collection="DENSE0CO")
        assert set(cited(answer)) == {"KARPDPR1", "GAOHYDE1"}  # the collection and its subcollection

        answer = ask(c, sid, "What about varroa mites?", mode="collection", collection="DENSE0CO")
        assert "found nothing" in answer  # bees live in another collection

        bad = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}],
                                        "_meta": {"zocrates": {"mode": "collection", "collection": "../../etc"}}})
        assert bad["error"]["code"] == -32602
    d.stop()
    db = sqlite3.connect(d.db_path)
    state = json.loads(db.execute("SELECT state FROM sessions WHERE id = ?", (sid,)).fetchone()[0])
    db.close()
    first, second = state["retrieved_evidence"][:2]
    assert first["citations"][0] == "GAOHYDE1"
    chunk = next(ch for ch in first["chunks"] if ch["item_key"] == "GAOHYDE1")
    assert chunk["attachment_key"] == "GAOHPDF1" and chunk["page"] == 2 and "HyDE" in chunk["text"] and chunk["score"] > 0
    focal, *found = second["chunks"]
    assert (focal["attachment_key"], focal["page"], focal["score"]) == ("ANNOT001", 2, None)  # the snippet is evidence too
    assert found and {ch["item_key"] for ch in found} == {"LEWIS202"} and all(ch["attachment_key"] for ch in found if ch["page"])


HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA locking_mode=EXCLUSIVE")
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("UPDATE itemDataValues SET value = value || ' (with okapi)' WHERE value LIKE 'Dense Passage%'")
db.execute("BEGIN EXCLUSIVE")
db.execute("INSERT INTO settings VALUES ('zq', 'held', 1)")
print("held", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


def digests(db: Path) -> dict[str, str | None]:
    return {s: (hashlib.sha256(Path(f"{db}{s}").read_bytes()).hexdigest() if Path(f"{db}{s}").exists() else None)
            for s in ("", "-wal", "-shm", "-journal")}


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.communicate("\n", timeout=10)


@pytest.mark.parametrize("version", [123, 129])
def test_zotero_holding_its_database_does_not_stop_search(daemon_factory: Any, holders: list[Any], version: int) -> None:
    d = library_daemon(daemon_factory, version)
    db = d.data_dir / "zotero.sqlite"
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    holders.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    before = digests(db)
    d.start()
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready" and st["source"] == "snapshot", st
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        answer = ask(c, sid, "Tell me about the okapi", mode="library")
        assert set(cited(answer)) == {"KARPDPR1"}  # an edit Zotero committed while holding the lock
    d.stop()
    assert digests(db) == before
    assert not list(d.state_dir.glob("library-snapshot-*"))


def test_local_api_path_over_the_socket(daemon_factory: Any) -> None:
    items, colls = sample_library()
    api = FakeZoteroApi(items, colls)
    try:
        d = daemon_factory()  # no zotero.sqlite at all: Zotero's local API is the only way in
        d.state_dir.mkdir(parents=True, exist_ok=True)
        d.env["ZOCRATES_LIBRARY__LOCAL_API_URL"] = api.base_url  # the environment outranks the config file
        d.start()
        with RawConn(d.socket_path) as c:
            st = wait_ready(c)
            assert st["state"] == "ready" and st["source"] == "local_api" and st["attachments_with_text"] == 3, st
            sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
            answer = ask(c, sid, "What do RAG models combine?", mode="papers", activeItems=[{"item_key": "LEWIS202", "title": "RAG"}])
            assert set(cited(answer)) == {"LEWIS202"} and "non-parametric memory" in answer
        d.stop()
    finally:
        api.close()


def test_status_without_a_library(daemon: Any) -> None:
    with RawConn(daemon.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "unavailable" and "no zotero.sqlite" in st["message"]
        init = c.result("initialize", {"protocolVersion": 1})
        assert "_zocrates/library/status" in init["agentCapabilities"]["_meta"]["zocrates"]["extensions"]


def test_a_corrupt_index_is_rebuilt_at_start(daemon_factory: Any) -> None:
    d = library_daemon(daemon_factory, 125)
    (d.state_dir / "library.db").write_bytes(b"SQLite format 3\x00" + b"\xde\xad" * 4000)
    d.start()
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready" and st["items_indexed"] == 6, st
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        assert set(cited(ask(c, sid, "varroa mites and honeybees", mode="library"))) == {"BEEKEEP1"}
    d.stop()
    assert "rebuilt from scratch" in d.stderr_text()
