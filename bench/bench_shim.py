"""The HTTP shim against `adk api_server` serving the same database, in the same run.

    ./dev bench bench/bench_shim.py            # full run
    ./dev bench bench/bench_shim.py --quick    # smoke run

1. builds one store with `--sessions` sessions holding three research chats of 100, 1000 and 5000
   events (bench/_stores.build_store, merged with SQLite ATTACH), and copies it for the peer;
2. starts the real daemon (`zocratesd serve --http-port 0`) on it and `adk api_server` on the copy,
   with an instant offline model (research/peer_bench.md: how the peer runs offline);
3. times, alternating the two systems round by round, with one keep-alive httpx client each (the
   client's orjson parse included): `GET /sessions/{id}` at 100/1000/5000 events against the peer's
   `GET /apps/zocrates/users/local/sessions/{id}`, `GET /sessions` against the peer's session list, and
   a `/chat` turn's time to its first SSE event on a fresh session against the peer's `/run_sse`;
4. prints a markdown table (targets: <= 60 ms at 5000 events; every row >= 3x faster than the peer)
   and writes bench/out/bench_shim.json;
5. and, apart (`kept_alive` in the JSON), a small request (`GET /health` with the token; the peer's
   `GET /list-apps`) on one kept-alive connection against the same on a fresh connection each time,
   the floor: a request on a kept-alive connection must cost no more than one that connects first
   (without TCP_NODELAY on the daemon's side it cost ~40 ms more: Nagle and the client's delayed ACK).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _paths import OUT_DIR  # noqa: E402
from _procs import DaemonProc, daemon_env, short_tmpdir  # noqa: E402
from _report import env_info, markdown_table, summarize, timer, write_json  # noqa: E402
from _stores import build_store, copy_db  # noqa: E402

TARGET_GET_5000_MS = 60.0
TARGET_RATIO = 3.0
# Requests a kept-alive round sends one after the other (the first, which connects, is not timed).
KEPT_ALIVE_REQUESTS = 20
READY_TIMEOUT_S = 90.0
APP, USER = "zocrates", "local"
SIZES = (100, 1000, 5000)

PEER_AGENT = textwrap.dedent(
    '''
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    TEXT = "An instant answer from the peer's offline model, in a few chunks."


    class InstantLlm(BaseLlm):
        model: str = "instant"

        @classmethod
        def supported_models(cls):
            return ["instant"]

        async def generate_content_async(self, llm_request, stream=False):
            if stream:
                for word in TEXT.split(" "):
                    yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=word + " ")]), partial=True)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=TEXT)]), partial=False)


    root_agent = LlmAgent(name="coordinator", model=InstantLlm(), instruction="Answer.")
    '''
)


def log(msg: str) -> None:
    print(f"[bench_shim] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sessions", type=int, default=1000, help="sessions in the store (default 1000)")
    p.add_argument("--rounds", type=int, default=15, help="timed rounds per row (default 15)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="3 rounds, 200 sessions")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup, args.sessions = 3, 1, 200
    return args


def build(tmp: Path, n_sessions: int) -> tuple[Path, dict[int, str]]:
    """One store: `n_sessions` sessions, three of them research chats of SIZES events."""
    main = tmp / "zotero"
    big = build_store(main, sessions=max(n_sessions - 2, 1), events=SIZES[-1])
    ids = {SIZES[-1]: big.big_session_id}
    for n in SIZES[:-1]:
        part = build_store(tmp / f"part{n}", sessions=1, events=n, seed=n)
        ids[n] = part.big_session_id
        conn = sqlite3.connect(str(big.db_path))
        try:
            conn.execute("ATTACH DATABASE ? AS part", (str(part.db_path),))
            conn.execute("INSERT INTO sessions SELECT * FROM part.sessions")
            conn.execute("INSERT INTO events SELECT * FROM part.events")
            conn.commit()
            conn.execute("DETACH DATABASE part")
        finally:
            conn.close()
    return main, ids


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen[bytes], headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:3]} exited {proc.returncode}")
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer in {READY_TIMEOUT_S:.0f} s")


def start_daemon(data_dir: Path, runtime_dir: Path) -> tuple[DaemonProc, dict[str, Any]]:
    """The daemon with its HTTP shim on a free port, once `/health` answers; and its daemon.json."""
    daemon = DaemonProc(data_dir=data_dir, runtime_dir=runtime_dir, env=daemon_env(runtime_dir), args=["--http-port", "0"])
    daemon.start()
    info = daemon.info
    assert daemon.proc is not None
    wait_http(f"http://127.0.0.1:{info['http']['port']}/health", daemon.proc)
    return daemon, info


def start_peer(tmp: Path, db: Path) -> tuple[subprocess.Popen[bytes], str]:
    proc, url = spawn_peer(tmp, db)
    wait_http(url + "/list-apps", proc)
    return proc, url


def spawn_peer(tmp: Path, db: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`adk api_server` on `db` with PEER_AGENT as its app, spawned (not waited for)."""
    agents = tmp / "agents"
    pkg = agents / APP
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import agent\n")
    (pkg / "agent.py").write_text(PEER_AGENT)
    port = free_port()
    adk = Path(sys.executable).with_name("adk")
    proc = subprocess.Popen(
        [str(adk), "api_server", str(agents), "--host", "127.0.0.1", "--port", str(port),
         "--session_service_uri", f"sqlite+aiosqlite:///{db}", "--log_level", "error"],
        cwd=str(tmp), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=tempfile.TemporaryFile(),
        env={k: v for k, v in os.environ.items() if not k.startswith("GOOGLE_")},
    )
    return proc, f"http://127.0.0.1:{port}"


