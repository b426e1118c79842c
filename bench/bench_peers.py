"""Three ways to serve the same sessions, in one run: zocratesd, in-process ADK defaults, `adk api_server`.

    ./dev bench bench/bench_peers.py            # full run
    ./dev bench bench/bench_peers.py --quick    # smoke run (small data, few rounds; targets not judged)

The head-to-head behind `bench/run_all`'s main table (bench/README.md has the details):
1. builds one store (bench_shim.build: `--sessions` sessions with research chats of 100, 1000 and
   5000 events for the reads) plus history sessions of `--sizes` events for the turns, and a
   second, small store of 100 sessions (list 100, and the 20-chunk model's turns); each side gets
   its own copy of the same files;
2. zocratesd: real `zocratesd serve` daemons over the Unix socket (its own post-turn compaction on,
   as shipped); in-process ADK: `Runner` + `DatabaseSessionService` with ADK's defaults
   (bench_turns.Peer); `adk api_server`: ADK's own FastAPI server (bench_shim.start_peer) over
   HTTP/SSE. All three run the same coordinator: the daemon's `offline` model and `search_library`
   over the same library (the "instant model"), or zocratesd's OpenAI-compatible client against a
   local server streaming 20 chunks (tests/fake_openai.py);
3. times, alternating the three round by round: create session, a turn's TTFT and total (instant
   model; 20 streamed chunks), a turn at each history size, GET one session of 100/1000/5000
   events, list 100/1000 sessions, 8 and 32 sessions turning at once, `zocratesd stdio` to its first
   reply, cold start to a first answered request, idle and peak RSS;
4. checks that the three give the same answers and read the same events, then writes
   bench/out/bench_peers.json (what run_all tabulates and plots) and prints a short summary.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_shim  # noqa: E402
import bench_store  # noqa: E402
import bench_turns  # noqa: E402
from _data import library_passages, write_library  # noqa: E402
from _paths import OUT_DIR  # noqa: E402
from _procs import DaemonProc, daemon_env, short_tmpdir  # noqa: E402
from _report import env_info, summarize, timer, write_json  # noqa: E402
from _rpc import INITIALIZE_PARAMS, RpcClient  # noqa: E402
from _stores import build_chat_sessions, build_store, copy_db  # noqa: E402
from fake_openai import Behaviour, FakeOpenAI  # noqa: E402  (tests/, on sys.path by _paths)

from zocratesd.library import dense  # noqa: E402

APP, USER = bench_shim.APP, bench_shim.USER
CHUNKS = 20  # the "20 streamed chunks"
WORDS_PER_CHUNK = 3  # what tests/fake_openai.py streams per chunk
CONC_TURNS = 3  # turns per session in the concurrent rows (each session turns this many times in a row)
SIDES = ("zocratesd", "adk_inproc", "adk_api_server")
IDLE_SETTLE_S = 2.0  # after start: the daemon's background warm-up turn is over by then

# An agent for `adk api_server`: the coordinator zocratesd runs, with the given model.
AGENT_OFFLINE = textwrap.dedent('''
    import shutil
    from pathlib import Path
    from google.adk.agents import LlmAgent
    from zocratesd.engine.models.offline import OfflineLlm
    from zocratesd.engine.tools import build_search_tool
    from zocratesd.library import dense
    from zocratesd.library.passages import PassagesFile

    dense.set_enabled({dense!r})  # as the daemon's `library.dense` (bench_peers --dense)
    # The daemon's retriever for a passages file (searched through the library index), on a copy
    # of its own: the index is written beside the file.
    _library = Path(__file__).resolve().parent / "library_passages.jsonl"
    shutil.copyfile({library!r}, _library)
    root_agent = LlmAgent(name="coordinator", model=OfflineLlm(),
                          tools=[build_search_tool(PassagesFile(_library))])
''')
AGENT_CHUNKS = AGENT_OFFLINE.replace(
    "OfflineLlm()", "OpenAICompatLlm(model='fake/model', base_url={base_url!r}, api_key='sk-bench')"
).replace("from zocratesd.engine.models.offline import OfflineLlm", "from zocratesd.engine.models.openai import OpenAICompatLlm")


class ChunkyModel(FakeOpenAI):
    """An instant OpenAI-compatible endpoint whose answer streams in exactly CHUNKS chunks."""

    @staticmethod
    def reply_for(body: dict[str, Any], use_tools: bool) -> dict[str, Any]:
        return {"content": " ".join(f"w{i}" for i in range(CHUNKS * WORDS_PER_CHUNK))}


def log(msg: str) -> None:
    print(f"[bench_peers] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=10, help="timed rounds of the quick rows (default 10)")
    p.add_argument("--history-rounds", type=int, default=4, help="timed rounds of the history turns (default 4)")
    p.add_argument("--conc-rounds", type=int, default=2, help="timed rounds of the concurrent rows (default 2)")
    p.add_argument("--cold-rounds", type=int, default=3, help="cold starts per server (default 3)")
    p.add_argument("--sessions", type=int, default=1000, help="sessions in the big store (default 1000)")
    p.add_argument("--sizes", default="100,1000,2000,5000", help="history sizes of the turn rows and the plot")
    p.add_argument("--peer-journal", choices=("delete", "wal"), default="delete",
                   help="journal mode of the ADK sides' copies (default delete: what ADK makes; it sets no WAL pragma)")
    p.add_argument("--quick", action="store_true", help="smoke run: 200 sessions, sizes 100,500, 2 rounds")
    p.add_argument("--no-dense", dest="dense", action="store_false",
                   help="search with BM25 alone on every side (`library.dense = false`); by default the dense stage"
                        " is on everywhere, as in the default install")
    p.add_argument("--library-items", type=int, default=2000,
                   help="items of the Zotero library whose idle RSS is read indexed and being indexed (default 2000)")
    p.add_argument("--out", type=Path, default=OUT_DIR / "bench_peers.json")
    a = p.parse_args(argv)
    a.sizes = sorted({int(x) for x in str(a.sizes).split(",") if x.strip()})
    if a.quick:
        a.rounds, a.history_rounds, a.conc_rounds, a.cold_rounds, a.sessions = 2, 2, 1, 1, 200
        a.library_items = 300
        a.sizes = [100, 500]
    return a


# --- adk api_server as a client sees it ----------------------------------------------------------


def api_turn(base: str, session_id: str, text: str) -> bench_turns.Turn:
    """POST /run_sse on a raw socket (request written at once, TCP_NODELAY; see bench_shim): the
    first partial answer text is TTFT, the end of the stream the total."""
    host, port = base.removeprefix("http://").split(":")
    body = json.dumps({"app_name": APP, "user_id": USER, "session_id": session_id, "streaming": True,
                       "new_message": {"role": "user", "parts": [{"text": text}]}}).encode()
    request = (f"POST /run_sse HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    first = ttft = None
    answer = ""
    buf = b""
    with socket.create_connection((host, int(port)), timeout=300) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = timer()
        s.sendall(request)
        while chunk := s.recv(65536):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if not line.startswith(b"data:"):
                    continue
                ev = json.loads(line[5:])
                parts = (ev.get("content") or {}).get("parts") or []
                if ev.get("partial"):
                    for part in parts:
                        if part.get("text"):
                            t = timer() - t0
                            first = t if first is None else first
                            if ttft is None and not part.get("thought"):
                                ttft = t
                elif ev.get("author") == "coordinator" and not any("function_call" in p or "function_response" in p for p in parts):
                    answer = "".join(p.get("text") or "" for p in parts if not p.get("thought"))
        total = timer() - t0
    return bench_turns.Turn(total, first, ttft, answer)


def rss_mib(pid: int) -> dict[str, float]:
    """VmRSS (now) and VmHWM (peak) of a process, MiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return {"rss": out.get("VmRSS", 0.0), "peak": out.get("VmHWM", 0.0)}


