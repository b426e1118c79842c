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
        self.proc = subprocess.Popen(
            zocratesd_cmd(*args, profile_to=self.profile_to),
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
    line is parsed with json.loads, as a real client does."""

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
            m = json.loads(line)
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

    from zocratesd.daemon import _bookkeeping_event
    from zocratesd.store import APP_NAME, USER_ID, close_session_services, get_session_service
    from zocratesd.store.service import db_path as store_db_path

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