def first_sse_event(base_url: str, path: str, body: dict[str, Any], headers: dict[str, str]) -> float:
    """Seconds to the first `data:` line of a POST, on a raw socket (request written at once,
    TCP_NODELAY, like a browser's fetch): httpx writes headers and body apart, and Nagle plus delayed
    ACK then adds ~40 ms to every server alike. The rest is read (untimed) so the turn ends."""
    host, port = base_url.removeprefix("http://").split(":")
    payload = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{head}Content-Type: application/json\r\n"
               f"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload
    with socket.create_connection((host, int(port)), timeout=120) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = timer()
        s.sendall(request)
        seen, first = b"", None
        while chunk := s.recv(65536):
            if first is None:
                seen += chunk
                if b"data:" in seen:
                    first = timer() - t0
                    assert seen.startswith(b"HTTP/1.1 200"), seen[:200]
    assert first is not None, f"no SSE event: {seen[:300]!r}"
    return first


def timed_get(client: httpx.Client, path: str) -> tuple[float, Any]:
    t0 = timer()
    r = client.get(path)
    body = orjson.loads(r.content)
    dt = timer() - t0
    assert r.status_code == 200, (path, r.status_code)
    return dt, body


def measure(args: argparse.Namespace, ours: httpx.Client, peer: httpx.Client, ids: dict[int, str]) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {}

    def record(row: str, who: str, value: float, keep: bool) -> None:
        if keep:
            samples.setdefault(row, {"ours": [], "peer": []})[who].append(value)

    # Correctness first: both see the same sessions and the same events.
    _, listing = timed_get(ours, "/sessions")
    _, peer_listing = timed_get(peer, f"/apps/{APP}/users/{USER}/sessions")
    assert len(listing["sessions"]) == len(peer_listing), (len(listing["sessions"]), len(peer_listing))
    for rnd in range(args.warmup + args.rounds):
        keep = rnd >= args.warmup
        for n, sid in ids.items():
            dt, body = timed_get(ours, f"/sessions/{sid}")
            assert body["session"]["id"] == sid
            record(f"GET /sessions/{{id}}, {n} events", "ours", dt, keep)
            dt, body = timed_get(peer, f"/apps/{APP}/users/{USER}/sessions/{sid}")
            assert len(body["events"]) == n, (n, len(body["events"]))
            record(f"GET /sessions/{{id}}, {n} events", "peer", dt, keep)
        dt, _ = timed_get(ours, "/sessions")
        record(f"GET /sessions ({len(listing['sessions'])} sessions)", "ours", dt, keep)
        dt, _ = timed_get(peer, f"/apps/{APP}/users/{USER}/sessions")
        record(f"GET /sessions ({len(listing['sessions'])} sessions)", "peer", dt, keep)
        sid = ours.post("/sessions", json={}).json()["session"]["id"]
        chat = {"prompt": "What is retrieval-augmented generation?", "session_id": sid, "active_items": [], "mode": "library"}
        dt = first_sse_event(str(ours.base_url).rstrip("/"), "/chat", chat, {"Authorization": ours.headers["authorization"]})
        record("/chat turn: time to first event", "ours", dt, keep)
        psid = peer.post(f"/apps/{APP}/users/{USER}/sessions", json={}).json()["id"]
        run = {"app_name": APP, "user_id": USER, "session_id": psid, "streaming": True,
               "new_message": {"role": "user", "parts": [{"text": "What is retrieval-augmented generation?"}]}}
        dt = first_sse_event(str(peer.base_url).rstrip("/"), "/run_sse", run, {})
        record("/chat turn: time to first event", "peer", dt, keep)
    return {row: {who: summarize(v) for who, v in d.items()} for row, d in samples.items()}


