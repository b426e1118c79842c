"""The HTTP shim against the real daemon: routes, SSE turns, the spec's section 7 sequence."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_openai import Behaviour, FakeOpenAI
from rawrpc import RawConn
from shimhttp import Shim, sse_events
from test_turns import write_library

pytestmark = pytest.mark.e2e


@pytest.fixture
def shim_daemon(daemon_factory: Any) -> Any:
    d = daemon_factory(args=["--http-port", "0"])
    write_library(d.data_dir)
    d.start()
    return d


@pytest.fixture
def shim(shim_daemon: Any) -> Iterator[Shim]:
    with Shim(shim_daemon.info) as s:
        yield s


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def slow_shim(daemon_factory: Any, fake: FakeOpenAI) -> Iterator[tuple[Any, Shim]]:
    """A daemon whose model streams slowly (a turn takes about a second)."""
    fake.behaviour = Behaviour(chunk_delay_s=0.1)
    d = daemon_factory(args=["--http-port", "0"])
    write_library(d.data_dir)
    d.env["ZQ_KEY"] = "sk-e2e"
    (d.state_dir / "zocrates_config.json").write_text(
        json.dumps({"model": {"provider": "openai", "name": "fake/model", "base_url": fake.base_url, "api_key_env": "ZQ_KEY"}})
    )
    d.start()
    with Shim(d.info) as s:
        yield d, s


def answer_text(events: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for e in events if e["type"] == "parts" for p in e["parts"] if not p["thought"])


def test_daemon_json_names_a_loopback_port_and_a_token(shim_daemon: Any) -> None:
    info = shim_daemon.info
    assert info["http"]["host"] == "127.0.0.1"
    assert isinstance(info["http"]["port"], int) and info["http"]["port"] > 0
    assert len(info["token"]) >= 40
    assert (shim_daemon.state_dir / "daemon.json").stat().st_mode & 0o077 == 0
    # Bound to loopback only: the port is not reachable on another local address.
    other = socket.socket()
    other.settimeout(2)
    try:
        with pytest.raises(OSError):
            other.connect(("127.0.0.2", info["http"]["port"]))
    finally:
        other.close()


def test_register_returns_protocol_capabilities_and_startup_maintenance(shim_daemon: Any, shim: Shim) -> None:
    body = shim.ok("POST", "/register", json={"client": "zotero-plugin"})
    assert body["protocol_version"] == 1
    assert body["capabilities"]["chat"] is True and body["capabilities"]["chat_resume"] is True
    # Answered at once; start-up maintenance runs with the engine's start, in the background, and
    # the route says null until it has run (protocol/http.md). Once the engine is up, the report.
    shim_daemon.wait_until_started()
    body = shim.ok("POST", "/register", json={"client": "zotero-plugin"})
    assert set(body["startup_maintenance"]) >= {"empty_deleted", "retention_deleted", "vacuum"}


def test_sessions_crud_shapes_and_sort_order(shim: Shim) -> None:
    assert shim.ok("GET", "/sessions")["sessions"] == []
    first = shim.ok("POST", "/sessions", json={"title": "New Chat"})["session"]
    assert first["title"] == "New Chat" and first["messages"] == [] and first["pending_hitl"] is None
    second = shim.ok("POST", "/sessions", json={"title": "Second"})["session"]
    untitled = shim.ok("POST", "/sessions")["session"]  # no body: the default title
    rows = shim.ok("GET", "/sessions")["sessions"]
    assert [r["id"] for r in rows] == [first["id"], second["id"], untitled["id"]]
    assert set(rows[0]) == {"id", "title", "created_at", "updated_at"}
    got = shim.ok("GET", f"/sessions/{second['id']}")["session"]
    assert got["id"] == second["id"] and got["title"] == "Second"
    assert shim.ok("DELETE", f"/sessions/{second['id']}") == {"status": "success"}
    r = shim.request("GET", f"/sessions/{second['id']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert shim.request("DELETE", f"/sessions/{second['id']}").status_code == 404
    stats = shim.ok("GET", "/sessions/storage_stats")
    assert stats["session_count"] == 2 and stats["db_size_bytes"] > 0
    report = shim.ok("POST", "/sessions/maintenance")
    assert "vacuum" in report


def test_chat_streams_parts_then_done_with_the_session(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions", json={"title": "New Chat"})["session"]["id"]
    events = shim.chat(sid, "What is retrieval-augmented generation?")
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "done" and kinds.count("done") == 1
    assert "parts" in kinds and set(kinds) <= {"parts", "progress", "done"}
    parts = [e for e in events if e["type"] == "parts"]
    assert all(e["partial"] is True and e["author"] == "coordinator" for e in parts)
    assert any(p["thought"] for e in parts for p in e["parts"])
    done = events[-1]
    assert done["stop_reason"] == "end_turn" and done["invocation_id"]
    assistant = [m for m in done["session"]["messages"] if m["role"] != "user"]
    assert assistant and answer_text(events) in "".join(m["text"] for m in assistant)


def test_a_sessions_citation_style_is_set_over_http_and_answers_cite_so(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    options = {o["id"]: o for o in shim.ok("GET", f"/sessions/{sid}/settings")["options"]}
    style = options["citation_style"]
    assert style["current"] == "numbered" and [c["value"] for c in style["choices"]] == ["numbered", "author-year", "pandoc"]
    changed = shim.ok("PATCH", f"/sessions/{sid}/settings", json={"citation_style": "pandoc"})
    assert {o["id"]: o["current"] for o in changed["options"]}["citation_style"] == "pandoc"
    assert shim.ok("GET", f"/sessions/{sid}")["session"]["settings"]["citation_style"] == "pandoc"
    events = shim.chat(sid, "What is retrieval-augmented generation?")
    body = answer_text(events).split("# Cited Sources")[0]
    assert "[@" in body and not re.search(r"\[\d", body), body
    bad = shim.request("PATCH", f"/sessions/{sid}/settings", json={"citation_style": "mla"})
    assert bad.status_code == 422 and "numbered, author-year, pandoc" in bad.json()["error"]["message"], bad.text
    assert shim.request("PATCH", f"/sessions/{sid}/settings", json={"colour": "red"}).status_code == 422
    assert shim.request("PATCH", "/sessions/session-nope/settings", json={"citation_style": "pandoc"}).status_code == 404


def test_chat_validates_before_it_streams(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    cases = [
        ({"prompt": "hi", "session_id": "nope/../x", "mode": "library"}, 422),
        ({"prompt": "hi", "session_id": "session-0-000000", "mode": "library"}, 404),
        ({"prompt": 5, "session_id": sid, "mode": "library"}, 422),
        ({"prompt": "   ", "session_id": sid, "mode": "library"}, 422),
        ({"prompt": "hi", "session_id": sid, "mode": "papers", "active_items": []}, 422),
        ({"prompt": "hi", "session_id": sid, "mode": "galaxy"}, 422),
        ({"prompt": "hi", "session_id": sid, "mode": "papers", "active_items": [{"item_key": "../etc", "title": "x"}]}, 422),
    ]
    for body, status in cases:
        r = shim.request("POST", "/chat", json=body)
        assert r.status_code == status, (body, r.status_code, r.text)
        assert r.headers["content-type"] == "application/json"
        assert r.json()["status"] == "error" and r.json()["error"]["message"]
    assert shim.ok("GET", f"/sessions/{sid}")["session"]["messages"] == []


def test_chat_with_papers_mode_and_snippets_reaches_the_turn(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    events = shim.chat(
        sid, "What does this paper say about BERT?", mode="papers",
        active_items=[{"item_key": "KARPDPR1", "title": "Dense Passage Retrieval"}],
        snippets=[{"item_key": "KARPDPR1", "text": "two BERT encoders", "page": 3}],
    )
    assert events[-1]["type"] == "done"
    first = events[-1]["invocation_id"]
    restored = shim.ok("POST", f"/sessions/{sid}/rewind", json={"invocation_id": first})["restored"]
    assert restored["mode"] == "papers"
    assert [i["item_key"] for i in restored["active_context_items"]] == ["KARPDPR1"]
    assert restored["snippets"][0]["text"] == "two BERT encoders"


def test_a_second_turn_on_a_busy_session_is_409_and_the_first_survives_a_disconnect(slow_shim: tuple[Any, Shim]) -> None:
    d, shim = slow_shim
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    body = {"prompt": "What is retrieval-augmented generation?", "session_id": sid, "mode": "library"}
    with shim.client.stream("POST", "/chat", json=body) as r:
        assert r.status_code == 200
        first = next(e for e in sse_events(r.iter_lines()) if e["type"] != "progress")
        assert first["type"] == "parts"
        busy = shim.request("POST", "/chat", json=body)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
        # Leaving this block closes the stream mid-turn: the turn must go on.
    # The session is busy until the turn has ended: a rename is refused until then (the answer is
    # stored a moment before the session is let go, so the messages alone do not say it is free).
    deadline = time.monotonic() + 60
    while (renamed := shim.request("PATCH", f"/sessions/{sid}", json={"title": "after the disconnect"})).status_code == 409:
        if time.monotonic() > deadline:
            pytest.fail("the turn did not finish after its client disconnected")
        time.sleep(0.1)
    assert renamed.status_code == 200, renamed.text
    messages = shim.ok("GET", f"/sessions/{sid}")["session"]["messages"]
    assert any(m["role"] != "user" and m["text"] for m in messages), messages
    # ... and the session is free again.
    assert shim.chat(sid, "And HyDE?")[-1]["type"] == "done"


@pytest.fixture
def research_shim(daemon_factory: Any) -> Iterator[tuple[Any, Shim]]:
    """A daemon whose research budget is one round, with at most two extensions."""
    d = daemon_factory(args=["--http-port", "0"])
    write_library(d.data_dir)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"research": {"initial_budget": 1, "max_extensions": 2}}))
    d.start()
    with Shim(d.info) as s:
        yield d, s


THREE_PART = "What is retrieval-augmented generation? How does HyDE write hypothetical documents? What does dense passage retrieval encode?"


def test_spec_section_7_sequence_over_http_is_the_same_session_over_the_socket(research_shim: tuple[Any, Shim]) -> None:
    shim_daemon, shim = research_shim
    # 1. Startup: no sessions yet, so the sidebar creates one.
    assert shim.ok("GET", "/sessions")["sessions"] == []
    session = shim.ok("POST", "/sessions", json={"title": "New Chat"})["session"]
    sid = session["id"]
    assert shim.ok("GET", f"/sessions/{sid}")["session"]["messages"] == []
    # 2. Dialogue: two turns with streamed parts, persisted as they happen.
    one = shim.chat(sid, "What is retrieval-augmented generation?")
    assert one[-1]["type"] == "done" and any(e["type"] == "parts" for e in one)
    two = shim.chat(sid, "How does HyDE differ?")
    assert two[-1]["type"] == "done"
    inv_two = two[-1]["invocation_id"]
    assert inv_two != one[-1]["invocation_id"]
    assert {e["invocation_id"] for e in two if e["type"] == "parts"} == {inv_two}
    full = shim.ok("GET", f"/sessions/{sid}")["session"]
    assert [m["role"] for m in full["messages"]].count("user") == 2
    assert full["pending_hitl"] is None
    # 2b. Deep research: a three-part question with a budget of one round stops at a checkpoint.
    three = shim.chat(sid, THREE_PART)
    asked = [e for e in three if e["type"] == "request_input"]
    assert len(asked) == 1 and three[-1]["type"] == "done"
    inv_three = three[-1]["invocation_id"]
    assert asked[0]["invocation_id"] == inv_three and asked[0]["interrupt_id"] == "interrupt_ext_1"
    assert asked[0]["payload"]["unaddressed_aspects"] == THREE_PART.split("? ", 1)[1].replace("? ", "?|").split("|")
    assert three[-1]["session"]["pending_hitl"]["interrupt_id"] == "interrupt_ext_1"
    # The sidebar reopens: the checkpoint is still there; the user extends, with guidance.
    assert shim.ok("GET", f"/sessions/{sid}")["session"]["pending_hitl"]["invocation_id"] == inv_three
    more = shim.resume(sid, inv_three, "interrupt_ext_1", action="extend_budget", guidance="HyDE hypothetical documents")
    assert [e["interrupt_id"] for e in more if e["type"] == "request_input"] == ["interrupt_ext_2"]
    assert more[-1]["type"] == "done" and more[-1]["invocation_id"] == inv_three
    # Answering the old checkpoint again is refused and changes nothing.
    r = shim.request("POST", "/chat/resume", json={"session_id": sid, "invocation_id": inv_three,
                                                    "interrupt_id": "interrupt_ext_1", "response": {"action": "synthesize"}})
    assert r.status_code == 409 and r.json()["error"]["code"] == "checkpoint_not_pending"
    r = shim.request("POST", "/chat/resume", json={"session_id": sid, "invocation_id": inv_three,
                                                    "interrupt_id": "interrupt_ext_2", "response": {"action": "more!"}})
    assert r.status_code == 422
    final = shim.resume(sid, inv_three, "interrupt_ext_2", action="synthesize")
    assert final[-1]["type"] == "done" and final[-1]["session"]["pending_hitl"] is None
    assert "# Cited Sources" in answer_text(final)
    after = shim.ok("GET", f"/sessions/{sid}")["session"]
    turn_three = [m for m in after["messages"] if m["invocation_id"] == inv_three]
    # One turn: the question, then one answer (after the plan, a thought), all in one invocation.
    assert [m["role"] for m in turn_three if m["text"]] == ["user", "assistant"]
    # ... the user rewinds the last two turns.
    rewound = shim.ok("POST", f"/sessions/{sid}/rewind", json={"invocation_id": inv_two})
    assert [m["role"] for m in rewound["session"]["messages"]].count("user") == 1
    assert rewound["restored"]["text"] == "How does HyDE differ?"
    assert rewound["session"]["pending_hitl"] is None
    # The same session, as the socket sees it.
    with RawConn(shim_daemon.socket_path) as c:
        listed = c.result("session/list", {})["sessions"]
        assert [s["sessionId"] for s in listed] == [sid]
        over_socket = c.result("_zocrates/session/get", {"sessionId": sid})
        assert over_socket["messages"] == rewound["session"]["messages"]
        assert over_socket["title"] == shim.ok("GET", f"/sessions/{sid}")["session"]["title"]
    # 3. Deletion, visible over the socket too.
    assert shim.ok("DELETE", f"/sessions/{sid}") == {"status": "success"}
    assert shim.ok("GET", "/sessions")["sessions"] == []
    with RawConn(shim_daemon.socket_path) as c:
        assert c.result("session/list", {})["sessions"] == []


def test_rewind_of_an_unknown_turn_is_404_and_a_bad_body_400(shim: Shim) -> None:
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    r = shim.request("POST", f"/sessions/{sid}/rewind", json={"invocation_id": "e-nope"})
    assert r.status_code == 404
    r = shim.request("POST", f"/sessions/{sid}/rewind", json={"invocation_id": 7})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
    r = shim.request("POST", f"/sessions/{sid}/rewind", content=b"{nope", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_request"
    r = shim.request("POST", f"/sessions/{sid}/rewind", content=b"[1]", headers={"Content-Type": "application/json"})
    assert r.status_code == 400


def test_unknown_routes_and_methods_answer_json_errors(shim: Shim) -> None:
    r = shim.request("GET", "/nope")
    assert r.status_code == 404 and r.json()["status"] == "error"
    r = shim.request("PUT", "/sessions")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_sigterm_stops_the_shim_with_the_daemon(shim_daemon: Any) -> None:
    port = shim_daemon.info["http"]["port"]
    assert shim_daemon.stop() == 0
    assert not (shim_daemon.state_dir / "daemon.json").exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_sigterm_lets_a_streaming_turn_finish(slow_shim: tuple[Any, Shim]) -> None:
    d, shim = slow_shim
    sid = shim.ok("POST", "/sessions")["session"]["id"]
    body = {"prompt": "What is retrieval-augmented generation?", "session_id": sid, "mode": "library"}
    events: list[dict[str, Any]] = []
    with shim.client.stream("POST", "/chat", json=body) as r:
        it = sse_events(r.iter_lines())
        events.append(next(it))
        d.proc.send_signal(signal.SIGTERM)
        events.extend(it)
    assert events[-1]["type"] == "done"
    assert d.proc.wait(30) == 0


def test_no_http_means_no_port(daemon_factory: Any) -> None:
    d = daemon_factory(args=["--no-http"])
    d.start()
    assert d.info["http"] is None and d.info["token"] is None


def test_the_default_port_is_the_data_dirs_preferred_one(daemon_factory: Any) -> None:
    from zocratesd.shim import preferred_port

    d = daemon_factory()  # no --http-port: base port 8765 + the data dir's offset
    d.start()
    first = preferred_port(d.data_dir, 8765)
    assert first <= d.info["http"]["port"] < first + 50  # upward from it when another program holds it
