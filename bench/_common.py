"""Shared pieces for the benchmarks under bench/: data, daemon processes, a socket client, stats, tables.

Everything here is for measuring, never for the daemon: it may import the daemon's modules (to
build data exactly as the daemon would), but the daemon never imports this.

- `build_store()` fills `<data>/zocrates-data/sessions.db` with sessions and one long research
  chat, inserting rows through ADK's own ORM classes (`StorageSession`, `StorageEvent.from_event`),
  so the bytes are what `DatabaseSessionService.append_event` would have written, ~100x faster.
- `DaemonProc` runs `python -m zocratesd serve` on a data dir (pattern of tests/conftest.py).
- `RpcClient` is a blocking NDJSON JSON-RPC client on the Unix socket; it parses every line it
  receives (a real client would), so timings include the client's JSON parse.
- `summarize()`, `markdown_table()`, `env_info()`, `write_json()` report results.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import platform
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"

READY_TIMEOUT_S = 60.0

# Make `import zocratesd` work when a bench script is run from anywhere with the venv's python
# (the venv has the project installed editable; this is only a fallback).
if str(REPO_DIR) not in sys.path:
    sys.path.insert(0, str(REPO_DIR))


# --- statistics and reporting --------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) with linear interpolation between closest ranks (numpy's default)."""
    if not samples:
        return math.nan
    s = sorted(samples)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(samples_s: Sequence[float]) -> dict[str, Any]:
    """Median, p95, min, max (milliseconds) of samples given in seconds."""
    ms = [x * 1000.0 for x in samples_s]
    if not ms:
        return {"n": 0, "median_ms": None, "p95_ms": None, "min_ms": None, "max_ms": None, "samples_ms": []}
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p95_ms": percentile(ms, 0.95),
        "min_ms": min(ms),
        "max_ms": max(ms),
        "samples_ms": [round(x, 3) for x in ms],
    }


def fmt_ms(summary: dict[str, Any] | None) -> str:
    """`12.3 ms (p95 14.0)` from a summarize() dict; '—' when there is nothing."""
    if not summary or summary.get("median_ms") is None:
        return "—"
    return f"{_num(summary['median_ms'])} ms ({_num(summary['p95_ms'])})"