def raw_get(s: socket.socket, port: int, path: str, headers: dict[str, str]) -> float:
    """Seconds for one GET on `s`, written at once and read to the end of its Content-Length body."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    t0 = timer()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, "closed before the answer"
        data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    assert top.startswith(b"HTTP/1.1 200"), top[:200]
    length = next(int(line.split(b":")[1]) for line in top.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(65536)
    return timer() - t0


def connect_nodelay(port: int) -> socket.socket:
    """A connection as a browser's: TCP_NODELAY on the client's side, so any delay is the server's."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def kept_alive(args: argparse.Namespace, sides: dict[str, tuple[int, str, dict[str, str]]]) -> dict[str, Any]:
    """Per side (port, path, headers): KEPT_ALIVE_REQUESTS requests on one connection, and as many
    each on a fresh connection (connect included: the floor), alternating sides round by round."""
    samples: dict[str, dict[str, list[float]]] = {"kept": {}, "fresh": {}}
    for rnd in range(args.warmup + args.rounds):
        keep = rnd >= args.warmup
        for who, (port, path, headers) in sides.items():
            with connect_nodelay(port) as s:
                raw_get(s, port, path, headers)  # the first request on the connection: not timed
                kept = [raw_get(s, port, path, headers) for _ in range(KEPT_ALIVE_REQUESTS)]
            fresh = []
            for _ in range(KEPT_ALIVE_REQUESTS):
                t0 = timer()
                with connect_nodelay(port) as s:
                    raw_get(s, port, path, headers)
                fresh.append(timer() - t0)
            if keep:
                samples["kept"].setdefault(who, []).extend(kept)
                samples["fresh"].setdefault(who, []).extend(fresh)
    return {row: {who: summarize(v) for who, v in d.items()} for row, d in samples.items()}


def report_kept_alive(results: dict[str, Any]) -> bool:
    """The kept-alive table; met when a kept-alive request costs no more than a fresh connection's."""
    kept, fresh = results["kept"], results["fresh"]
    ok = kept["ours"]["median_ms"] <= fresh["ours"]["median_ms"]
    rows = [
        ["a fresh connection each (connect included: the floor)", f"{fresh['ours']['median_ms']:.2f}",
         f"{fresh['peer']['median_ms']:.2f}", "", ""],
        ["the same kept-alive connection", f"{kept['ours']['median_ms']:.2f}", f"{kept['peer']['median_ms']:.2f}",
         "<= the floor", "yes" if ok else "NO"],
    ]
    print()
    print(markdown_table([f"small GET, {KEPT_ALIVE_REQUESTS} in a row (median)", "zocratesd ms", "adk api_server ms",
                          "target", "met"], rows))
    return ok


def report(results: dict[str, Any]) -> bool:
    rows, ok = [], True
    for row, d in results.items():
        o, p = d["ours"]["median_ms"], d["peer"]["median_ms"]
        ratio = p / o if o else float("inf")
        target = f">= {TARGET_RATIO:.0f}x"
        passed = ratio >= TARGET_RATIO
        if "5000" in row and row.startswith("GET /sessions/"):
            target += f", <= {TARGET_GET_5000_MS:.0f} ms"
            passed = passed and o <= TARGET_GET_5000_MS
        ok = ok and passed
        rows.append([row, f"{o:.1f}", f"{p:.1f}", f"{ratio:.1f}x", target, "yes" if passed else "NO"])
    print(markdown_table(["operation (median)", "zocratesd ms", "adk api_server ms", "peer / ours", "target", "met"], rows))
    return ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = timer()
    with short_tmpdir("zbs") as tmp:
        log(f"building a store of {args.sessions} sessions with chats of {SIZES} events")
        data_dir, ids = build(tmp, args.sessions)
        peer_db = tmp / "peer" / "sessions.db"
        copy_db(data_dir / "zocrates-data" / "sessions.db", peer_db)
        runtime_dir = tmp / "run"
        runtime_dir.mkdir(mode=0o700)
        daemon, info = start_daemon(data_dir, runtime_dir)
        peer_proc = None
        try:
            peer_proc, peer_url = start_peer(tmp, peer_db)
            headers = {"Authorization": f"Bearer {info['token']}"}
            with httpx.Client(base_url=f"http://127.0.0.1:{info['http']['port']}", headers=headers, timeout=120) as ours, \
                    httpx.Client(base_url=peer_url, timeout=120) as peer:
                results = measure(args, ours, peer, ids)
            port, peer_port = info["http"]["port"], int(peer_url.rsplit(":", 1)[1])
            kept = kept_alive(args, {"ours": (port, "/health", headers), "peer": (peer_port, "/list-apps", {})})
        finally:
            daemon.stop()
            if peer_proc is not None and peer_proc.poll() is None:
                peer_proc.send_signal(signal.SIGTERM)
                try:
                    peer_proc.wait(30)
                except subprocess.TimeoutExpired:
                    peer_proc.kill()
    ok = report(results)
    kept_ok = report_kept_alive(kept)
    OUT_DIR.mkdir(exist_ok=True)
    write_json(OUT_DIR / "bench_shim.json", {"env": env_info(), "args": vars(args), "results": results,
                                            "kept_alive": kept, "targets_met": ok and kept_ok,
                                            "seconds": round(timer() - started, 1)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
