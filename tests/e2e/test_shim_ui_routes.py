"""The shim routes the sidebar web app needs (issue 18), against real daemons over real HTTP: rename,
cancel, library status, settings, progress and checkpoint events, the web app's static files, the
Origin rule, snake_case error bodies, and `zocratesd open`.

One daemon serves the module's read-mostly tests; cancel (a slow model) and settings (a restart)
have daemons of their own.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from daemonproc import DaemonProc, daemon_env
from fake_openai import Behaviour, FakeOpenAI
from rawrpc import RawConn
from shimhttp import Shim, sse_events
from test_turns import write_library

from zocratesd.shim.webapp import CONTENT_TYPES

pytestmark = pytest.mark.e2e

FOUR = ("What is retrieval-augmented generation? How does HyDE write hypothetical documents? "
        "Which encoders does dense passage retrieval use? What does BM25 do?")
LIBRARY_KEYS = {"state", "source", "zotero_schema_version", "items_total", "items_to_index", "items_done", "percent",
                "items_indexed", "chunks_indexed", "attachments_with_text", "collections", "last_refresh",
                "last_refresh_ms", "refreshes", "message", "warnings", "index_path", "counts"}


def _daemon(root: Path, config: dict[str, Any] | None = None) -> DaemonProc:
    run = root / "run"
    run.mkdir(mode=0o700, exist_ok=True)
    d = DaemonProc(data_dir=root / "zotero", runtime_dir=run, env=daemon_env(run), args=["--http-port", "0"])
    d.data_dir.mkdir(exist_ok=True)
    write_library(d.data_dir)
    if config is not None:
        (d.state_dir / "zocrates_config.json").write_text(json.dumps(config))
    return d


@pytest.fixture(scope="module")
def module_daemon() -> Iterator[DaemonProc]:
    root = Path(tempfile.mkdtemp(prefix="zqui", dir="/tmp"))
    d = _daemon(root)
    d.start()
    try:
        yield d
    finally:
        d.stop(60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shim(module_daemon: DaemonProc) -> Iterator[Shim]:
    with Shim(module_daemon.info) as s:
        yield s


def no_cors(r: httpx.Response) -> None:
    assert not [h for h in r.headers if h.lower().startswith("access-control-")], r.headers


def all_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in all_keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in all_keys(v)}
    return set()


def assert_snake_case(error: dict[str, Any]) -> None:
    bad = [k for k in all_keys(error) if k != k.lower()]
    assert not bad, (bad, error)


def raw_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET `path` exactly as given (http.client sends it verbatim: no client normalises `..`)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"127.0.0.1:{port}")
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


# --- rename, library status, error bodies ---------------------------------------------------------


def test_rename_answers_the_session_and_refuses_bad_titles_in_snake_case(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    session = shim.ok("PATCH", f"/sessions/{sid}", json={"title": "  Sleep\nand memory  "})["session"]
    assert session["id"] == sid and session["title"] == "Sleep and memory"
    assert set(session) >= {"messages", "pending_hitl", "created_at", "updated_at"}
    assert [s["title"] for s in shim.ok("GET", "/sessions")["sessions"] if s["id"] == sid] == ["Sleep and memory"]

    for body, status, code in [({"title": ""}, 422, "invalid_input"), ({"title": 5}, 422, "invalid_input"),
                               ({"title": "x" * 201}, 422, "invalid_input"), ({}, 422, "invalid_input")]:
        r = shim.request("PATCH", f"/sessions/{sid}", json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), (body, r.text)
    assert shim.request("PATCH", f"/sessions/{sid}", json={"title": 5}).json()["error"]["field"] == "title"
    r = shim.request("PATCH", f"/sessions/{sid}", content=b"[]", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"

    r = shim.request("PATCH", "/sessions/session-0-000000", json={"title": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    # The core names the session `sessionId` (ACP's style); this face says `session_id`.
    assert r.json()["error"]["session_id"] == "session-0-000000"
    assert_snake_case(r.json())
    r = shim.request("PATCH", "/sessions/bad id", json={"title": "x"})
    assert r.status_code == 422 and "session_id" in r.json()["error"]
    assert_snake_case(r.json())
    assert shim.ok("GET", f"/sessions/{sid}")["session"]["title"] == "Sleep and memory"


def test_library_status_is_the_json_rpc_object(shim: Shim, module_daemon: DaemonProc) -> None:
    library = shim.ok("GET", "/library/status")["library"]
    assert set(library) >= LIBRARY_KEYS
    assert library["state"] == "disabled" and library["message"]  # this daemon reads library_passages.jsonl
    with RawConn(module_daemon.socket_path) as c:
        assert c.result("_zocrates/library/status", {}) == library
    assert shim.ok("GET", "/library/status?refresh=true")["library"]["state"] == "disabled"
    r = shim.request("GET", "/library/status?refresh=maybe")
    assert r.status_code == 422 and r.json()["error"]["field"] == "refresh"
    assert httpx.get(f"{shim.base}/library/status").status_code == 401


def test_library_suggestions_are_the_json_rpc_answer_and_follow_the_library(shim: Shim, module_daemon: DaemonProc,
                                                                              daemon_factory: Any) -> None:
    # No Zotero library index (this daemon reads library_passages.jsonl): no suggestions.
    assert shim.ok("GET", "/library/suggestions") == {"status": "success", "suggestions": []}
    with RawConn(module_daemon.socket_path) as c:
        assert c.result("_zocrates/library/suggestions", {}) == {"suggestions": []}
    # A real Zotero library: once indexed, both faces answer the same questions.
    from zoterofixture import build_zotero_dir, sample_library

    d = daemon_factory(args=["--http-port", "0"])
    build_zotero_dir(d.data_dir, *sample_library())
    d.start()
    with Shim(d.info) as real, RawConn(d.socket_path) as c:
        deadline = time.monotonic() + 60
        while real.ok("GET", "/library/status")["library"]["state"] != "ready" and time.monotonic() < deadline:
            time.sleep(0.1)
        got = real.ok("GET", "/library/suggestions")["suggestions"]
        assert [s["kind"] for s in got] == ["paper", "collection", "tag", "paper"]
        assert got == c.result("_zocrates/library/suggestions", {})["suggestions"]
        assert got[:2] == real.ok("GET", "/library/suggestions?limit=2")["suggestions"]
        assert got[:2] == c.result("_zocrates/library/suggestions", {"limit": 2})["suggestions"]
        for bad in ("0", "9", "-1", "two", "1.5", "99999"):
            r = real.request("GET", f"/library/suggestions?limit={bad}")
            assert r.status_code == 422 and r.json()["error"]["field"] == "limit", (bad, r.text)
        for bad_param in (0, 9, "2", None):
            assert "error" in c.call("_zocrates/library/suggestions", {"limit": bad_param}), bad_param
        assert httpx.get(f"{real.base}/library/suggestions").status_code == 401
        # Asked as suggested, a paper's question answers from that paper.
        paper = got[0]
        sid = real.ok("POST", "/sessions")["session"]["id"]
        events = real.chat(sid, paper["text"], mode=paper["mode"], active_items=paper["items"])
        answer = "".join(p["text"] for e in events if e["type"] == "parts" for p in e["parts"] if not p["thought"])
        assert "# Cited Sources\n[1] " in answer and f"items/{paper['items'][0]['item_key']})" in answer, answer


def test_cancel_without_a_running_turn_and_of_an_unknown_session(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    assert shim.ok("POST", f"/sessions/{sid}/cancel")["cancelled"] is False
    assert shim.ok("POST", f"/sessions/{sid}/cancel", json={})["cancelled"] is False
    r = shim.request("POST", "/sessions/session-0-000000/cancel")
    assert r.status_code == 404 and r.json()["error"]["session_id"] == "session-0-000000"
    r = shim.request("POST", "/sessions/nope!/cancel")
    assert r.status_code == 422


# --- the /chat stream: progress, passages, checkpoint ---------------------------------------------


def test_a_turn_streams_progress_with_the_cited_passages(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    events = shim.chat(sid, "What is retrieval-augmented generation?")
    progress = [e for e in events if e["type"] == "progress"]
    calls = [e for e in progress if e["kind"] == "tool_call"]
    assert calls and calls[0]["name"] == "search_library" and calls[0]["args"]["query"]
    rounds = [e for e in progress if e["kind"] == "round"]
    assert rounds and rounds[0]["call_id"] == calls[0]["call_id"] and rounds[0]["round"]["n"] == 1
    assert rounds[0]["text"].startswith("Round 1: searched")
    results = [e for e in progress if e["kind"] == "tool_result"]
    assert results and results[0]["call_id"] == calls[0]["call_id"] and results[0]["failed"] is False
    assert results[0]["error"] is None
    passages = results[0]["passages"]
    assert passages and [p["n"] for p in passages] == list(range(1, len(passages) + 1))
    assert set(passages[0]) == {"n", "item_key", "attachment_key", "title", "creators", "year", "page", "page_label", "citation",
                                "citation_key"}
    assert {p["item_key"] for p in passages} <= {"LEWIS202", "GAOHYDE1", "KARPDPR1"}
    # Order: the call, then its rounds, then its result, all before the answer's end.
    order = [id(e) for e in events]
    assert order.index(id(calls[0])) < order.index(id(rounds[0])) < order.index(id(results[0]))
    done = events[-1]
    assert done["type"] == "done" and done["stop_reason"] == "end_turn" and done["checkpoint"] is None


def test_a_paused_turn_ends_with_done_checkpoint_and_resume_continues_it(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    events = shim.chat(sid, FOUR)
    asked = [e for e in events if e["type"] == "request_input"]
    assert len(asked) == 1
    rounds = [e for e in events if e["type"] == "progress" and e["kind"] == "round"]
    assert [e["round"]["n"] for e in rounds] == [1, 2, 3]  # the default budget, one line per round
    done = events[-1]
    assert done["type"] == "done" and done["stop_reason"] == "checkpoint"
    checkpoint = {k: asked[0][k] for k in ("invocation_id", "interrupt_id", "message", "payload")}
    assert done["checkpoint"] == checkpoint == done["session"]["pending_hitl"]
    assert done["invocation_id"] == checkpoint["invocation_id"]

    # A wrong answer is refused, its body in snake_case (the core says pendingInvocationId).
    r = shim.request("POST", "/chat/resume", json={"session_id": sid, "invocation_id": checkpoint["invocation_id"],
                                                   "interrupt_id": "interrupt_nope", "response": {"action": "synthesize"}})
    assert r.status_code == 409 and r.json()["error"]["code"] == "checkpoint_not_pending"
    err = r.json()["error"]
    assert err["pending_interrupt_id"] == checkpoint["interrupt_id"] and err["session_id"] == sid
    assert_snake_case(r.json())

    more = shim.resume(sid, checkpoint["invocation_id"], checkpoint["interrupt_id"], action="synthesize")
    first = more[0]
    assert first["type"] == "progress" and first["kind"] == "checkpoint_answered"
    assert first["interrupt_id"] == checkpoint["interrupt_id"] and first["response"] == {"action": "synthesize"}
    assert any(e["type"] == "progress" and e["kind"] == "tool_result" and e["passages"] for e in more)
    assert more[-1]["type"] == "done" and more[-1]["stop_reason"] == "end_turn" and more[-1]["checkpoint"] is None
    assert more[-1]["session"]["pending_hitl"] is None


# --- the web app's files --------------------------------------------------------------------------


def test_the_web_app_is_served_without_a_token_with_csp_and_revalidation(shim: Shim) -> None:
    bare = httpx.Client(base_url=shim.base, timeout=10)
    try:
        r = bare.get("/ui/")
        assert r.status_code == 200 and r.headers["content-type"] == "text/html; charset=utf-8"
        assert r.text.lstrip().lower().startswith("<!doctype html")
        csp = {d.strip().split(" ", 1)[0]: d.strip() for d in r.headers["content-security-policy"].split(";")}
        assert csp["script-src"] == "script-src 'self'" and csp["connect-src"] == "connect-src 'self'"
        assert csp["frame-ancestors"] == "frame-ancestors 'self'" and csp["object-src"] == "object-src 'none'"
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-cache"
        no_cors(r)
        etag = r.headers["etag"]
        again = bare.get("/ui/", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        assert bare.get("/ui/index.html").content == r.content
        # Every file the page links to is served with the type of its extension, without a token.
        linked = re.findall(r'(?:src|href)="([^":#?]+)"', r.text)
        assert linked, r.text
        for ref in linked:
            f = bare.get(f"/ui/{ref}")
            assert f.status_code == 200, ref
            assert f.headers["content-type"] == CONTENT_TYPES[Path(ref).suffix], ref
            assert f.headers["x-content-type-options"] == "nosniff" and "content-security-policy" not in f.headers
        assert bare.head("/ui/").status_code == 200
        for path in ("/ui", "/"):
            moved = bare.get(path)
            assert moved.status_code == 308 and moved.headers["location"] == "/ui/"
        # Only GET and HEAD are public: anything else still needs the token (then: no such route).
        assert bare.post("/ui/", json={}).status_code == 401
        assert shim.request("POST", "/ui/", json={}).status_code == 405
        assert bare.get("/ui/missing.js").status_code == 404
        # The files need no token, but Host and Origin still hold.
        assert bare.get("/ui/", headers={"Host": f"attacker.example:{shim.port}"}).status_code == 403
        assert bare.get("/ui/", headers={"Origin": "http://attacker.example"}).status_code == 403
        # And the API does not open up with them.
        assert bare.get("/sessions").status_code == 401
    finally:
        bare.close()


@pytest.mark.parametrize("path", [
    "/ui/../daemon.json", "/ui/../../zocratesd/config.py", "/ui/%2e%2e/daemon.json", "/ui/..%2fdaemon.json",
    "/ui/%2e%2e%2f%2e%2e%2fshim%2fguard.py", "/ui/..%5c..%5cconfig.py", "/ui//etc/passwd", "/ui/%2fetc%2fpasswd",
    "/ui/./index.html", "/ui/index.html%00.js", "/ui/.%2e/__init__.py", "/ui/../__init__.py",
    "/ui/../../../../../../../etc/passwd", "/ui/%252e%252e/daemon.json", "/ui/.hidden.js",
    # The repository's package.json is two levels up from zocratesd/webui/ and has a served extension.
    "/ui/../../package.json", "/ui/%2e%2e/%2e%2e/package.json", "/ui/..%2f..%2fpackage.json", "/ui/%2E%2E%2F%2E%2E%2Fpackage.json",
])
def test_no_path_escapes_the_web_app_directory(module_daemon: DaemonProc, path: str) -> None:
    port, token = module_daemon.info["http"]["port"], module_daemon.info["token"]
    status, _, body = raw_get(port, path)
    assert status in (400, 404), (path, status, body[:200])
    assert token.encode() not in body and b"root:" not in body and b"import" not in body and b"devDependencies" not in body


# --- the Origin rule ------------------------------------------------------------------------------


def test_the_shims_own_origin_is_allowed_and_every_other_refused_without_cors(shim: Shim) -> None:
    for origin in (f"http://127.0.0.1:{shim.port}", f"http://localhost:{shim.port}"):
        r = shim.request("POST", "/sessions", json={"title": "same origin"}, headers={"Origin": origin})
        assert r.status_code == 200, (origin, r.text)
        no_cors(r)
        r = shim.request("PATCH", "/settings", json={}, headers={"Origin": origin})
        assert r.status_code == 200
        no_cors(r)
    before = shim.ok("GET", "/sessions")["sessions"]
    for origin in (f"http://127.0.0.1:{shim.port + 1}", f"https://127.0.0.1:{shim.port}", f"http://localhost:{shim.port}.attacker.example",
                   f"http://127.0.0.2:{shim.port}", "http://attacker.example", "null", f"http://[::1]:{shim.port}",
                   f"http://127.0.0.1:{shim.port}/", f"HTTP://127.0.0.1:{shim.port}"):
        r = shim.request("POST", "/sessions", json={"title": "csrf"}, headers={"Origin": origin})
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", origin
        no_cors(r)
        r = shim.request("OPTIONS", "/sessions", headers={"Origin": origin, "Access-Control-Request-Method": "POST"})
        assert r.status_code == 403
        no_cors(r)
    # Even the own origin gets no preflight answered.
    r = shim.request("OPTIONS", "/sessions", headers={"Origin": f"http://127.0.0.1:{shim.port}"})
    assert r.status_code == 403
    no_cors(r)
    assert shim.ok("GET", "/sessions")["sessions"] == before


# --- zocratesd open -------------------------------------------------------------------------------


def _zocratesd(d: DaemonProc, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zocratesd", *args, "--zotero-data-dir", str(d.data_dir)],
                          env=env or d.env, capture_output=True, text=True, timeout=60)


CODE_URL = re.compile(r"^http://127\.0\.0\.1:(\d+)/ui/#code=([A-Za-z0-9_-]{40,})$")


def _exchange(port: int, code: str, **headers: str) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{port}/auth/exchange", json={"code": code}, headers=headers, timeout=10)


def test_zocratesd_open_prints_and_opens_a_one_time_address(module_daemon: DaemonProc, tmp_path: Path) -> None:
    info = module_daemon.info
    port = info["http"]["port"]
    done = _zocratesd(module_daemon, "open", "--no-browser")
    assert done.returncode == 0, done.stderr
    url = done.stdout.strip()
    m = CODE_URL.match(url)
    assert m and int(m[1]) == port, url
    assert info["token"] not in url  # the address a browser saves in its history holds no token
    assert httpx.get(url.split("#")[0]).status_code == 200  # the page is there, without the token
    # The page trades the code for the token, once.
    r = _exchange(port, m[2], Origin=f"http://127.0.0.1:{port}")
    assert r.status_code == 200 and r.json()["token"] == info["token"], r.text
    assert r.headers["cache-control"] == "no-store"
    again = _exchange(port, m[2], Origin=f"http://127.0.0.1:{port}")
    assert again.status_code == 403 and again.json()["error"]["code"] == "code_refused"
    assert "zocrates open" in again.json()["error"]["message"]
    assert info["token"] not in again.text

    # With a display, it opens the browser $BROWSER names (here a script that records it) on a
    # private page that leads to the address (tests/e2e/test_open_page.py: as another user sees it).
    seen = tmp_path / "seen"
    browser = tmp_path / "browser"
    browser.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {seen}\n")
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    env = {**module_daemon.env, "BROWSER": str(browser), "DISPLAY": ":99"}
    done = _zocratesd(module_daemon, "open", env=env)
    assert done.returncode == 0 and CODE_URL.match(done.stdout.strip()), done.stderr
    deadline = time.monotonic() + 10
    while not seen.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    opened = seen.read_text()
    assert opened.startswith("file:///") and "code" not in opened, opened
    page = Path(opened.removeprefix("file://")).read_text()
    assert f'url={done.stdout.strip()}"' in page  # a fresh code each time
    assert done.stdout.strip() != url
    # Without a display nothing is started (a text browser would take over the terminal).
    seen.unlink()
    env = {k: v for k, v in env.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    done = _zocratesd(module_daemon, "open", env=env)
    assert done.returncode == 0 and CODE_URL.match(done.stdout.strip())
    time.sleep(0.5)
    assert not seen.exists()


def test_one_time_codes_are_minted_only_for_the_token_and_exchanged_only_by_the_page(shim: Shim) -> None:
    bare = httpx.Client(base_url=shim.base, timeout=10)
    try:
        # Minting needs the token.
        assert bare.post("/auth/code", json={}).status_code == 401
        assert bare.post("/auth/code", json={}, headers={"Authorization": "Bearer nope"}).status_code == 401
        minted = shim.ok("POST", "/auth/code", json={})
        code = minted["code"]
        assert minted["expires_in_s"] == 120
        # The guard's other rules hold for the exchange: another site's page, a rebound name, a
        # form, a preflight are refused, and the code is not spent by them.
        refused = [
            bare.post("/auth/exchange", json={"code": code}, headers={"Origin": "http://attacker.example"}),
            bare.post("/auth/exchange", json={"code": code}, headers={"Host": f"attacker.example:{shim.port}"}),
            bare.post("/auth/exchange", content=f"code={code}".encode(),
                      headers={"Content-Type": "application/x-www-form-urlencoded"}),
            bare.options("/auth/exchange", headers={"Origin": "http://attacker.example"}),
            bare.get("/auth/exchange"),  # GET: not public, and not a route
        ]
        assert [r.status_code for r in refused] == [403, 403, 415, 403, 401]
        for r in refused:
            no_cors(r)
            assert shim.token not in r.text
        for wrong in ["", code[:-1], code + "A", 5, None, ["x"]]:
            r = bare.post("/auth/exchange", json={"code": wrong})
            assert r.status_code == 403 and r.json()["error"]["code"] == "code_refused", (wrong, r.text)
        assert bare.post("/auth/exchange", content=b"{", headers={"Content-Type": "application/json"}).status_code == 400
        # Still good after all that, once.
        r = bare.post("/auth/exchange", json={"code": code}, headers={"Origin": shim.base})
        assert r.status_code == 200 and r.json() == {"status": "success", "token": shim.token}
        assert bare.post("/auth/exchange", json={"code": code}).status_code == 403
        # A code is no token.
        other = shim.ok("POST", "/auth/code", json={})["code"]
        assert bare.get("/sessions", headers={"Authorization": f"Bearer {other}"}).status_code == 401
    finally:
        bare.close()


def test_zocratesd_open_without_a_daemon_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    (tmp_path / "zotero").mkdir()
    done = subprocess.run([sys.executable, "-m", "zocratesd", "open", "--no-browser", "--zotero-data-dir", str(tmp_path / "zotero")],
                          env=daemon_env(run), capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stdout == "" and "not running" in done.stderr


# --- cancel (a slow model) ------------------------------------------------------------------------


@pytest.fixture
def slow(daemon_factory: Any) -> Iterator[tuple[DaemonProc, Shim, FakeOpenAI]]:
    fake = FakeOpenAI(Behaviour(chunk_delay_s=2.0))  # an answer of ~5 chunks: ~10 s for a cancel to land in
    d = daemon_factory(args=["--http-port", "0"])
    write_library(d.data_dir)
    d.env["ZQ_KEY"] = "sk-e2e"
    (d.state_dir / "zocrates_config.json").write_text(json.dumps(
        {"model": {"provider": "openai", "name": "fake/model", "base_url": fake.base_url, "api_key_env": "ZQ_KEY"}}))
    d.start()
    try:
        with Shim(d.info) as s:
            yield d, s, fake
    finally:
        fake.close()


def test_cancel_stops_a_running_turn_which_ends_cancelled_and_the_session_goes_on(slow: tuple[DaemonProc, Shim, FakeOpenAI]) -> None:
    d, shim, fake = slow
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    body = {"prompt": "What is retrieval-augmented generation?", "session_id": sid, "active_items": [], "mode": "library"}
    events: list[dict[str, Any]] = []
    got_parts = threading.Event()

    def read() -> None:
        with httpx.Client(base_url=shim.base, timeout=60, headers={"Authorization": f"Bearer {shim.token}"}) as c:
            with c.stream("POST", "/chat", json=body) as r:
                assert r.status_code == 200
                for e in sse_events(r.iter_lines()):
                    events.append(e)
                    if e["type"] == "parts":
                        got_parts.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert got_parts.wait(30), events
    # While it runs: a rename is refused (busy), its error body in snake_case.
    busy = shim.request("PATCH", f"/sessions/{sid}", json={"title": "x"})
    assert busy.status_code == 409 and busy.json()["error"]["session_id"] == sid and busy.json()["error"]["activity"]
    assert_snake_case(busy.json())
    assert shim.ok("POST", f"/sessions/{sid}/cancel")["cancelled"] is True
    reader.join(30)
    assert not reader.is_alive()
    done = events[-1]
    assert done["type"] == "done" and done["stop_reason"] == "cancelled" and done["checkpoint"] is None, done
    # Stopped mid-answer: its last words never came.
    answered = "".join(m["text"] for m in done["session"]["messages"] if m["role"] == "assistant")
    assert "I have seen" not in answered, answered
    assert [e["type"] for e in events].count("done") == 1
    assert shim.ok("POST", f"/sessions/{sid}/cancel")["cancelled"] is False

    # The session stays usable: a new turn runs to its end (fast now).
    fake.behaviour = Behaviour()
    again = shim.chat(sid, "And what is HyDE?")
    assert again[-1]["type"] == "done" and again[-1]["stop_reason"] == "end_turn"
    texts = [m["text"] for m in again[-1]["session"]["messages"] if m["role"] == "user"]
    assert texts == ["What is retrieval-augmented generation?", "And what is HyDE?"]


# --- settings -------------------------------------------------------------------------------------

USER_CONFIG = {
    "http": {"head_timeout_s": 9.5},
    "compaction": {"probe_model": "custom/probe", "min_turns": 5},
    "research": {"max_extensions": 2},
}


def test_settings_validate_persist_apply_live_and_survive_a_restart(daemon_factory: Any) -> None:
    d = daemon_factory(args=["--http-port", "0"])
    d.env.pop("ZOCRATES_ONLINE__MODE")  # the settings as a user has them
    write_library(d.data_dir)
    config_file = d.state_dir / "zocrates_config.json"
    config_file.write_text(json.dumps(USER_CONFIG))
    os.chmod(config_file, 0o640)
    d.start()
    with Shim(d.info) as shim:
        got = shim.ok("GET", "/settings")
        assert got["settings"] == {
            "session_retention_days": 180, "max_saved_sessions": 100,
            "compaction": {"min_turns": 5, "token_floor": 30000, "hard_backstop_tokens": 100000, "keep_recent_turns": 2,
                           "decision_threshold": 0.75, "probe_timeout_s": 10.0},
            "research": {"initial_budget": 3, "max_extensions": 2},
            "online": {"mode": "ask"},
        }
        assert got["applies"]["session_retention_days"] == "now" and got["applies"]["compaction.probe_timeout_s"] == "next_start"
        assert set(got["applies"]) == {"session_retention_days", "max_saved_sessions", "research.initial_budget", "research.max_extensions",
                                       "online.mode"} | {f"compaction.{k}" for k in got["settings"]["compaction"]}
        assert got["restart_needed"] == [] and got["environment"] == [] and got["config_path"] == str(config_file)

        # Refused, naming the field; nothing changes.
        before = config_file.read_bytes()
        for patch, fld in [({"max_saved_sessions": -1}, "max_saved_sessions"), ({"max_saved_sessions": True}, "max_saved_sessions"),
                           ({"session_retention_days": "30"}, "session_retention_days"), ({"session_retention_days": 2**60}, "session_retention_days"),
                           ({"compaction": {"min_turns": "6"}}, "compaction.min_turns"), ({"compaction": {"decision_threshold": 1.5}}, "compaction.decision_threshold"),
                           ({"compaction": {"probe_model": "x/y"}}, "compaction.probe_model"), ({"research": {"initial_budget": 0}}, "research.initial_budget"),
                           ({"research": 3}, "research"), ({"model": {"provider": "offline"}}, "model"), ({"http": {"allowed_origins": ["*"]}}, "http"),
                           ({"nope": 1}, "nope"), ({"session_retention_days": 30, "max_saved_sessions": -5}, "max_saved_sessions"),
                           # Where searches go is not a setting a page may change: only whether they happen.
                           ({"online": {"openalex_url": "https://collector.example"}}, "online.openalex_url"),
                           ({"online": {"mode": "always"}}, "online.mode")]:
            r = shim.request("PATCH", "/settings", json=patch)
            assert r.status_code == 422, (patch, r.text)
            assert r.json()["error"]["code"] == "invalid_input" and r.json()["error"]["field"] == fld, (patch, r.json())
        r = shim.request("PATCH", "/settings", content=b"[1]", headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert config_file.read_bytes() == before
        assert shim.ok("GET", "/settings")["settings"] == got["settings"]

        # Two retention keys and a compaction key apply now, the probe's timeout at the next start.
        changed = shim.ok("PATCH", "/settings", json={"session_retention_days": 30, "max_saved_sessions": 1,
                                                      "compaction": {"keep_recent_turns": 3, "probe_timeout_s": 4},
                                                      "research": {"max_extensions": 2}})
        assert sorted(changed["changed"]) == ["compaction.keep_recent_turns", "compaction.probe_timeout_s", "max_saved_sessions",
                                              "session_retention_days"]
        assert changed["restart_needed"] == ["compaction.probe_timeout_s"]
        assert changed["settings"]["compaction"]["probe_timeout_s"] == 4.0 and changed["settings"]["max_saved_sessions"] == 1
        on_disk = json.loads(config_file.read_text())
        assert on_disk["http"] == {"head_timeout_s": 9.5}  # the user's other keys, untouched
        assert on_disk["compaction"] == {"probe_model": "custom/probe", "min_turns": 5, "keep_recent_turns": 3, "probe_timeout_s": 4.0}
        assert on_disk["session_retention_days"] == 30 and on_disk["max_saved_sessions"] == 1
        assert on_disk["research"] == {"max_extensions": 2}
        assert stat.S_IMODE(config_file.stat().st_mode) == 0o640
        assert not [p for p in config_file.parent.iterdir() if p.name.endswith(".tmp")]

        # Applied now: max_saved_sessions 1 keeps only the most recent of two sessions with turns.
        older = shim.ok("POST", "/sessions")["session"]["id"]
        shim.chat(older, "What is retrieval-augmented generation?")
        newer = shim.ok("POST", "/sessions")["session"]["id"]
        shim.chat(newer, "How does HyDE work?")
        report = shim.ok("POST", "/sessions/maintenance")
        assert report["retention_deleted"] == 1, report
        assert [s["id"] for s in shim.ok("GET", "/sessions")["sessions"]] == [newer]
        # Null turns a retention pass off.
        assert shim.ok("PATCH", "/settings", json={"max_saved_sessions": None})["settings"]["max_saved_sessions"] is None
        assert json.loads(config_file.read_text())["max_saved_sessions"] is None

    # Restarted (with one key now set by the environment): what was saved is what runs.
    d.stop()
    d.env["ZOCRATES_RESEARCH__MAX_EXTENSIONS"] = "1"
    d.start()
    with Shim(d.info) as shim:
        got = shim.ok("GET", "/settings")
        assert got["settings"]["session_retention_days"] == 30 and got["settings"]["max_saved_sessions"] is None
        assert got["settings"]["compaction"]["probe_timeout_s"] == 4.0 and got["restart_needed"] == []
        assert got["environment"] == ["research.max_extensions"] and got["settings"]["research"]["max_extensions"] == 1
        r = shim.request("PATCH", "/settings", json={"research": {"max_extensions": 3}})
        assert r.status_code == 422 and r.json()["error"]["field"] == "research.max_extensions"
        assert "ZOCRATES_RESEARCH__MAX_EXTENSIONS" in r.json()["error"]["message"]
        assert shim.ok("PATCH", "/settings", json={"research": {"initial_budget": 2}})["changed"] == ["research.initial_budget"]
    assert json.loads(config_file.read_text())["research"] == {"max_extensions": 2, "initial_budget": 2}