class Api:
    """`adk api_server` on a copy of a store, with one of the agents above."""

    def __init__(self, tmp: Path, db: Path, agent: str):
        bench_shim.PEER_AGENT = agent  # start_peer writes this module as the app
        self.proc, self.base = bench_shim.start_peer(tmp, db)
        self.http = httpx.Client(base_url=self.base, timeout=300)

    def new_session(self) -> str:
        return str(self.http.post(f"/apps/{APP}/users/{USER}/sessions", json={}).json()["id"])

    def close(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# --- the data -----------------------------------------------------------------------------------


def build_data(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    big_dir, read_ids = bench_shim.build(tmp / "big", args.sessions)
    big_db = big_dir / "zocrates-data" / "sessions.db"
    chats, _ = build_chat_sessions(tmp / "hist", [(f"h{n}", n, False) for n in args.sizes], seed=7)
    merge(big_db, tmp / "hist" / "zocrates-data" / "sessions.db")
    library = write_library(big_dir, library_passages(40))
    small_dir = tmp / "small"
    build_store(small_dir, sessions=100, events=10)
    write_library(small_dir, library_passages(40))
    return {"big": big_dir, "small": small_dir, "reads": read_ids, "history": {n: chats[f"h{n}"] for n in args.sizes},
            "library": library}


def merge(into: Path, part: Path) -> None:
    conn = sqlite3.connect(str(into))
    try:
        conn.execute("ATTACH DATABASE ? AS part", (str(part),))
        conn.execute("INSERT INTO sessions SELECT * FROM part.sessions")
        conn.execute("INSERT INTO events SELECT * FROM part.events")
        conn.commit()
        conn.execute("DETACH DATABASE part")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


# --- the run ------------------------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.extra: dict[str, Any] = {}

    def add(self, row: str, side: str, seconds: float | None, keep: bool = True) -> None:
        if keep and seconds is not None:
            self.samples.setdefault(row, {s: [] for s in SIDES})[side].append(seconds)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = timer()
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(SystemExit(128 + s)))
    with short_tmpdir("zbp") as tmp:
        log(f"building stores ({args.sessions} sessions, history sizes {args.sizes}) ...")
        data = build_data(tmp, args)
        rec = Recorder()
        run(args, tmp, data, rec)
    payload = {
        "benchmark": "bench_peers", "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "env": env_info(), "sides": list(SIDES),
        "rows": {row: {side: summarize(v) for side, v in d.items()} for row, d in rec.samples.items()},
        "extra": rec.extra, "wall_s": round(timer() - started, 1),
    }
    write_json(args.out, payload)
    for row, d in payload["rows"].items():
        log(f"{row}: " + ", ".join(f"{s} {d[s]['median_ms']:.1f} ms" if d[s]["median_ms"] is not None else f"{s} —" for s in SIDES))
    log(f"done in {payload['wall_s']:.0f} s; JSON in {args.out}")
    return 0


def run(args: argparse.Namespace, tmp: Path, data: dict[str, Any], rec: Recorder) -> None:
    runtime = tmp / "run"
    runtime.mkdir(mode=0o700)
    env = daemon_env(runtime)
    # The dense stage, on by default as in the default install (--no-dense: off): on every side alike.
    env["ZOCRATES_LIBRARY__DENSE"] = "true" if args.dense else "false"
    dense.set_enabled(args.dense)
    rec.extra["dense"] = args.dense
    copies = {}
    for store in ("big", "small"):
        src = data[store] / "zocrates-data" / "sessions.db"
        for side in ("inproc", "api"):
            copies[(store, side)] = tmp / f"{store}-{side}" / "sessions.db"
            copy_db(src, copies[(store, side)])
            # The journal mode ADK's service leaves a new file in (it sets no WAL pragma), as bench_turns.
            bench_turns.set_journal_mode(copies[(store, side)], args.peer_journal)
    # The cold starts get copies of the big store as built (the run adds sessions to the others).
    cold_dir = tmp / "cold-z"
    (cold_dir / "zocrates-data").mkdir(parents=True)
    copy_db(data["big"] / "zocrates-data" / "sessions.db", cold_dir / "zocrates-data" / "sessions.db")
    for name in ("library_passages.jsonl", "zocrates_config.json"):
        if (data["big"] / "zocrates-data" / name).exists():
            shutil.copy(data["big"] / "zocrates-data" / name, cold_dir / "zocrates-data" / name)
    copies[("big", "cold-api")] = tmp / "big-cold-api" / "sessions.db"
    copy_db(data["big"] / "zocrates-data" / "sessions.db", copies[("big", "cold-api")])
    bench_turns.set_journal_mode(copies[("big", "cold-api")], args.peer_journal)
    # Keep every session on zocratesd's side too (build_store's config does it for the big store).
    for store in ("small",):
        (data[store] / "zocrates-data" / "zocrates_config.json").write_text(
            json.dumps({"max_saved_sessions": None, "session_retention_days": None}))

    chunky = ChunkyModel(Behaviour(use_tools=False))
    zbig = DaemonProc(data_dir=data["big"], runtime_dir=runtime, env=env)
    zsmall = DaemonProc(data_dir=data["small"], runtime_dir=runtime, env=env | {"ZQ_BENCH_KEY": "sk-bench"})
    (data["small"] / "zocrates-data" / "zocrates_config.json").write_text(json.dumps({
        "max_saved_sessions": None, "session_retention_days": None,
        "model": {"provider": "openai", "name": "fake/model", "base_url": chunky.base_url, "api_key_env": "ZQ_BENCH_KEY"}}))
    started: list[Any] = []
    try:
        log("starting zocratesd (x2), adk api_server (x2), in-process ADK (x2) ...")
        for z in (zbig, zsmall):
            z.start()
            started.append(z)
        api_big = Api(tmp / "api-big", copies[("big", "api")], AGENT_OFFLINE.format(library=str(data["library"]), dense=args.dense))
        started.append(api_big)
        api_small = Api(tmp / "api-small", copies[("small", "api")],
                        AGENT_CHUNKS.format(library=str(data["library"]), base_url=chunky.base_url, dense=args.dense))
        started.append(api_small)
        in_big = bench_turns.Peer(copies[("big", "inproc")], data["library"])
        in_small = bench_turns.Peer(copies[("small", "inproc")], data["library"])
        from zocratesd.engine.models.openai import OpenAICompatLlm

        in_small.runner.agent.model = OpenAICompatLlm(model="fake/model", base_url=chunky.base_url, api_key="sk-bench")
        zc_big, zc_small = RpcClient(zbig.socket_path), RpcClient(zsmall.socket_path)
        for c in (zc_big, zc_small):
            c.call("initialize", INITIALIZE_PARAMS)
            bench_turns.z_new_session(c)  # a write: answered once the engine has loaded (in the background)
        time.sleep(IDLE_SETTLE_S)  # the daemon's warm-up turn, after its engine loaded
        # Idle RSS: the engine loaded, nothing asked yet but a session made; the peer likewise.
        api_big.new_session()
        api_big.http.get(f"/apps/{APP}/users/{USER}/sessions")
        rec.extra["rss_idle_mib"] = {"zocratesd": rss_mib(zbig.proc.pid)["rss"], "adk_api_server": rss_mib(api_big.proc.pid)["rss"]}
        # The same after one turn, whose search loads the dense model (issue 31: it is not loaded at start).
        text = bench_turns.QUESTIONS[0]
        bench_turns.z_turn(zc_big, bench_turns.z_new_session(zc_big), text)
        api_turn(api_big.base, api_big.new_session(), text)
        time.sleep(IDLE_SETTLE_S / 4)
        rec.extra["rss_searched_mib"] = {"zocratesd": rss_mib(zbig.proc.pid)["rss"],
                                         "adk_api_server": rss_mib(api_big.proc.pid)["rss"]}
        measure(args, rec, data, zc_big, zc_small, zbig, in_big, in_small, api_big, api_small, env, tmp)
        rec.extra["rss_peak_mib"] = {"zocratesd": rss_mib(zbig.proc.pid)["peak"], "adk_api_server": rss_mib(api_big.proc.pid)["peak"]}
        for c in (zc_big, zc_small):
            c.close()
        in_big.close()
        in_small.close()
    finally:
        for s in reversed(started):
            if isinstance(s, DaemonProc):
                s.stop()
            else:
                s.close()
        chunky.close()
    cold_starts(args, rec, env, tmp, cold_dir, data["library"], copies[("big", "cold-api")])
    library_rss(args, rec, env, tmp)


def library_rss(args: argparse.Namespace, rec: Recorder, env: dict[str, str], tmp: Path) -> None:
    """Idle RSS of `zocratesd serve` on a Zotero library (`--library-items`, a tenth with full
    text), what a user runs: started on it unindexed (the daemon indexes it in the background,
    embedding its chunks: read when the index is ready, and the peak while indexing), then
    started again on it indexed (read once ready, before any search, and after one search)."""
    from zoterofixture import build_zotero_dir, generate_library

    data_dir = tmp / "zotero-rss"
    gen = generate_library(args.library_items, max(1, args.library_items // 10), pages=5, seed=11)
    build_zotero_dir(data_dir, gen.items, gen.collections)
    (data_dir / "zocrates-data").mkdir(exist_ok=True)
    (data_dir / "zocrates-data" / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}}))
    out: dict[str, float] = {}
    for phase in ("indexing", "indexed"):
        d = DaemonProc(data_dir=data_dir, runtime_dir=tmp / "run", env=env)
        d.start()
        try:
            with RpcClient(d.socket_path) as c:
                c.call("initialize", INITIALIZE_PARAMS)
                deadline = timer() + 600
                while c.call("_zocrates/library/status", {})[0]["state"] != "ready":
                    if timer() > deadline:
                        raise RuntimeError("the library was not indexed in 600 s")
                    time.sleep(0.2)
                sid = bench_turns.z_new_session(c)
                time.sleep(IDLE_SETTLE_S)
                mem = rss_mib(d.proc.pid)
                if phase == "indexing":
                    out["indexed at start: idle after indexing"] = mem["rss"]
                    out["indexed at start: peak while indexing"] = mem["peak"]
                else:
                    out["already indexed: idle before a search"] = mem["rss"]
                    bench_turns.z_turn(c, sid, bench_turns.QUESTIONS[0])
                    time.sleep(IDLE_SETTLE_S / 4)
                    out["already indexed: after the first search"] = rss_mib(d.proc.pid)["rss"]
        finally:
            d.stop()
    rec.extra["rss_library_mib"] = out
    log("library RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in out.items()))


def measure(args: argparse.Namespace, rec: Recorder, data: dict[str, Any], zc: RpcClient, zc_small: RpcClient,
            zbig: DaemonProc, in_big: Any, in_small: Any, api_big: Api, api_small: Api, env: dict[str, str],
            tmp: Path) -> None:
    checks: dict[str, Any] = {"answers_compared": 0}
    rec.extra["checks"] = checks
    question = bench_turns.QUESTIONS

    def turn_row(row: str, r: int, keep: bool, z_client: RpcClient, inproc: Any, api: Api, sids: dict[str, str] | None,
                 compare: bool = True) -> None:
        text = question[r % len(question)]
        if sids is None:
            sids = {"zocratesd": bench_turns.z_new_session(z_client), "adk_inproc": inproc.run(inproc.new_session()),
                    "adk_api_server": api.new_session()}
        got = {}
        order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
        for side in order:
            gc.collect()
            if side == "zocratesd":
                got[side] = bench_turns.z_turn(z_client, sids[side], text)
            elif side == "adk_inproc":
                got[side] = inproc.run(inproc.turn(sids[side], text))
            else:
                got[side] = api_turn(api.base, sids[side], text)
        answers = {t.answer for t in got.values()}
        if compare and (len(answers) != 1 or not next(iter(answers))):
            raise AssertionError(f"{row}: the three answers differ: " + "; ".join(f"{k}: {v.answer[:120]!r}" for k, v in got.items()))
        checks["answers_compared"] += 1
        for side, t in got.items():
            rec.add(f"{row}: total", side, t.total, keep)
            rec.add(f"{row}: TTFT", side, t.ttft, keep)
            if row.endswith("0 events"):
                rec.add(f"{row}: first streamed text", side, t.first_chunk, keep)

    total = args.rounds + 1
    log(f"single-session rows, {args.rounds} rounds after a warm-up ...")
    for r in range(total):
        keep = r > 0
        # create session
        for side in (SIDES if r % 2 == 0 else tuple(reversed(SIDES))):
            t0 = timer()
            if side == "zocratesd":
                bench_turns.z_new_session(zc)
            elif side == "adk_inproc":
                in_big.run(in_big.svc.create_session(app_name=APP, user_id=USER))
            else:
                api_big.new_session()
            rec.add("create session", side, timer() - t0, keep)
        turn_row("turn, instant model, 0 events", r, keep, zc, in_big, api_big, None)
        turn_row(f"turn, {CHUNKS} streamed chunks, 0 events", r, keep, zc_small, in_small, api_small, None, compare=True)
        # reads
        for n, sid in data["reads"].items():
            counts: dict[str, int] = {}  # messages (zocratesd, in-process), events (api_server)
            for side in SIDES:
                gc.collect()
                if side == "zocratesd":
                    t0 = timer()
                    ui, _ = zc.call("_zocrates/session/get", {"sessionId": sid})
                    dt = timer() - t0
                    counts[side] = len(ui["messages"])
                elif side == "adk_inproc":
                    dt, counts[side] = in_big_get(in_big, sid)
                else:
                    t0 = timer()
                    body = api_big.http.get(f"/apps/{APP}/users/{USER}/sessions/{sid}").json()
                    dt = timer() - t0
                    counts[side] = len(body["events"])
                rec.add(f"GET session, {n} events", side, dt, keep)
            if counts["zocratesd"] != counts["adk_inproc"] or counts["adk_api_server"] != n:
                raise AssertionError(f"GET session of {n} events: {counts}")
        for label, z_client, inproc, api in (("list 100 sessions", zc_small, in_small, api_small),
                                              (f"list {args.sessions} sessions", zc, in_big, api_big)):
            for side in SIDES:
                gc.collect()
                t0 = timer()
                if side == "zocratesd":
                    n = len(z_client.call("session/list", {})[0]["sessions"])
                elif side == "adk_inproc":
                    n = len(inproc.run(inproc.svc.list_sessions(app_name=APP, user_id=USER)).sessions)
                else:
                    n = len(api.http.get(f"/apps/{APP}/users/{USER}/sessions").json())
                rec.add(label, side, timer() - t0, keep)
        gc.collect()
        rec.add("zocratesd stdio to first reply (daemon up)", "zocratesd", bench_store.stdio_first_reply(data["big"], env), keep)
        log(f"  round {r}/{args.rounds} done")

    log(f"history rows at {args.sizes} events, {args.history_rounds} rounds after a warm-up ...")
    for r in range(args.history_rounds + 1):
        for n, chat in data["history"].items():
            sids = {s: chat.session_id for s in SIDES}
            turn_row(f"turn at {n} events of history", r, r > 0, zc, in_big, api_big, sids)
        log(f"  round {r}/{args.history_rounds} done")

    for conc in (8, 32):
        log(f"{conc} sessions x {CONC_TURNS} turns at once, {args.conc_rounds} rounds ...")
        clients = [RpcClient(zbig.socket_path) for _ in range(conc)]
        try:
            for c in clients:
                c.call("initialize", INITIALIZE_PARAMS)
            for r in range(args.conc_rounds):
                texts = [question[(r + k) % len(question)] for k in range(CONC_TURNS)]
                for side in (SIDES if r % 2 == 0 else tuple(reversed(SIDES))):
                    gc.collect()
                    if side == "zocratesd":
                        sids = [bench_turns.z_new_session(c) for c in clients]
                        wall, turns = bench_turns.z_concurrent(clients, sids, texts)
                    elif side == "adk_inproc":
                        sids = [in_big.run(in_big.new_session()) for _ in clients]
                        wall, turns = in_big.run(inproc_concurrent(in_big, sids, texts))
                    else:
                        sids = [api_big.new_session() for _ in clients]
                        wall, turns = api_concurrent(api_big, sids, texts)
                    # ADK's defaults (no busy timeout, a rollback journal) can fail turns under load
                    # ("database is locked"): counted and reported, only completed turns are timed.
                    ok = [t for t in turns if t.answer]
                    failed = conc * CONC_TURNS - len(ok)
                    if failed and side == "zocratesd":
                        raise AssertionError(f"zocratesd: {failed} of {conc * CONC_TURNS} concurrent turns failed")
                    rec.extra.setdefault(f"{conc} concurrent: failed turns", {}).setdefault(side, []).append(failed)
                    rec.extra.setdefault(f"{conc} concurrent: turns/s", {}).setdefault(side, []).append(len(ok) / wall)
                    for t in ok:
                        rec.add(f"{conc} sessions turning at once: one turn", side, t.total)
        finally:
            for c in clients:
                c.close()


def in_big_get(peer: Any, sid: str) -> tuple[float, int]:
    from zocratesd.store.writer import format_session_for_ui

    async def go() -> tuple[float, int]:
        t0 = timer()
        s = await peer.svc.get_session(app_name=APP, user_id=USER, session_id=sid)
        ui = format_session_for_ui(s)
        return timer() - t0, len(ui["messages"])

    return peer.run(go())


async def inproc_concurrent(peer: Any, sids: list[str], texts: list[str]) -> tuple[float, list[bench_turns.Turn]]:
    """bench_turns.Peer.concurrent, with a failed turn recorded (no answer) instead of raised."""
    import asyncio

    turns: list[bench_turns.Turn] = []

    async def client(sid: str) -> None:
        for text in texts:
            try:
                turns.append(await peer.turn(sid, text))
            except Exception:
                turns.append(bench_turns.Turn(0.0, None, None, ""))

    t0 = timer()
    await asyncio.gather(*(client(s) for s in sids))
    return timer() - t0, turns


def api_concurrent(api: Api, sids: list[str], texts: list[str]) -> tuple[float, list[bench_turns.Turn]]:
    """One thread per session, each running its turns one after another, all at once."""
    barrier = threading.Barrier(len(sids) + 1)
    turns: list[bench_turns.Turn] = []
    ends: list[float] = []
    errors: list[BaseException] = []

    def client(sid: str) -> None:
        try:
            barrier.wait()
            for text in texts:
                try:
                    turns.append(api_turn(api.base, sid, text))
                except (OSError, ValueError):
                    turns.append(bench_turns.Turn(0.0, None, None, ""))
        except BaseException as exc:
            errors.append(exc)
        finally:
            ends.append(timer())

    threads = [threading.Thread(target=client, args=(s,), daemon=True) for s in sids]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = timer()
    for t in threads:
        t.join(600)
    if errors:
        raise errors[0]
    return max(ends) - t0, turns


# The cold-start rows (issue 22): seconds from spawning the server to each milestone, asked one
# after the other on one connection, as a client that just started it would.
COLD_ROWS = ("cold start: to first reply", "cold start: to first session list", "cold start: to first completed turn")
# The same, started as a user's shell or a service starts it (issue 31): the `zocratesd` console
# script, no HTTP shim; zocratesd's column only (the peer's rows above are its counterpart).
SCRIPT_COLD_ROWS = ("cold start, console script, --no-http: to first reply",
                    "cold start, console script, --no-http: to first session list",
                    "cold start, console script, --no-http: to first completed turn")
SCRIPT_COLD_PER_ROUND = 3  # zocratesd starts in ~0.3 s: more samples for its median, at little cost
COLD_POLL_S = 0.002  # how often the client tries to connect while the server starts


def zocratesd_cold(data_dir: Path, runtime_dir: Path, env: dict[str, str], sessions: int, text: str,
                   script: bool = False) -> list[float]:
    """`zocratesd serve` on `data_dir` (HTTP shim on, on a free port; or with `script`, the venv's
    `zocratesd` console script with --no-http): spawn to its first `initialize` reply, to its
    first `session/list` (all `sessions`), to its first completed instant-model turn
    (`session/new` + `session/prompt`). Stops it (SIGTERM) before returning."""
    sock = runtime_dir / "cold.sock"
    http = ["--no-http"] if script else ["--http-port", "0"]
    d = DaemonProc(data_dir=data_dir, runtime_dir=runtime_dir, env=env, args=["--socket", str(sock), *http])
    if script:
        d.command = [str(Path(sys.executable).parent / "zocratesd")]
    t0 = timer()
    with open(d.stderr_path, "ab") as err:
        d.proc = subprocess.Popen([*d.command, "serve", "--zotero-data-dir", str(data_dir), *d.args], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    try:
        client = None
        while client is None:
            if d.proc.poll() is not None or timer() - t0 > 60:
                raise RuntimeError(f"zocratesd did not start: {d.stderr_tail()}")
            try:
                client = RpcClient(sock)
            except OSError:
                time.sleep(COLD_POLL_S)
        with client:
            client.call("initialize", INITIALIZE_PARAMS)
            first = timer() - t0
            listed = len(client.call("session/list", {})[0]["sessions"])
            listed_at = timer() - t0
            if listed < sessions:
                raise AssertionError(f"zocratesd cold start listed {listed} sessions, expected {sessions} or more")
            turn = bench_turns.z_turn(client, bench_turns.z_new_session(client), text)
            turned = timer() - t0
            if not turn.answer:
                raise AssertionError("zocratesd cold start: the first turn has no answer")
        return [first, listed_at, turned]
    finally:
        code = d.stop()
        if code not in (0, None):
            raise RuntimeError(f"cold-start daemon exited {code} on SIGTERM:\n{d.stderr_tail()}")


def api_server_cold(tmp: Path, db: Path, agent: str, sessions: int, text: str) -> list[float]:
    """`adk api_server` on `db`: spawn to its first answered request (GET /list-apps, the first
    request it can answer), to its first session list, to its first completed turn."""
    bench_shim.PEER_AGENT = agent
    t0 = timer()
    proc, base = bench_shim.spawn_peer(tmp, db)
    try:
        with httpx.Client(base_url=base, timeout=300) as http:
            while True:
                if proc.poll() is not None or timer() - t0 > 60:
                    raise RuntimeError(f"adk api_server did not start (exit {proc.poll()})")
                try:
                    if http.get("/list-apps", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(COLD_POLL_S)
            first = timer() - t0
            listed = len(http.get(f"/apps/{APP}/users/{USER}/sessions").json())
            listed_at = timer() - t0
            if listed < sessions:
                raise AssertionError(f"adk api_server cold start listed {listed} sessions, expected {sessions} or more")
            sid = str(http.post(f"/apps/{APP}/users/{USER}/sessions", json={}).json()["id"])
            turn = api_turn(base, sid, text)
            turned = timer() - t0
            if not turn.answer:
                raise AssertionError("adk api_server cold start: the first turn has no answer")
        return [first, listed_at, turned]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def cold_starts(args: argparse.Namespace, rec: Recorder, env: dict[str, str], tmp: Path, z_dir: Path, library: Path,
                api_db: Path) -> None:
    """The cold-start rows on copies of the big store as built (`--sessions` sessions, and one more
    per cold turn before), both servers alternating: a first round untimed (first-run costs:
    bytecode, page cache), then `--cold-rounds`."""
    log(f"cold starts, {args.cold_rounds} each ...")
    text = bench_turns.QUESTIONS[0]
    agent = AGENT_OFFLINE.format(library=str(library), dense=args.dense)
    for r in range(args.cold_rounds + 1):
        for side in (SIDES if r % 2 == 0 else tuple(reversed(SIDES))):
            if side == "zocratesd":
                times = zocratesd_cold(z_dir, tmp / "run", env, args.sessions, text)
                for _ in range(SCRIPT_COLD_PER_ROUND):
                    got = zocratesd_cold(z_dir, tmp / "run", env, args.sessions, text, script=True)
                    for row, t in zip(SCRIPT_COLD_ROWS, got, strict=True):
                        rec.add(row, side, t, keep=r > 0)
            elif side == "adk_api_server":
                times = api_server_cold(tmp / f"cold-api-{r}", api_db, agent, args.sessions, text)
            else:
                continue
            for row, t in zip(COLD_ROWS, times, strict=True):
                rec.add(row, side, t, keep=r > 0)


if __name__ == "__main__":
    sys.exit(main())
