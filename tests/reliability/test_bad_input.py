"""Bad input on both faces at once: a seeded fuzzer over the NDJSON socket and the HTTP routes.

Two socket connections send invalid frames (tests/e2e/test_fuzz.py's generator: random bytes,
truncated frames, oversize frames, deep nesting, wrong types, unknown methods, hostile ids) while
two HTTP clients send invalid requests (random bytes, cut-off requests, hostile ids in paths,
traversal, wrong types and deep nesting in bodies, oversize and lying bodies, unknown routes, and
well-formed writes without the token, with a foreign Host or a foreign Origin). Valid reads go on
through both faces throughout and must keep answering correctly; afterwards a content digest of
every session and event row must equal the one taken before: the invalid input changed nothing.
"""

from __future__ import annotations

import importlib.util
import json
import random
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from rawrpc import RawConn
from relkit import QUESTIONS, integrity, reliability_daemon, store_digest

pytestmark = [pytest.mark.e2e, pytest.mark.reliability]

SEED = 20261212
SOCKET_FUZZERS = 2
HTTP_FUZZERS = 2
FRAMES_PER_SOCKET = 800
REQUESTS_PER_HTTP = 400
VALID_EVERY = 40  # a valid read after this many invalid messages, on the same connection or client
SMALL_FRAME_CAP = 64 * 1024  # as tests/e2e/test_fuzz.py: oversize frames stay cheap
MAX_BODY = 16 * 1024 * 1024  # the shim's body cap (shim/guard.py)
# What the shim may answer an invalid request: never a success, never a 500 (0: it closed the
# connection, which is what h11 does with bytes that are not HTTP).
HTTP_REFUSALS = {0, 400, 401, 403, 404, 405, 409, 411, 413, 414, 415, 422, 431, 501}
RPC_REFUSALS = {-32700, -32600, -32601, -32602, -32002}


