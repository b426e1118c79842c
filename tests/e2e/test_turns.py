"""Turns against the real daemon: streaming, crash recovery, cancel, busy sessions, rewind, bad input."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_openai import Behaviour, FakeOpenAI
from rawrpc import RawConn

pytestmark = pytest.mark.e2e

PASSAGES = [
    {"item_key": "LEWIS202", "title": "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks", "creators": ["Patrick Lewis", "Ethan Perez"], "year": 2020, "page": 1,
     "text": "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index of Wikipedia."},
    {"item_key": "GAOHYDE1", "title": "Precise Zero-Shot Dense Retrieval without Relevance Labels", "creators": ["Luyu Gao"], "year": 2022, "page": 2,
     "text": "HyDE asks a language model to write a hypothetical document, then embeds it to retrieve real ones."},
    {"item_key": "KARPDPR1", "title": "Dense Passage Retrieval for Open-Domain Question Answering", "creators": ["Vladimir Karpukhin"], "year": 2020, "page": 3,
     "text": "Dense passage retrieval encodes questions and passages with two BERT encoders and outperforms BM25."},
]


def write_library(data_dir: Path) -> None:
    state = data_dir / "zocrates-data"
    state.mkdir(parents=True, exist_ok=True)
    (state / "library_passages.jsonl").write_text("\n".join(json.dumps(p) for p in PASSAGES) + "\n")


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def openai_daemon(daemon_factory: Any, fake: FakeOpenAI) -> Any:
    d = daemon_factory()
    write_library(d.data_dir)
    d.env["ZQ_KEY"] = "sk-e2e"
    (d.state_dir / "zocrates_config.json").write_text(
        json.dumps({"model": {"provider": "openai", "name": "fake/model", "base_url": fake.base_url, "api_key_env": "ZQ_KEY"}})
    )
    d.start()
    return d


@pytest.fixture
def offline_daemon(daemon_factory: Any) -> Any:
    d = daemon_factory()
    write_library(d.data_dir)
    d.start()
    return d


def prompt(c: RawConn, sid: str, text: str, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}
    if meta:
        params["_meta"] = {"zocrates": meta}
    return c.call("session/prompt", params)


def updates(c: RawConn) -> list[dict[str, Any]]:
    out = [n["params"]["update"] for n in c.notifications if n["method"] == "session/update"]
    c.notifications.clear()
    return out


def text_of(ups: list[dict[str, Any]], kind: str = "agent_message_chunk") -> str:
    return "".join(u["content"]["text"] for u in ups if u["sessionUpdate"] == kind)


def test_three_turns_survive_sigkill_and_turn_three_sees_one_and_two(openai_daemon: Any, fake: FakeOpenAI) -> None:
    questions = ["What is retrieval-augmented generation?", "How does HyDE differ?", "Which of these uses BERT encoders?"]
    with RawConn(openai_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        answers = []
        for q in questions:
            reply = prompt(c, sid, q)
            assert reply["result"]["stopReason"] == "end_turn", reply
            answers.append(text_of(updates(c)))
    assert all(a.startswith("From ") for a in answers)
    # Turn 3's request to the model holds turns 1 and 2: questions, tool results, answers.
    third = [r for r in fake.requests if r["body"]["messages"][-1].get("content") == questions[2]]
    msgs = third[0]["body"]["messages"]
    contents = [m.get("content") for m in msgs]
    for q, a in zip(questions[:2], answers[:2], strict=True):
        assert q in contents and a in contents
    assert sum(1 for m in msgs if m["role"] == "tool") == 2

    openai_daemon.kill()
    openai_daemon.start()
    with RawConn(openai_daemon.socket_path) as c:
        loaded = c.call("session/load", {"sessionId": sid, "cwd": "/tmp"})["result"]
        assert [o["id"] for o in loaded["configOptions"]] == ["scope", "model", "research_budget", "compaction", "citation_style"]
        replay = updates(c)
    assert [u["content"]["text"] for u in replay if u["sessionUpdate"] == "user_message_chunk"] == questions
    assert [u["content"]["text"] for u in replay if u["sessionUpdate"] == "agent_message_chunk"] == answers
    assert replay[-1] == {"sessionUpdate": "session_info_update", "title": questions[0]}


def test_offline_turn_cites_the_library_and_records_state(offline_daemon: Any) -> None:
    with RawConn(offline_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        reply = prompt(c, sid, "What does HyDE do?", mode="papers", activeItems=[{"item_key": "GAOHYDE1", "title": "HyDE"}],
                       snippets=[{"kind": "text", "item_key": "GAOHYDE1", "key": "ANNOT001", "text": "HyDE is zero-shot.", "page": 4}])
        assert reply["result"]["stopReason"] == "end_turn"
        inv = reply["result"]["_meta"]["zocrates"]["invocationId"]
        ups = updates(c)
        answer = text_of(ups)
        assert "[1]" in answer and "# Cited Sources" in answer and "GAOHYDE1" in answer
        assert "LEWIS202" not in answer  # papers mode: only the selected item
        (call,) = [u for u in ups if u["sessionUpdate"] == "tool_call"]
        assert call["kind"] == "search" and call["rawInput"] == {"query": "What does HyDE do?"}
        assert not [u for u in ups if u["sessionUpdate"] == "user_message_chunk"]  # not echoed to the prompter
        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        assert [m["role"] for m in ui["messages"]] == ["user", "assistant", "assistant"]
        assert ui["title"] == "What does HyDE do?"
        # Nothing found: said plainly.
        reply = prompt(c, sid, "zebrafish migration", mode="library")
        assert "found nothing" in text_of(updates(c))
    import sqlite3

    db = sqlite3.connect(offline_daemon.db_path)
    state = json.loads(db.execute("SELECT state FROM sessions WHERE id = ?", (sid,)).fetchone()[0])
    assert state["active_mode"] == "library"
    assert state["retrieved_evidence"][0]["invocation_id"] == inv
    assert state["retrieved_evidence"][0]["citations"][0] == "GAOHYDE1"
    rows = [json.loads(r[0]) for r in db.execute("SELECT event_data FROM events WHERE session_id = ? ORDER BY timestamp", (sid,))]
    first_user = next(r for r in rows if r["author"] == "user" and r.get("content"))
    delta = first_user["actions"]["state_delta"]
    assert delta["snippets"][0]["key"] == "ANNOT001"  # provenance kept for the tools...
    assert 'key="ANNOT001"' not in delta["focal_snippets_str"] and "HyDE is zero-shot." in delta["focal_snippets_str"]  # ...not in prompts
    assert "GAOHYDE1" in delta["active_context_items_str"]


def test_cancel_stops_the_turn_and_the_next_turn_is_clean(openai_daemon: Any, fake: FakeOpenAI) -> None:
    # Five more chunks, 2 s apart, would finish the answer: the cancel has 10 s to stop it, however loaded the machine.
    fake.behaviour = Behaviour(chunk_delay_s=2.0, use_tools=False)
    question = "Write a very long essay about dense retrieval and everything around it please"
    with RawConn(openai_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        c.send({"jsonrpc": "2.0", "id": "p1", "method": "session/prompt", "params": {"sessionId": sid, "prompt": [
            {"type": "text", "text": question}]}})
        while True:  # wait for the first streamed chunk
            msg = c.recv()
            if msg.get("method") == "session/update" and msg["params"]["update"]["sessionUpdate"] == "agent_message_chunk":
                break
        c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        reply = c.recv_reply("p1")
        assert reply["result"]["stopReason"] == "cancelled"
        # Stopped mid-answer, not after it: the rest of the answer never came.
        shown = msg["params"]["update"]["content"]["text"] + text_of(updates(c))
        assert shown and "please'" not in shown, shown
        fake.behaviour = Behaviour(use_tools=False)
        assert prompt(c, sid, "Short question")["result"]["stopReason"] == "end_turn"
        assert text_of(updates(c)).endswith("Plain answer to 'Short question'.")


def test_busy_session_is_refused_at_once_while_others_run(openai_daemon: Any, fake: FakeOpenAI) -> None:
    # The model never finishes this turn: every answer below comes while it runs (one queued behind
    # the turn would never come, and the connection's timeout would fail the test).
    fake.behaviour = Behaviour(keepalive_forever=True, keepalive_interval_s=0.2)
    with RawConn(openai_daemon.socket_path) as a, RawConn(openai_daemon.socket_path) as b:
        sid = a.result("session/new", {"cwd": "/tmp"})["sessionId"]
        other = a.result("session/new", {"cwd": "/tmp"})["sessionId"]
        a.send({"jsonrpc": "2.0", "id": "long", "method": "session/prompt", "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "one two three four five six seven"}]}})
        deadline = time.monotonic() + 30
        while not fake.requests:  # the turn has reached the model
            assert time.monotonic() < deadline, "the turn never called the model"
            time.sleep(0.01)
        for method, params in [
            ("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}),
            ("_zocrates/session/rename", {"sessionId": sid, "title": "x"}),
            ("session/delete", {"sessionId": sid}),
            ("_zocrates/session/rewind", {"sessionId": sid, "invocationId": "e-any"}),
        ]:
            err = b.call(method, params)["error"]
            assert err["code"] == 1001 and err["data"]["kind"] == "session_busy" and err["data"]["activity"] == "turn", (method, err)
        # Reads and other sessions are not blocked.
        assert b.result("_zocrates/session/get", {"sessionId": sid})["id"] == sid
        fake.behaviour = Behaviour(use_tools=False)
        assert prompt(b, other, "meanwhile")["result"]["stopReason"] == "end_turn"
        a.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        assert a.recv_reply("long")["result"]["stopReason"] == "cancelled"


def test_rewind_restores_context_keeps_the_title_and_refuses_unknown_turns(offline_daemon: Any) -> None:
    with RawConn(offline_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        first = prompt(c, sid, "What is RAG?")["result"]["_meta"]["zocrates"]["invocationId"]
        second = prompt(c, sid, "And dense passage retrieval?", mode="papers", activeItems=[{"item_key": "KARPDPR1", "title": "DPR"}],
                        snippets=[{"kind": "text", "item_key": "KARPDPR1", "text": "two encoders"}])["result"]["_meta"]["zocrates"]["invocationId"]
        c.result("_zocrates/session/rename", {"sessionId": sid, "title": "My RAG notes"})
        out = c.result("_zocrates/session/rewind", {"sessionId": sid, "invocationId": second})
        assert out["restored"]["text"] == "And dense passage retrieval?"
        assert out["restored"]["mode"] == "papers"
        assert out["restored"]["active_context_items"] == [{"item_key": "KARPDPR1", "title": "DPR"}]
        assert out["restored"]["snippets"][0]["text"] == "two encoders"
        assert [m["text"] for m in out["session"]["messages"] if m["role"] == "user"] == ["What is RAG?"]
        assert out["session"]["title"] == "My RAG notes"
        # The rewound turn is gone: rewinding it again is "not found"; so is a made-up id.
        for inv in (second, "e-made-up"):
            err = c.call("_zocrates/session/rewind", {"sessionId": sid, "invocationId": inv})["error"]
            assert err["code"] == -32002 and err["data"]["invocationId"] == inv
        # Rewinding the first turn (which set the title from its prompt) keeps the user's title.
        out = c.result("_zocrates/session/rewind", {"sessionId": sid, "invocationId": first})
        assert out["session"]["messages"] == [] and out["session"]["title"] == "My RAG notes"
        assert prompt(c, sid, "Fresh start")["result"]["stopReason"] == "end_turn"
        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        assert [m["text"] for m in ui["messages"] if m["role"] == "user"] == ["Fresh start"]


def test_updates_reach_every_attached_connection(offline_daemon: Any) -> None:
    with RawConn(offline_daemon.socket_path) as a, RawConn(offline_daemon.socket_path) as b:
        sid = a.result("session/new", {"cwd": "/tmp"})["sessionId"]
        b.result("session/load", {"sessionId": sid, "cwd": "/tmp"})
        b.notifications.clear()
        assert prompt(a, sid, "What is HyDE?")["result"]["stopReason"] == "end_turn"
        a_text = text_of(updates(a))
        b.result("session/list", {})  # a round trip: everything the daemon sent b before is now read
        seen = updates(b)
        assert [u["content"]["text"] for u in seen if u["sessionUpdate"] == "user_message_chunk"] == ["What is HyDE?"]
        assert text_of(seen) == a_text
        renamed = a.result("_zocrates/session/rename", {"sessionId": sid, "title": "HyDE"})
        b.result("session/list", {})
        assert {"sessionUpdate": "session_info_update", "title": renamed["title"]} in updates(b)


BAD_PROMPTS: list[tuple[dict[str, Any], int]] = [
        ({"sessionId": None, "prompt": [{"type": "text", "text": "x"}]}, -32602),  # no sessionId
        ({"sessionId": "session-nope", "prompt": [{"type": "text", "text": "x"}]}, -32002),
        ({"sessionId": "../../etc", "prompt": [{"type": "text", "text": "x"}]}, -32602),
        ({"prompt": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}, -32602),
        ({"prompt": [{"type": "resource", "resource": {"uri": "file:///x", "text": "y"}}]}, -32602),
        ({"prompt": [{"type": "text", "text": "   "}]}, -32602),
        ({"prompt": "not a list"}, -32602),
        ({"prompt": [{"type": "text", "text": "x" * 100_001}]}, -32602),
        ({"prompt": [{"type": "text", "text": "x"}], "_meta": {"zocrates": {"mode": "everything"}}}, -32602),
        ({"prompt": [{"type": "text", "text": "x"}], "_meta": {"zocrates": {"mode": "papers"}}}, -32602),
        ({"prompt": [{"type": "text", "text": "x"}], "_meta": {"zocrates": {"activeItems": [{"item_key": "../x"}]}}}, -32602),
        ({"prompt": [{"type": "text", "text": "x"}], "_meta": {"zocrates": {"snippets": [{"item_key": "ABCD1234", "kind": "video"}]}}}, -32602),
        ({"prompt": [{"type": "text", "text": "x"}], "_meta": {"zocrates": "papers"}}, -32602),
]


def test_bad_prompts_get_clear_errors_and_change_nothing(offline_daemon: Any) -> None:
    with RawConn(offline_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        for case, code in BAD_PROMPTS:
            params = {k: v for k, v in {"sessionId": sid, **case}.items() if v is not None}
            err = c.call("session/prompt", params)["error"]
            assert err["code"] == code and isinstance(err["data"]["kind"], str), (case, err)
        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        assert ui["messages"] == [] and ui["title"] == "New Chat"
        # The session still takes a good prompt.
        assert prompt(c, sid, "What is RAG?")["result"]["stopReason"] == "end_turn"


def test_a_model_failure_is_a_clear_error(openai_daemon: Any, fake: FakeOpenAI) -> None:
    fake.behaviour = Behaviour(fail_status=401)
    with RawConn(openai_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        err = prompt(c, sid, "hello")["error"]
        assert err["code"] == 1003 and err["data"]["kind"] == "model_error" and "check the API key" in err["data"]["message"]
        fake.behaviour = Behaviour(use_tools=False)
        assert prompt(c, sid, "hello again")["result"]["stopReason"] == "end_turn"
