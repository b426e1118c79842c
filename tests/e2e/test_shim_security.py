"""The shim's security against the real daemon: DNS rebinding, cross-origin requests, tokens, bodies."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from shimhttp import Shim

pytestmark = pytest.mark.e2e

MAX_BODY = 16 * 1024 * 1024


@pytest.fixture(scope="module")
def module_daemon(tmp_path_factory: Any) -> Iterator[Any]:
    """One daemon for the whole module: these tests only read, or refuse."""
    import shutil
    import tempfile
    from pathlib import Path

    from daemonproc import DaemonProc, daemon_env

    root = Path(tempfile.mkdtemp(prefix="zqsec", dir="/tmp"))
    run = root / "run"
    run.mkdir(mode=0o700)
    d = DaemonProc(data_dir=root / "zotero", runtime_dir=run, env=daemon_env(run), args=["--http-port", "0"])
    d.data_dir.mkdir()
    (d.state_dir).mkdir()
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"http": {"allowed_origins": ["http://trusted.example"]}}))
    d.start()
    try:
        yield d
    finally:
        d.stop(60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shim(module_daemon: Any) -> Iterator[Shim]:
    with Shim(module_daemon.info) as s:
        yield s


def raw(port: int, request: bytes) -> tuple[int, bytes]:
    """Send bytes as they are (no client fixing them up); return the status and the whole answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
    return status, data


def no_cors(r: httpx.Response) -> None:
    assert not [h for h in r.headers if h.lower().startswith("access-control-")], r.headers


# --- Host: DNS rebinding ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["attacker.example:{port}", "attacker.example", "127.0.0.1", "localhost", "127.0.0.1:{other}",
     "localhost.attacker.example:{port}", "127.0.0.1.nip.io:{port}", "[::1]:{port}", "0.0.0.0:{port}", "LOCALHOST:{other}"],
)
def test_a_rebound_host_is_refused_even_with_the_token(shim: Shim, host: str) -> None:
    h = host.format(port=shim.port, other=shim.port + 1)
    for method, path in [("GET", "/sessions"), ("GET", "/health"), ("POST", "/sessions/maintenance")]:
        r = shim.request(method, path, headers={"Host": h})
        assert r.status_code == 403, (h, path, r.status_code)
        assert r.json()["error"]["code"] == "forbidden"
        no_cors(r)


def test_both_loopback_names_are_accepted(shim: Shim) -> None:
    for h in (f"127.0.0.1:{shim.port}", f"localhost:{shim.port}"):
        assert shim.request("GET", "/sessions", headers={"Host": h}).status_code == 200


def test_a_request_without_host_is_refused(shim: Shim) -> None:
    status, _ = raw(shim.port, f"GET /sessions HTTP/1.0\r\nAuthorization: Bearer {shim.token}\r\n\r\n".encode())
    assert status == 403


# --- Origin: cross-site pages ---------------------------------------------------------------------


@pytest.mark.parametrize("origin", ["http://attacker.example", "null", f"http://127.0.0.1:{0}", "http://localhost"])
def test_a_cross_origin_post_is_refused_and_changes_nothing(shim: Shim, origin: str) -> None:
    before = shim.ok("GET", "/sessions")["sessions"]
    r = shim.request("POST", "/sessions", json={"title": "csrf"}, headers={"Origin": origin})
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    no_cors(r)
    assert shim.ok("GET", "/sessions")["sessions"] == before