def _num(x: float) -> str:
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def env_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "when_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        import google.adk
        import sqlalchemy

        info["google_adk"] = google.adk.__version__
        info["sqlalchemy"] = sqlalchemy.__version__
    except Exception:  # pragma: no cover - reporting only
        pass
    try:
        import zocratesd

        info["zocratesd"] = zocratesd.__version__
    except Exception:  # pragma: no cover
        pass
    try:
        info["git_commit"] = subprocess.run(
            ["git", "-C", str(REPO_DIR), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        info["git_dirty"] = bool(
            subprocess.run(
                ["git", "-C", str(REPO_DIR), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True, text=True, timeout=5,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):  # pragma: no cover
        pass
    return info


def write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def timer() -> float:
    return time.perf_counter()


# --- temp dirs and the daemon process ----------------------------------------------------------


@contextmanager
def short_tmpdir(prefix: str = "zb", keep: bool = False) -> Iterator[Path]:
    """A short temp dir under /tmp: Unix socket paths must stay under ~104 bytes."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield d
    finally:
        if keep:
            print(f"(kept {d})", file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)


def daemon_env(runtime_dir: Path) -> dict[str, str]:
    """The environment of a daemon (and of a `zocratesd stdio` that must find it): a private runtime
    dir, and none of the user's ZOCRATES_* / ZOTERO_DATA_DIR settings."""
    env = dict(os.environ)
    env["XDG_RUNTIME_DIR"] = str(runtime_dir)
    env.pop("ZOTERO_DATA_DIR", None)
    for key in list(env):
        if key.startswith("ZOCRATES_"):
            del env[key]
    return env


def zocratesd_cmd(*args: str, profile_to: Path | None = None) -> list[str]:
    if profile_to is not None:
        return [sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "zocratesd", *args]
    return [sys.executable, "-m", "zocratesd", *args]


@dataclass
class DaemonProc:
    """A `zocratesd serve` subprocess on `data_dir`. `start()` returns the seconds until it is ready:
    daemon.json names this pid and its socket accepts a connection."""

    data_dir: Path
    socket_path: Path
    env: dict[str, str]
    extra_args: list[str] = field(default_factory=list)
    profile_to: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    _stderr_file: Any = None
    # With profile_to: profile every thread of the daemon (PROFILE_ALL_THREADS), not only the main one.
    profile_all_threads: bool = False

    @property
    def state_dir(self) -> Path:
        return self.data_dir / "zocrates-data"

    @property
    def info_path(self) -> Path:
        return self.state_dir / "daemon.json"

    @property
    def db_path(self) -> Path:
        return self.state_dir / "sessions.db"

    def start(self) -> float:
        args = ["serve", "--zotero-data-dir", str(self.data_dir), "--socket", str(self.socket_path), *self.extra_args]
        # stderr to a file, not a pipe: nobody reads it while we measure, and a full pipe would block it.
        self._stderr_file = tempfile.TemporaryFile()
        t0 = timer()
        if self.profile_to is not None and self.profile_all_threads:
            cmd = zocratesd_cmd_all_threads_profiled(*args, profile_to=self.profile_to)
        else:
            cmd = zocratesd_cmd(*args, profile_to=self.profile_to)
        self.proc = subprocess.Popen(
            cmd,
            env=self.env,
            cwd=str(REPO_DIR),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr_file,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zocratesd exited {self.proc.returncode} while starting:\n{self.stderr_tail()}")
            try:
                info = json.loads(self.info_path.read_text())
                if info["pid"] == self.proc.pid:
                    s = socket.socket(socket.AF_UNIX)
                    try:
                        s.connect(info["socket"])
                    finally:
                        s.close()
                    return timer() - t0
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.005)
        self.kill()
        raise RuntimeError(f"zocratesd did not become ready in {READY_TIMEOUT_S:.0f} s:\n{self.stderr_tail()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait (SIGKILL if it does not stop in time). Returns the exit code."""
        if self.proc is None:
            return None
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"zocratesd pid {self.proc.pid} ignored SIGTERM for {timeout:.0f} s; killing it", file=sys.stderr)
                self.proc.kill()
                return self.proc.wait(10)
        finally:
            if self._stderr_file is not None:
                self._stderr_file.close()
                self._stderr_file = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stderr_tail(self, n: int = 3000) -> str:
        f = self._stderr_file
        if f is None:
            return ""
        f.seek(0)
        return f.read().decode(errors="replace")[-n:]


# --- a blocking NDJSON JSON-RPC client ----------------------------------------------------------


class RpcError(Exception):
    pass


class RpcClient:
    """One Unix-socket connection. `call()` returns (result, notifications_seen); every received
    line is parsed as a real client does, with orjson (a dependency of the project, what a Python
    client of ours has at hand; the standard library takes ~10 ms more on a 2.3 MB reply)."""

    def __init__(self, path: str | Path, timeout: float = 120.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self._ids = 0
        self._pending: list[bytes] = []  # bytes received after the last complete line
        self._first_byte: float | None = None
        # Where the last call's time went, in seconds from sending the request: the first byte of
        # an answer (notifications included), the reply line complete, the reply parsed.
        self.last_timing: dict[str, float] = {}

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lines(self) -> Iterator[bytes]:
        """Complete lines as they arrive; scans each received chunk once (no quadratic re-scans)."""
        while True:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError("the daemon closed the connection")
            if self._first_byte is None:
                self._first_byte = timer()
            start = 0
            while True:
                nl = chunk.find(b"\n", start)
                if nl < 0:
                    break
                if self._pending:
                    self._pending.append(chunk[start:nl])
                    line = b"".join(self._pending)
                    self._pending = []
                else:
                    line = chunk[start:nl]
                start = nl + 1
                if line.strip():
                    yield line
            if start < len(chunk):
                self._pending.append(chunk[start:])

    def call(self, method: str, params: dict[str, Any] | None = None, *, keep_notifications: bool = False) -> tuple[Any, Any]:
        """Send one request, read until its reply. Returns (result, notifications), where
        notifications is the list of them if keep_notifications, else their count."""
        self._ids += 1
        msg_id = self._ids
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            msg["params"] = params
        data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        self._first_byte = None
        t0 = timer()
        self.sock.sendall(data)
        kept: list[Any] = []
        count = 0
        for line in self._lines():
            t_line = timer()
            m = orjson.loads(line)
            if "id" not in m or m.get("id") != msg_id:
                if "method" in m and "id" not in m:
                    count += 1
                    if keep_notifications:
                        kept.append(m)
                continue
            if "error" in m:
                raise RpcError(f"{method}: {m['error']}")
            t_end = timer()
            self.last_timing = {
                "first_byte": (self._first_byte or t_line) - t0,
                "reply_received": t_line - t0,
                "reply_parse": t_end - t_line,
                "total": t_end - t0,
            }
            return m["result"], (kept if keep_notifications else count)
        raise AssertionError("unreachable")


INITIALIZE_PARAMS = {
    "protocolVersion": 1,
    "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
    "clientInfo": {"name": "zocrates-bench", "version": "0"},
}


# --- realistic data ----------------------------------------------------------------------------

_WORDS = (
    "retrieval augmented generation dense sparse passage reranker corpus embedding transformer attention "
    "citation survey benchmark evaluation recall precision hallucination grounding context window query "
    "expansion hypothetical document bm25 colbert contrastive pretraining fine-tuning dataset annotation "
    "zotero library collection abstract methodology baseline ablation results discussion limitation "
    "future work reproducibility statistical significance confidence interval effect size sample "
    "participants protocol literature review systematic meta-analysis heterogeneity bias risk quality "
    "the a of and to in for with on that this we our their its is are was were be by from as which "
    "however therefore moreover although because whereas while thus notably specifically in particular"
).split()

_TOOLS = ("search_library", "search_online_literature", "read_item", "list_collection")


class TextGen:
    """Deterministic pseudo-prose of about a given length (seeded: two runs build the same data)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def text(self, approx_chars: int) -> str:
        rng = self.rng
        target = max(8, int(approx_chars * rng.uniform(0.85, 1.15)))
        out: list[str] = []
        n = 0
        sentence_len = 0
        while n < target:
            w = rng.choice(_WORDS)
            if sentence_len == 0:
                w = w.capitalize()
            out.append(w)
            n += len(w) + 1
            sentence_len += 1
            if sentence_len > rng.randint(8, 18):
                out[-1] += rng.choice((".", ".", ".", "?", " [1].", " [2]."))
                sentence_len = 0
        s = " ".join(out)
        return s if s.endswith((".", "?")) else s + "."

    def key(self) -> str:
        return "".join(self.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(8))


@dataclass
class StoreInfo:
    db_path: Path
    session_ids: list[str]  # every session, the big one included
    big_session_id: str
    big_events: int  # rows of the big session (its seed event included)
    total_events: int
    build_s: float
    db_bytes: int
    big_event_data_bytes: int

    def as_json(self) -> dict[str, Any]:
        return {
            "db_path": str(self.db_path),
            "sessions": len(self.session_ids),
            "big_session_id": self.big_session_id,
            "big_session_events": self.big_events,
            "total_events": self.total_events,
            "build_s": round(self.build_s, 3),
            "db_bytes": self.db_bytes,
            "big_session_event_data_bytes": self.big_event_data_bytes,
        }


def _session_id(epoch: float, rng: random.Random) -> str:
    """An id shaped like the ones Daemon.create_session mints."""
    return f"session-{int(epoch * 1000)}-{rng.getrandbits(24):06x}"


def research_chat(gen: TextGen, n_events: int, start_ts: float, *, tool_turn_ratio: float = 0.75) -> list[Any]:
    """`n_events` ADK Events of a research chat: each turn is a ~500-char user question, then either a
    ~500-char answer, or (in `tool_turn_ratio` of the turns) a model event with a short text and a
    function_call, its function_response (~500 chars of search hits) and the ~500-char answer: a tool
    round trip every ~4.7 events. Timestamps strictly increase from `start_ts`."""
    from google.adk.events import Event
    from google.genai import types

    rng = gen.rng
    events: list[Event] = []
    ts = start_ts
    turn = 0

    def add(author: str, inv: str, role: str, parts: list[types.Part]) -> None:
        nonlocal ts
        ts += rng.uniform(0.5, 8.0)
        events.append(
            Event(id=Event.new_id(), author=author, invocation_id=inv, timestamp=ts,
                  content=types.Content(role=role, parts=parts))
        )

    while len(events) < n_events:
        turn += 1
        inv = f"e-{uuid.uuid4()}"
        ts += rng.uniform(20.0, 300.0)  # the user reads and thinks between turns
        add("user", inv, "user", [types.Part(text=gen.text(500))])
        if rng.random() < tool_turn_ratio:
            call_id = f"adk-{uuid.uuid4()}"
            tool = rng.choice(_TOOLS)
            query = gen.text(40).rstrip(".?")
            add("coordinator", inv, "model", [
                types.Part(text=f"Let me look that up: {query}."),
                types.Part(function_call=types.FunctionCall(id=call_id, name=tool, args={"query": query, "limit": 8})),
            ])
            hits = [
                {"key": gen.key(), "title": gen.text(60).rstrip("."), "year": rng.randint(1995, 2026),
                 "snippet": gen.text(90)}
                for _ in range(3)
            ]
            add("coordinator", inv, "user", [
                types.Part(function_response=types.FunctionResponse(id=call_id, name=tool, response={"result": hits}))
            ])
        add("coordinator", inv, "model", [types.Part(text=gen.text(500))])
    return events[:n_events]


def build_store(data_dir: Path, *, sessions: int, events: int, seed: int = 20260101) -> StoreInfo:
    """Fill `<data_dir>/zocrates-data/sessions.db`: `sessions` sessions in all, each opened with the
    daemon's seed bookkeeping event (title, created_at; a fifth of them with a cwd), one of which (the
    newest) is a research chat of `events` events in all (seed included).

    Tables are made by the daemon's own session service (WAL and all); rows go in through ADK's ORM
    classes in one transaction, exactly as `create_session` + `append_event` would store them.
    """
    from google.adk.sessions import Session as AdkSession
    from google.adk.sessions.schemas import v1
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session as OrmSession

    from zocratesd.core.daemon import _bookkeeping_event
    from zocratesd.store import APP_NAME, USER_ID, close_session_services, get_session_service
    from zocratesd.store.database import db_path as store_db_path

    if sessions < 1 or events < 1:
        raise ValueError("need at least one session and one event")
    t_start = timer()
    data_dir.mkdir(parents=True, exist_ok=True)
    db = store_db_path(data_dir)

    async def make_tables() -> None:
        svc = get_session_service(data_dir)
        await svc.prepare_tables()
        await close_session_services(data_dir)

    asyncio.run(make_tables())

    rng = random.Random(seed)
    gen = TextGen(seed + 1)
    now = time.time()
    first_created = now - 90 * 86400.0
    # Creation times spread over 90 days; the big chat is the newest session and runs ~until now.
    created = sorted(first_created + rng.uniform(0, 80 * 86400.0) for _ in range(sessions - 1))
    big_created = now - 8 * 86400.0
    created.append(big_created)

    def naive_utc(epoch: float) -> datetime:
        return v1.timestamp_to_utc_datetime(epoch)

    rows: list[Any] = [
        v1.StorageAppState(app_name=APP_NAME, state={}, update_time=naive_utc(first_created)),
        v1.StorageUserState(app_name=APP_NAME, user_id=USER_ID, state={}, update_time=naive_utc(first_created)),
    ]
    session_ids: list[str] = []
    big_id = ""
    big_data_bytes = 0
    total_events = 0
    for n, c in enumerate(created):
        sid = _session_id(c, rng)
        session_ids.append(sid)
        is_big = n == len(created) - 1
        title = "Literature review: retrieval-augmented generation" if is_big else gen.text(40).rstrip(".?")
        seed_state: dict[str, Any] = {"title": title, "created_at": c}
        if n % 5 == 0:
            seed_state["cwd"] = f"/home/user/notes/project-{n}"
        seed_ev = _bookkeeping_event(seed_state).model_copy(update={"timestamp": c + rng.uniform(0.001, 0.01)})
        adk_session = AdkSession(id=sid, app_name=APP_NAME, user_id=USER_ID)
        evs = [seed_ev]
        if is_big:
            big_id = sid
            evs += research_chat(gen, events - 1, seed_ev.timestamp)
        else:
            # A short exchange: a session with no message would be "empty" and, being older than
            # 24 h, removed by the daemon's start-up maintenance.
            evs += research_chat(gen, 2, seed_ev.timestamp)
        storage_events = [v1.StorageEvent.from_event(adk_session, e) for e in evs]
        if is_big:
            big_data_bytes = sum(len(json.dumps(se.event_data)) for se in storage_events)
        total_events += len(storage_events)
        rows.append(
            v1.StorageSession(
                app_name=APP_NAME,
                user_id=USER_ID,
                id=sid,
                state=dict(seed_state),
                create_time=naive_utc(c),
                update_time=naive_utc(evs[-1].timestamp),
            )
        )
        rows.extend(storage_events)

    engine = create_engine(f"sqlite:///{db}")
    try:
        with OrmSession(engine) as orm:
            orm.add_all(rows)
            orm.commit()
    finally:
        engine.dispose()
    checkpoint(db)
    # Keep every session: the default policy (100 sessions, 180 days) would prune this store at the
    # daemon's start-up, and the benchmark is about a large library.
    (db.parent / "zocrates_config.json").write_text(json.dumps({"max_saved_sessions": None, "session_retention_days": None}))
    return StoreInfo(
        db_path=db,
        session_ids=session_ids,
        big_session_id=big_id,
        big_events=events,
        total_events=total_events,
        build_s=timer() - t_start,
        db_bytes=db.stat().st_size,
        big_event_data_bytes=big_data_bytes,
    )


def checkpoint(db: Path) -> None:
    """Fold the WAL into the main file, so the .db alone holds everything (safe to copy)."""
    conn = sqlite3.connect(str(db))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def copy_db(src: Path, dst: Path) -> None:
    """A consistent copy of a SQLite file (the backup API, so a WAL is folded in)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    d = sqlite3.connect(str(dst))
    try:
        s.backup(d)
    finally:
        d.close()
        s.close()


# --- turns: streamed calls, libraries, chat sessions, compactions (bench_turns.py) ---------------


def call_streaming(client: RpcClient, method: str, params: dict[str, Any] | None = None) -> tuple[Any, list[tuple[float, Any]], float]:
    """Like `RpcClient.call`, but keeps every notification with its arrival time: returns
    (result, [(seconds from sending the request, notification)], seconds until the reply was parsed).
    Every line is parsed as it arrives, as a real client does."""
    client._ids += 1
    msg_id = client._ids
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        msg["params"] = params
    data = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
    client._first_byte = None
    notes: list[tuple[float, Any]] = []
    t0 = timer()
    client.sock.sendall(data)
    for line in client._lines():
        m = orjson.loads(line)
        t = timer() - t0
        if m.get("id") != msg_id or "method" in m:
            if "method" in m and "id" not in m:
                notes.append((t, m))
            continue
        if "error" in m:
            raise RpcError(f"{method}: {m['error']}")
        return m["result"], notes, t
    raise AssertionError("unreachable")


# A small library for the `search_library` tool: the e2e tests' three passages and some generated
# ones, so BM25 has a realistic few dozen documents to rank.
LIBRARY_SEED_PASSAGES: list[dict[str, Any]] = [
    {"item_key": "LEWIS202", "title": "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks",
     "creators": ["Patrick Lewis", "Ethan Perez"], "year": 2020, "page": 1,
     "text": "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index of Wikipedia."},
    {"item_key": "GAOHYDE1", "title": "Precise Zero-Shot Dense Retrieval without Relevance Labels",
     "creators": ["Luyu Gao"], "year": 2022, "page": 2,
     "text": "HyDE asks a language model to write a hypothetical document, then embeds it to retrieve real ones."},
    {"item_key": "KARPDPR1", "title": "Dense Passage Retrieval for Open-Domain Question Answering",
     "creators": ["Vladimir Karpukhin"], "year": 2020, "page": 3,
     "text": "Dense passage retrieval encodes questions and passages with two BERT encoders and outperforms BM25."},
]


def library_passages(n: int = 40, seed: int = 7) -> list[dict[str, Any]]:
    """`n` passages (the three seed ones first), as the dicts of `library_passages.jsonl`."""
    gen = TextGen(seed)
    out = [dict(p) for p in LIBRARY_SEED_PASSAGES[:n]]
    while len(out) < n:
        out.append({
            "item_key": gen.key(), "title": gen.text(60).rstrip("."), "creators": [gen.text(12).rstrip(".")],
            "year": gen.rng.randint(1995, 2026), "page": gen.rng.randint(1, 30), "text": gen.text(400),
        })
    return out


def write_library(data_dir: Path, passages: Sequence[dict[str, Any]]) -> Path:
    """`<data_dir>/zocrates-data/library_passages.jsonl`, which a daemon without a Zotero index
    searches (daemon.load_library_passages)."""
    from zocratesd.core.daemon import LIBRARY_PASSAGES_FILE

    path = data_dir / "zocrates-data" / LIBRARY_PASSAGES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    return path


@dataclass(frozen=True)
class TurnSpan:
    invocation_id: str
    start: float  # timestamp of its first event
    end: float  # timestamp of its last event


def turn_spans(rows: Sequence[tuple[str | None, float, bool]]) -> list[TurnSpan]:
    """Turns of a session from (invocation_id, timestamp, has_content) in timestamp order: each
    invocation that has content. Content-less events (the daemon's bookkeeping, compactions) are
    not turns; their invocation ids are their own."""
    spans: dict[str, list[float]] = {}
    for inv, ts, has_content in rows:
        if not inv:
            continue
        if inv in spans:
            spans[inv][1] = max(spans[inv][1], ts)
        elif has_content:
            spans[inv] = [ts, ts]
    return sorted((TurnSpan(inv, s, e) for inv, (s, e) in spans.items()), key=lambda t: t.start)


def compaction_event(start: float, end: float, summary: str, timestamp: float | None = None) -> Any:
    """A compaction of [start, end], recorded the way zocratesd records one: an `EventCompaction`
    whose state_delta sets `compacted_until` to its end, so the next turn loads only a window
    (tests/unit/engine/test_turn_mechanics.py). `timestamp` defaults to now (after the range)."""
    from google.adk.events import Event, EventActions
    from google.adk.events.event_actions import EventCompaction
    from google.genai import types

    kw: dict[str, Any] = {}
    if timestamp is not None:
        kw["timestamp"] = timestamp
    return Event(
        author="user",
        invocation_id=Event.new_id(),
        actions=EventActions(
            compaction=EventCompaction(
                start_timestamp=start, end_timestamp=end,
                compacted_content=types.Content(role="model", parts=[types.Part(text=summary)]),
            ),
            state_delta={"compacted_until": end},
        ),
        **kw,
    )


def session_turn_rows(db: Path, session_id: str) -> list[tuple[str | None, float, bool]]:
    """(invocation_id, timestamp, has_content) of a session's events in order, read with plain
    sqlite3 (read-only; fine while a daemon writes, the store is in WAL mode)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0)
    try:
        rows = conn.execute(
            "SELECT invocation_id, timestamp, json_extract(event_data, '$.content') IS NOT NULL "
            "FROM events WHERE session_id = ? ORDER BY timestamp, id",
            (session_id,),
        ).fetchall()
    finally:
        conn.close()
    out = []  # timestamps are naive-UTC DATETIME text, as ADK stores them
    for inv, ts, has in rows:
        t = datetime.fromisoformat(ts).replace(tzinfo=timezone.utc).timestamp() if isinstance(ts, str) else float(ts)
        out.append((inv, t, bool(has)))
    return out


@dataclass
class ChatSession:
    name: str
    session_id: str
    events: int  # rows in all: seed, history, and the compaction if any
    turns: int
    compacted_until: float | None


def build_chat_sessions(
    data_dir: Path, specs: Sequence[tuple[str, int, bool]], *, keep_turns: int = 2, seed: int = 20260101
) -> tuple[dict[str, ChatSession], float]:
    """Sessions of research chat in `<data_dir>/zocrates-data/sessions.db`, one per (name,
    history_events, compacted) spec: the daemon's seed bookkeeping event, then `research_chat`
    cut back to the last whole turn so that seed + history <= history_events (no dangling tool
    call). A compacted session also gets a compaction event covering all but its last
    `keep_turns` turns, with `compacted_until` in its state_delta and in the session's state, as
    `append_event` would leave them. A history of 0 or 1 is just the seed event.

    Tables are made by the daemon's own session service; rows go in through ADK's ORM classes in
    one transaction (as build_store does). Returns the sessions by name and the build seconds.
    """
    from google.adk.sessions import Session as AdkSession
    from google.adk.sessions.schemas import v1
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session as OrmSession

    from zocratesd.core.daemon import _bookkeeping_event
    from zocratesd.store import APP_NAME, USER_ID, close_session_services, get_session_service
    from zocratesd.store.database import db_path as store_db_path

    t_start = timer()
    data_dir.mkdir(parents=True, exist_ok=True)
    db = store_db_path(data_dir)

    async def make_tables() -> None:
        svc = get_session_service(data_dir)
        await svc.prepare_tables()
        await close_session_services(data_dir)

    asyncio.run(make_tables())
    rng = random.Random(seed)
    gen = TextGen(seed + 1)
    now = time.time()

    def naive_utc(epoch: float) -> datetime:
        return v1.timestamp_to_utc_datetime(epoch)

    rows: list[Any] = []
    conn = sqlite3.connect(str(db))
    try:
        have_app_state = bool(conn.execute("SELECT count(*) FROM app_states").fetchone()[0])
    finally:
        conn.close()
    if not have_app_state:
        rows += [
            v1.StorageAppState(app_name=APP_NAME, state={}, update_time=naive_utc(now - 30 * 86400.0)),
            v1.StorageUserState(app_name=APP_NAME, user_id=USER_ID, state={}, update_time=naive_utc(now - 30 * 86400.0)),
        ]
    out: dict[str, ChatSession] = {}
    for n, (name, history, compacted) in enumerate(specs):
        created = now - 20 * 86400.0 + n * 60.0
        sid = _session_id(created, rng)
        state: dict[str, Any] = {"title": f"Research chat ({name})", "created_at": created}
        seed_ev = _bookkeeping_event(dict(state)).model_copy(update={"timestamp": created + 0.005})
        evs = [seed_ev]
        if history > 1:
            chat = research_chat(gen, history - 1 + 8, seed_ev.timestamp)
            # Cut back to whole turns that fit (events of a turn are contiguous in research_chat).
            keep = 0
            for i, e in enumerate(chat[: history - 1]):
                if i + 1 == len(chat) or chat[i + 1].invocation_id != e.invocation_id:
                    keep = i + 1
            evs += chat[:keep]
        spans = turn_spans([(e.invocation_id, e.timestamp, e.content is not None) for e in evs])
        until: float | None = None
        if compacted and len(spans) > keep_turns:
            covered = spans[: len(spans) - keep_turns]
            until = covered[-1].end
            summary = "Summary of the conversation so far: " + gen.text(2500)
            comp = compaction_event(covered[0].start, until, summary, timestamp=evs[-1].timestamp + 1.0)
            evs.append(comp)
            state["compacted_until"] = until
        adk_session = AdkSession(id=sid, app_name=APP_NAME, user_id=USER_ID)
        rows.append(
            v1.StorageSession(
                app_name=APP_NAME, user_id=USER_ID, id=sid, state=state,
                create_time=naive_utc(created), update_time=naive_utc(evs[-1].timestamp),
            )
        )
        rows.extend(v1.StorageEvent.from_event(adk_session, e) for e in evs)
        out[name] = ChatSession(name=name, session_id=sid, events=len(evs), turns=len(spans), compacted_until=until)

    engine = create_engine(f"sqlite:///{db}")
    try:
        with OrmSession(engine) as orm:
            orm.add_all(rows)
            orm.commit()
    finally:
        engine.dispose()
    checkpoint(db)
    return out, timer() - t_start


# Run `python -m zocratesd ...` under cProfile in *every* thread (aiosqlite's worker, anyio's
# threads), not just the main one as `python -m cProfile` does: that is where SQLite's execute and
# commit (and their fsyncs) run. Usage: python -c PROFILE_ALL_THREADS OUTFILE serve ...
# - SIGUSR2 clears every profile gathered so far (send it after the warm-up: only what follows
#   counts; start-up and first-turn imports do not).
# - aiosqlite hands its worker thread `functools.partial` objects, whose C calls cProfile cannot
#   see; a Python-level stand-in makes `sqlite3.Cursor.execute`, `Connection.commit` etc. appear
#   with their own (wall) time. Nothing else of the daemon is changed.
PROFILE_ALL_THREADS = r"""
import cProfile, pstats, runpy, signal, sys, threading
out = sys.argv.pop(1)
profiles = []
lock = threading.Lock()
_boot = threading.Thread._bootstrap_inner
def _profiled_boot(self):
    p = cProfile.Profile()
    with lock:
        profiles.append(p)
    p.enable()
    try:
        _boot(self)
    finally:
        p.disable()
threading.Thread._bootstrap_inner = _profiled_boot
try:
    import aiosqlite.core as _aiosqlite_core
    def _visible_partial(fn, *args, **kwargs):
        def call():
            return fn(*args, **kwargs)
        return call
    _aiosqlite_core.partial = _visible_partial
except ImportError:
    pass
def _reset(_signum, _frame):
    with lock:
        for p in profiles:
            p.clear()
signal.signal(signal.SIGUSR2, _reset)
main = cProfile.Profile()
profiles.insert(0, main)
main.enable()
try:
    runpy.run_module("zocratesd", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    main.disable()
    class _Snap:
        def create_stats(self):
            pass
    stats = None
    with lock:
        for p in profiles:
            p.snapshot_stats()  # not create_stats: that would disable another thread's profiler from here
            s = _Snap()
            s.stats = p.stats
            if not s.stats:
                continue
            if stats is None:
                stats = pstats.Stats(s)
            else:
                stats.add(s)
    if stats is not None:
        stats.dump_stats(out)
"""


def zocratesd_cmd_all_threads_profiled(*args: str, profile_to: Path) -> list[str]:
    return [sys.executable, "-c", PROFILE_ALL_THREADS, str(profile_to), *args]


# --- a big store, fast (bench_maintenance.py) ----------------------------------------------------


@dataclass
class BulkStoreInfo:
    db_path: Path
    sessions: int  # sessions left in the file
    dropped: int  # sessions deleted after the build (their pages are on the freelist)
    events: int  # events left in the file
    build_s: float
    db_bytes: int
    page_count: int
    freelist_count: int

    @property
    def freelist_ratio(self) -> float:
        return self.freelist_count / self.page_count if self.page_count else 0.0


def build_bulk_store(
    data_dir: Path, *, sessions: int, events_per_session: int, drop_every: int = 0, seed: int = 20260101
) -> BulkStoreInfo:
    """Fill `<data_dir>/zocrates-data/sessions.db` with `sessions` research chats of
    `events_per_session` events each (the daemon's seed bookkeeping event first), created over the
    last 90 days; then, if `drop_every` > 1, delete every `drop_every`-th session with its events,
    leaving their pages free. ~200 MB in ~15 s on 2 cores.

    Tables come from the daemon's own session service. Rows are what `append_event` stores
    (`json.dumps` of `Event.model_dump(exclude_none=True, mode="json")`, naive-UTC DATETIME text),
    built from four template chats with fresh ids and timestamps per session, and inserted with
    `executemany` in one rollback-journal transaction (synchronous off: this is a build, not a
    store). The file is put back in WAL mode at the end, as the daemon keeps it.
    """
    from google.adk.events import Event

    from zocratesd.core.daemon import _bookkeeping_event
    from zocratesd.store import APP_NAME, USER_ID, close_session_services, get_session_service
    from zocratesd.store.database import db_path as store_db_path

    t_start = timer()
    data_dir.mkdir(parents=True, exist_ok=True)
    db = store_db_path(data_dir)

    async def make_tables() -> None:
        await get_session_service(data_dir).prepare_tables()
        await close_session_services(data_dir)

    asyncio.run(make_tables())

    rng = random.Random(seed)
    gen = TextGen(seed + 1)
    templates = [
        [ev.model_dump(exclude_none=True, mode="json") for ev in research_chat(gen, events_per_session - 1, 0.0)]
        for _ in range(4)
    ]
    now = time.time()

    def sql_dt(epoch: float) -> str:
        return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")

    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        conn.execute("INSERT OR REPLACE INTO app_states VALUES (?, '{}', ?)", (APP_NAME, sql_dt(now - 90 * 86400.0)))
        conn.execute(
            "INSERT OR REPLACE INTO user_states VALUES (?, ?, '{}', ?)", (APP_NAME, USER_ID, sql_dt(now - 90 * 86400.0))
        )
        ids: list[str] = []
        for n in range(sessions):
            created = now - rng.uniform(1.0, 90.0) * 86400.0
            sid = _session_id(created, rng)
            ids.append(sid)
            state = {"title": gen.text(40).rstrip(".?"), "created_at": created}
            seed_ev = _bookkeeping_event(state).model_dump(exclude_none=True, mode="json")
            seed_ev["timestamp"] = created + 0.005
            rows = [seed_ev]
            inv_map: dict[str, str] = {}
            for tpl in templates[n % len(templates)]:
                ev = dict(tpl)
                ev["id"] = Event.new_id()
                ev["timestamp"] = created + 1.0 + tpl["timestamp"]
                inv = inv_map.setdefault(tpl["invocation_id"], f"e-{uuid.uuid4()}")
                ev["invocation_id"] = inv
                rows.append(ev)
            conn.executemany(
                "INSERT INTO events (id, app_name, user_id, session_id, invocation_id, timestamp, event_data)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(ev["id"], APP_NAME, USER_ID, sid, ev["invocation_id"], sql_dt(ev["timestamp"]), json.dumps(ev))
                 for ev in rows],
            )
            conn.execute(
                "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time) VALUES (?, ?, ?, ?, ?, ?)",
                (APP_NAME, USER_ID, sid, json.dumps(state), sql_dt(created), sql_dt(rows[-1]["timestamp"])),
            )
        conn.execute("COMMIT")
        dropped = ids[::drop_every] if drop_every > 1 else []
        if dropped:
            conn.execute("BEGIN")
            conn.executemany("DELETE FROM events WHERE app_name = ? AND user_id = ? AND session_id = ?",
                             [(APP_NAME, USER_ID, sid) for sid in dropped])
            conn.executemany("DELETE FROM sessions WHERE app_name = ? AND user_id = ? AND id = ?",
                             [(APP_NAME, USER_ID, sid) for sid in dropped])
            conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL")
        page_count = conn.execute("PRAGMA page_count").fetchone()[0]
        freelist = conn.execute("PRAGMA freelist_count").fetchone()[0]
        n_events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        conn.close()
    return BulkStoreInfo(
        db_path=db,
        sessions=sessions - len(dropped),
        dropped=len(dropped),
        events=n_events,
        build_s=timer() - t_start,
        db_bytes=db.stat().st_size,
        page_count=page_count,
        freelist_count=freelist,
    )
