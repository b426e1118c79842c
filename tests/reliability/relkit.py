"""Shared pieces of the reliability suite: daemons set up for it, store digests, an SSE reader.

Everything talks to a real `zocratesd serve` (tests/daemonproc.py) over its real socket and HTTP
shim; the store is only ever *read* from here (read-only SQLite connections, fine beside a daemon
in WAL mode), to check what the daemon acknowledged against what it kept.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemonproc import DaemonProc, daemon_env

# The library every reliability daemon searches: a few passages, so turns cite something.
PASSAGES = [
    {"item_key": "LEWIS202", "title": "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks", "year": 2020,
     "text": "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index."},
    {"item_key": "GAOHYDE1", "title": "Precise Zero-Shot Dense Retrieval without Relevance Labels", "year": 2022,
     "text": "HyDE asks a language model to write a hypothetical document, then embeds it to retrieve real ones."},
    {"item_key": "KARPDPR1", "title": "Dense Passage Retrieval for Open-Domain Question Answering", "year": 2020,
     "text": "Dense passage retrieval encodes questions and passages with two BERT encoders and outperforms BM25."},
    {"item_key": "ROBBM25X", "title": "The Probabilistic Relevance Framework: BM25 and Beyond", "year": 2009,
     "text": "BM25 ranks documents by term frequency saturation and inverse document frequency with length normalisation."},
]

QUESTIONS = [
    "What is retrieval-augmented generation?",
    "How does HyDE retrieve documents without relevance labels?",
    "Does dense passage retrieval beat BM25?",
    "How does BM25 normalise document length?",
    "Which of these methods use BERT encoders?",
]


@contextmanager
def reliability_daemon(
    *, http: bool = True, config: dict[str, Any] | None = None, env: dict[str, str] | None = None, prefix: str = "zr",
    command: list[str] | None = None,
) -> Iterator[DaemonProc]:
    """A started daemon on a fresh short temp dir (Unix socket paths must stay short), with the
    library above and `config` as its zocrates_config.json; stopped and removed afterwards.
    `command` replaces what runs zocratesd (DaemonProc.command), e.g. under prlimit."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    run = root / "run"
    run.mkdir(mode=0o700)
    d = DaemonProc(data_dir=root / "zotero", runtime_dir=run, env=daemon_env(run) | (env or {}),
                   args=["--http-port", "0"] if http else ["--no-http"])
    if command is not None:
        d.command = command
    d.state_dir.mkdir(parents=True)
    (d.state_dir / "library_passages.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PASSAGES))
    if config is not None:
        (d.state_dir / "zocrates_config.json").write_text(json.dumps(config))
    try:
        d.start()
        d.wait_until_started()  # the engine up and sessions.db made: the tests read the file itself
        yield d
    finally:
        if d.proc is not None and d.proc.poll() is None:
            d.stop(30)
        shutil.rmtree(root, ignore_errors=True)


def ro_connect(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0)


def store_digest(db: Path) -> str:
    """A content digest of every session row and every event row (ids, state, data, times)."""
    h = hashlib.sha256()
    conn = ro_connect(db)
    try:
        for row in conn.execute("SELECT app_name, user_id, id, state, create_time, update_time FROM sessions ORDER BY id"):
            h.update(repr(row).encode())
        for row in conn.execute(
            "SELECT id, app_name, user_id, session_id, invocation_id, timestamp, event_data FROM events ORDER BY id"
        ):
            h.update(repr(row).encode())
        for row in conn.execute("SELECT * FROM app_states ORDER BY app_name"):
            h.update(repr(row).encode())
        for row in conn.execute("SELECT * FROM user_states ORDER BY app_name, user_id"):
            h.update(repr(row).encode())
    finally:
        conn.close()
    return h.hexdigest()


def integrity(db: Path) -> str:
    conn = ro_connect(db)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def session_events(db: Path, session_id: str) -> list[dict[str, Any]]:
    """A session's event rows, oldest first: {id, invocation_id, data} (data is the stored JSON)."""
    conn = ro_connect(db)
    try:
        rows = conn.execute(
            "SELECT id, invocation_id, event_data FROM events WHERE session_id = ? ORDER BY timestamp, id", (session_id,)
        ).fetchall()
    finally:
        conn.close()
    return [{"id": i, "invocation_id": inv, "data": json.loads(data)} for i, inv, data in rows]


def session_ids(db: Path) -> set[str]:
    conn = ro_connect(db)
    try:
        return {r[0] for r in conn.execute("SELECT id FROM sessions")}
    finally:
        conn.close()


def duplicated_events(events: list[dict[str, Any]]) -> list[str]:
    """Ids of events that repeat an earlier event of the same turn word for word (same invocation,
    author, content and actions): what a replayed or doubled write would leave."""
    seen: dict[tuple[Any, ...], str] = {}
    dups = []
    for ev in events:
        d = ev["data"]
        if d.get("content") is None and not (d.get("actions") or {}).get("state_delta"):
            continue
        key = (ev["invocation_id"], d.get("author"), d.get("branch"),
               json.dumps(d.get("content"), sort_keys=True), json.dumps(d.get("actions"), sort_keys=True))
        if key in seen:
            dups.append(ev["id"])
        else:
            seen[key] = ev["id"]
    return dups


def sse_data(lines: list[str]) -> list[dict[str, Any]]:
    """The JSON objects of an SSE stream's `data:` lines."""
    return [json.loads(line[len("data: "):]) for line in lines if line.startswith("data: ")]