def test_a_cross_origin_form_post_without_json_is_refused(shim: Shim) -> None:
    # What a page can send without a preflight: a form. Even with the token it would be refused.
    r = shim.request("POST", "/sessions", content=b"title=x", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415
    r = shim.request("POST", "/sessions", content=b'{"title":"x"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 415


def test_preflight_is_refused_without_cors_headers(shim: Shim) -> None:
    r = shim.request("OPTIONS", "/sessions", headers={
        "Origin": "http://attacker.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert r.status_code == 403
    no_cors(r)
    r = shim.request("OPTIONS", "/sessions")
    assert r.status_code == 403


def test_an_allowed_origin_is_served_but_gets_no_cors_headers(shim: Shim) -> None:
    r = shim.request("GET", "/sessions", headers={"Origin": "http://trusted.example"})
    assert r.status_code == 200
    no_cors(r)


# --- the bearer token -------------------------------------------------------------------------------


def test_routes_need_the_token_and_health_does_not(shim: Shim) -> None:
    bare = httpx.Client(base_url=shim.base, timeout=10)
    try:
        assert bare.get("/health").status_code == 200
        for method, path in [("GET", "/sessions"), ("POST", "/sessions"), ("GET", "/sessions/x"), ("DELETE", "/sessions/x"),
                             ("GET", "/sessions/storage_stats"), ("POST", "/sessions/maintenance"), ("POST", "/register"),
                             ("POST", "/chat"), ("POST", "/chat/resume"), ("POST", "/sessions/x/rewind"), ("GET", "/nope")]:
            r = bare.request(method, path)
            assert r.status_code == 401, (method, path, r.status_code)
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"].startswith("Bearer")
        wrong = shim.token[:-1] + ("A" if shim.token[-1] != "A" else "B")
        for auth in [f"Bearer {wrong}", f"Bearer {shim.token[:10]}", "Bearer", f"Basic {shim.token}", shim.token,
                     f"Bearer {shim.token}x"]:
            r = bare.get("/sessions", headers={"Authorization": auth})
            assert r.status_code == 401, auth
        assert bare.get("/sessions", headers={"Authorization": f"bearer {shim.token}"}).status_code == 200
    finally:
        bare.close()


def _expected_proof(token: str, challenge: str) -> str:
    # protocol/http.md: HMAC-SHA256 keyed with daemon.json's token over "zocratesd-health-proof:" + challenge.
    return hmac.new(token.encode(), f"zocratesd-health-proof:{challenge}".encode(), hashlib.sha256).hexdigest()


def test_health_proves_the_token_to_a_challenge_without_needing_it(shim: Shim) -> None:
    """A stale daemon.json's port can be taken by another user; only the token's holder answers the HMAC."""
    bare = httpx.Client(base_url=shim.base, timeout=10)
    try:
        assert bare.get("/health").json() == {"status": "success"}  # without a challenge: as ever
        seen = set()
        for challenge in [secrets.token_hex(16), secrets.token_urlsafe(48), "A" * 16, "z_-9" * 32]:
            r = bare.get("/health", params={"challenge": challenge})
            assert r.status_code == 200, (challenge, r.text)
            assert r.json() == {"status": "success", "proof": _expected_proof(shim.token, challenge)}
            no_cors(r)
            seen.add(r.json()["proof"])
        assert len(seen) == 4
        # The token changes nothing (the route is public); a wrong one is not the key either.
        nonce = secrets.token_hex(16)
        answer = shim.request("GET", "/health", params={"challenge": nonce}).json()["proof"]
        assert answer == bare.get("/health", params={"challenge": nonce}).json()["proof"]
        assert answer != _expected_proof(shim.token + "x", nonce)
        # Malformed, too short, too long, repeated or empty challenges: a clear 400, no proof of anything.
        bad: list[str] = ["challenge=" + "a" * 15, "challenge=" + "a" * 129, "challenge=" + "a" * 4000,
                          "challenge=abcdefghijklmnop%00", "challenge=abcdefgh%20ijklmnop", "challenge=abcdefghijklmnop%2F",
                          "challenge=%C3%A9abcdefghijklmnop", f"challenge={nonce}&challenge={nonce}", "challenge="]
        for query in bad:
            r = bare.get(f"/health?{query}")
            assert r.status_code == 400, (query[:40], r.status_code, r.text[:200])
            body = r.json()
            assert body["error"]["code"] == "bad_request", body
            assert "proof" not in body
            assert re.search(r"16-128 characters of A-Z|give one challenge", body["error"]["message"]), body
            no_cors(r)
    finally:
        bare.close()


# --- bodies ----------------------------------------------------------------------------------------------


def test_an_oversized_declared_body_is_refused_before_it_is_read(shim: Shim) -> None:
    head = (f"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1:{shim.port}\r\nAuthorization: Bearer {shim.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n").encode()
    status, data = raw(shim.port, head + b"{")
    assert status == 413 and b"body_too_large" in data


def test_an_oversized_chunked_body_is_refused(shim: Shim) -> None:
    def chunks() -> Iterator[bytes]:
        block = b" " * (1024 * 1024)
        for _ in range(17):
            yield block

    r = shim.request("POST", "/sessions", content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


def test_a_body_just_under_the_cap_is_read(shim: Shim) -> None:
    body = b'{"title": "big"}' + b" " * (MAX_BODY - 16)
    r = shim.request("POST", "/sessions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    shim.ok("DELETE", f"/sessions/{r.json()['session']['id']}")


@pytest.mark.parametrize(
    "body,status",
    [(b"{", 400), (b"[]", 400), (b'"title"', 400), (b"\xff\xfe", 400), (b'{"title": 5}', 422),
     (b'{"title": ""}', 422), (b'{"title": "' + b"x" * 300 + b'"}', 422)],
)
def test_malformed_bodies_are_refused_with_json_errors(shim: Shim, body: bytes, status: int) -> None:
    r = shim.request("POST", "/sessions", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert r.json()["status"] == "error"


def test_a_bad_content_length_is_refused(shim: Shim) -> None:
    status, _ = raw(shim.port, (f"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1:{shim.port}\r\nAuthorization: Bearer {shim.token}\r\n"
                                f"Content-Type: application/json\r\nContent-Length: abc\r\n\r\n").encode())
    assert status == 400


def test_session_ids_in_paths_are_validated(shim: Shim) -> None:
    for sid in ["..%2F..%2Fetc", "a" * 200, "x%00y"]:
        r = shim.request("GET", f"/sessions/{sid}")
        assert r.status_code in (404, 422), (sid, r.status_code)
        assert r.json()["status"] == "error"


# --- what every answer says: nosniff, and not for other sites' pages -------------------------------


def _secured(headers: Any, what: object) -> None:
    assert headers.get("x-content-type-options") == "nosniff", what
    assert headers.get("cross-origin-resource-policy") == "same-origin", what


def test_every_answer_forbids_sniffing_and_other_sites_even_refusals(shim: Shim) -> None:
    """Without Cross-Origin-Resource-Policy a page of another site could tell the daemon is there
    from an opaque no-cors answer (a refusal as much as a success); a browser now fails the fetch."""
    bare = httpx.Client(base_url=shim.base, timeout=10)
    sid = shim.ok("POST", "/sessions", json={"title": "headers"})["session"]["id"]
    try:
        cases: list[tuple[str, httpx.Response, int]] = [
            ("health", bare.get("/health"), 200),
            ("no token", bare.get("/sessions"), 401),
            ("wrong method", shim.request("PUT", "/sessions"), 405),
            ("unknown path", shim.request("GET", "/nope"), 404),
            ("rebound host", shim.request("GET", "/health", headers={"Host": "attacker.example"}), 403),
            ("foreign origin", bare.get("/health", headers={"Origin": "http://attacker.example"}), 403),
            ("preflight", shim.request("OPTIONS", "/sessions"), 403),
            ("form post", shim.request("POST", "/sessions", content=b"a=b",
                                       headers={"Content-Type": "application/x-www-form-urlencoded"}), 415),
            ("bad json", shim.request("POST", "/sessions", content=b"{", headers={"Content-Type": "application/json"}), 400),
            ("core refusal", shim.request("POST", "/sessions", json={"title": 5}), 422),
            ("no session", shim.request("GET", "/sessions/session-1-aaaaaa"), 404),
            ("api", shim.request("GET", "/sessions"), 200),
            ("library", shim.request("GET", "/library/status"), 200),
            ("page", bare.get("/ui/"), 200),
            ("redirect", bare.get("/ui", follow_redirects=False), 308),
            ("missing file", bare.get("/ui/nope.js"), 404),
        ]
        with shim.client.stream("POST", "/chat", json={"session_id": sid, "prompt": "What is BM25?", "mode": "library",
                                                       "active_items": []}) as r:
            r.read()
            cases.append(("sse", r, 200))
        for what, r, status in cases:
            assert r.status_code == status, (what, r.status_code, r.text)
            _secured(r.headers, what)
            assert r.headers.get_list("cross-origin-resource-policy") == ["same-origin"], what  # said once
    finally:
        shim.ok("DELETE", f"/sessions/{sid}")
        bare.close()
    # What uvicorn answers itself, before any app sees the request: bytes h11 cannot parse.
    status, data = raw(shim.port, (f"POST /sessions HTTP/1.1\r\nHost: 127.0.0.1:{shim.port}\r\n"
                                   "Content-Length: abc\r\n\r\n").encode())
    assert status == 400
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    assert b"\r\nx-content-type-options: nosniff" in head and b"\r\ncross-origin-resource-policy: same-origin" in head, head
    status, data = raw(shim.port, b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400 and b"cross-origin-resource-policy: same-origin" in data.lower()