def _e2e_fuzz() -> Any:
    """tests/e2e/test_fuzz.py, for its frame generator (one generator for both suites)."""
    path = Path(__file__).resolve().parents[1] / "e2e" / "test_fuzz.py"
    spec = importlib.util.spec_from_file_location("_e2e_fuzz_frames", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOSTILE_PATH_IDS = [
    "..%2F..%2Fetc%2Fpasswd", "..", "%2e%2e", "x%00y", "a" * 200, "session-1%2F..%2Fx", "%E2%80%AE", "%ff%fe",
    "' OR 1=1 --", "session-0-000000%0d%0aX-Injected:1", "C:%5CWindows", "~root", ".%2F.",
]
WRONG: list[Any] = [None, 0, -1, 1.5, True, [], {}, [1], {"a": 1}, "", "x" * 300]


def http_request(rng: random.Random, port: int, token: str, sid: str) -> bytes:
    """One invalid HTTP request (never a valid write), as raw bytes."""
    host = f"127.0.0.1:{port}"
    auth = f"Authorization: Bearer {token}\r\n"

    def req(method: str, path: str, body: bytes = b"", *, headers: str | None = None, ctype: str = "application/json") -> bytes:
        h = headers if headers is not None else f"Host: {host}\r\n{auth}"
        if body or method in ("POST", "PUT", "PATCH"):
            h += f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
        return f"{method} {path} HTTP/1.1\r\n{h}Connection: close\r\n\r\n".encode() + body

    kind = rng.randrange(12)
    if kind == 0:  # not HTTP at all
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
    if kind == 1:  # a valid request cut short (headers or body)
        full = req("POST", "/sessions", json.dumps({"title": "cut"}).encode())
        return full[: rng.randrange(1, len(full) - 1)]
    if kind == 2:  # wrong types and values in bodies
        route, body = rng.choice([
            ("/sessions", {"title": rng.choice(WRONG)}),
            ("/chat", {"prompt": rng.choice(WRONG[:9] + [" "]), "session_id": sid, "mode": "library"}),
            ("/chat", {"prompt": "hi", "session_id": rng.choice(WRONG[:9]), "mode": "library"}),
            ("/chat", {"prompt": rng.choice(WRONG[:9]), "session_id": sid, "mode": rng.choice(["x", 1, None]),
                       "active_items": rng.choice(WRONG)}),
            (f"/sessions/{sid}/rewind", {"invocation_id": rng.choice(WRONG[:9] + ["e-nope", "../x"])}),
            ("/chat/resume", {"session_id": sid, "response": rng.choice(WRONG)}),
        ])
        if route == "/sessions" and body["title"] is None:
            body["title"] = ""  # a null title is valid (the default): keep it invalid
        return req("POST", route, json.dumps(body).encode())
    if kind == 3:  # hostile ids in paths
        bad = rng.choice(HOSTILE_PATH_IDS)
        method, path = rng.choice([("GET", f"/sessions/{bad}"), ("DELETE", f"/sessions/{bad}"),
                                   ("POST", f"/sessions/{bad}/rewind"), ("GET", f"/sessions/{bad}/../{sid}")])
        return req(method, path, b'{"invocation_id": "x"}' if method == "POST" else b"")
    if kind == 4:  # unknown routes and methods
        method, path = rng.choice([("PUT", "/sessions"), ("PATCH", f"/sessions/{sid}"), ("GET", "/chat"),
                                   ("GET", "/../../etc/passwd"), ("GET", "/sessions/storage_stats/x"), ("TRACE", "/"),
                                   ("POST", "/sessions/" + sid + "/messages"), ("GET", "/" + "a" * 5000)])
        return req(method, path, b"{}" if method in ("PUT", "PATCH", "POST") else b"")
    if kind == 5:  # deep nesting
        depth = rng.choice([1000, 100_000])
        return req("POST", rng.choice(["/sessions", "/chat", "/register"]), b"[" * depth + b"]" * depth)
    if kind == 6:  # a body that lies about its size: over the cap, or longer than sent
        n = rng.choice([MAX_BODY + 1, 10**12])
        return (f"POST /sessions HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\n"
                f"Content-Length: {n}\r\nConnection: close\r\n\r\n").encode() + b'{"title":"x"}'
    if kind == 7:  # well-formed writes that must be refused: token, Host, Origin
        body = json.dumps({"title": "must not exist"}).encode()
        headers = rng.choice([
            f"Host: {host}\r\n",
            f"Host: {host}\r\nAuthorization: Bearer {token[:-2]}xx\r\n",
            f"Host: attacker.example:{port}\r\n{auth}",
            f"Host: {host}\r\n{auth}Origin: http://attacker.example\r\n",
        ])
        if rng.random() < 0.5:
            return req("DELETE", f"/sessions/{sid}", headers=headers)
        return req("POST", rng.choice(["/sessions", "/sessions/maintenance"]), body, headers=headers)
    if kind == 8:  # a body no browser form may send to a JSON route
        return req("POST", "/sessions", b"title=x", ctype=rng.choice(["text/plain", "application/x-www-form-urlencoded"]))
    if kind == 9:  # not JSON, not UTF-8
        return req("POST", rng.choice(["/sessions", "/chat", f"/sessions/{sid}/rewind"]),
                   rng.choice([b"{", b"\xff\xfe\x00", b'{"title": "\xed\xa0\x80"}', b"[]", b'"x"', b"null"]))
    if kind == 10:  # broken headers
        return rng.choice([
            f"POST /sessions HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Length: abc\r\n\r\n".encode(),
            f"GET /sessions HTTP/1.1\r\nHost: {host}\r\nHost: evil.example\r\n{auth}\r\n".encode(),
            f"GET /sessions HTTP/1.1\r\n{auth}\r\n".encode(),
            b"GET /sessions HTTP/9.9\r\n\r\n",
            f"GET /sessions HTTP/1.1\r\nHost: {host}\r\n{auth}X: " .encode() + b"y" * 70000 + b"\r\n\r\n",
        ])
    return req("POST", "/chat", json.dumps({"prompt": "x" * 100_001, "session_id": sid, "mode": "library"}).encode())


def send_raw(port: int, data: bytes) -> int:
    """Send bytes as they are; return the status of the answer (0: closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may hang up before it read everything (an oversize body)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except OSError:
            pass
    if not answer.startswith(b"HTTP/"):
        return 0
    return int(answer.split(b" ", 2)[1])


def run_guarded(fn: Callable[[], None], errors: list[str]) -> None:
    try:
        fn()
    except Exception as exc:  # reported by the test
        errors.append(f"{type(exc).__name__}: {exc}")


@pytest.mark.timeout(240)
def test_fuzz_on_both_faces_changes_nothing_and_valid_requests_keep_working() -> None:
    fuzz = _e2e_fuzz()
    with reliability_daemon(env={"ZOCRATES_RPC__MAX_FRAME_BYTES": str(SMALL_FRAME_CAP)}, prefix="zrf") as d:
        with RawConn(d.socket_path) as c:
            sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
            reply = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": QUESTIONS[0]}]})
            assert reply["result"]["stopReason"] == "end_turn", reply
            c.result("_zocrates/session/rename", {"sessionId": sid, "title": "keep me"})
            reference = c.result("_zocrates/session/get", {"sessionId": sid})
        info = d.info
        port, token = info["http"]["port"], info["token"]
        before = store_digest(d.db_path)

        errors: list[str] = []
        answers: dict[str, int] = {}
        lock = threading.Lock()

        def socket_fuzzer(n: int) -> None:
            rng = random.Random(SEED + n)
            with RawConn(d.socket_path, timeout=60) as conn:
                for i in range(FRAMES_PER_SOCKET):
                    conn.send_bytes(fuzz.bad_frame(rng, sid))
                    if i % VALID_EVERY == VALID_EVERY - 1:
                        sentinel = f"valid-{n}-{i}"
                        conn.send({"jsonrpc": "2.0", "id": sentinel, "method": "_zocrates/session/get",
                                   "params": {"sessionId": sid}})
                        while (msg := conn.recv()).get("id") != sentinel:
                            code = (msg.get("error") or {}).get("code")
                            if code is not None and code not in RPC_REFUSALS:
                                raise AssertionError(f"socket answered {msg!r:.300}")
                        assert msg.get("result") == reference, f"a valid get changed: {msg!r:.300}"

        def http_fuzzer(n: int) -> None:
            rng = random.Random(SEED + 100 + n)
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                              timeout=60) as h:
                for i in range(REQUESTS_PER_HTTP):
                    status = send_raw(port, http_request(rng, port, token, sid))
                    with lock:
                        answers[str(status)] = answers.get(str(status), 0) + 1
                    if status not in HTTP_REFUSALS:
                        raise AssertionError(f"HTTP answered {status} to an invalid request (seed {SEED + 100 + n}, #{i})")
                    if i % VALID_EVERY == VALID_EVERY - 1:
                        r = h.get(f"/sessions/{sid}")
                        assert r.status_code == 200 and r.json()["session"] == reference, r.text[:300]

        threads = [threading.Thread(target=run_guarded, args=(lambda n=n: socket_fuzzer(n), errors))
                   for n in range(SOCKET_FUZZERS)]
        threads += [threading.Thread(target=run_guarded, args=(lambda n=n: http_fuzzer(n), errors))
                    for n in range(HTTP_FUZZERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(200)
        assert not errors, "\n".join(errors)
        assert d.proc.poll() is None
        assert store_digest(d.db_path) == before
        assert integrity(d.db_path) == "ok"
        with RawConn(d.socket_path) as c:
            (only,) = c.result("session/list", {})["sessions"]
            assert only["sessionId"] == sid and only["title"] == "keep me"
        assert "Traceback" not in d.stderr_text()
        print(f"\nHTTP answers to invalid requests by status: {dict(sorted(answers.items()))}")
