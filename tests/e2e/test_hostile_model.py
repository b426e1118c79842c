"""A hostile model endpoint against the real daemon: what reaches zocratesd.log and the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_openai import Behaviour, FakeOpenAI
from rawrpc import RawConn

pytestmark = pytest.mark.e2e

FORGED = "2099-01-01 00:00:00,000 ERROR zocratesd: the daemon was compromised"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


def start(daemon_factory: Any, base_url: str) -> Any:
    d = daemon_factory()
    d.env["ZQ_KEY"] = "sk-e2e"
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(
        json.dumps({"model": {"provider": "openai", "name": "fake/model", "base_url": base_url, "api_key_env": "ZQ_KEY"}})
    )
    d.start()
    return d


def prompt(c: RawConn, sid: str, text: str) -> dict[str, Any]:
    return c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})


def test_model_error_text_cannot_forge_a_log_line(daemon_factory: Any, fake: FakeOpenAI) -> None:
    evil = "boom\n" + FORGED + "\x1b[2J\x1b]0;owned\x07"
    fake.behaviour = Behaviour(raw_lines=[f"data: {json.dumps({'error': {'message': evil}})}".encode()])
    d = start(daemon_factory, fake.base_url)
    with RawConn(d.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        err = prompt(c, sid, "hello")["error"]
        assert err["data"]["kind"] == "model_error" and "boom\\n2099-01-01" in err["data"]["message"]
        fake.behaviour = Behaviour(use_tools=False)
        assert prompt(c, sid, "hello again")["result"]["stopReason"] == "end_turn"
    log = (d.state_dir / "zocratesd.log").read_text(errors="replace")
    assert "boom\\n2099-01-01" in log  # ADK logged the failure (with its traceback), escaped
    assert not any(line.startswith(FORGED[:30]) for line in log.splitlines())
    assert "\x1b" not in log and "\x07" not in log


def test_credentials_in_base_url_stay_out_of_the_log_and_the_replies(daemon_factory: Any, fake: FakeOpenAI) -> None:
    port = fake.server.server_address[1]
    d = start(daemon_factory, f"http://proxyuser:s3cret-pw@127.0.0.1:{port}/v1")
    with RawConn(d.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        assert prompt(c, sid, "What is RAG?")["result"]["stopReason"] == "end_turn"
        assert fake.requests[0]["auth"].startswith("Basic ")
        fake.behaviour = Behaviour(fail_status=500)
        err = prompt(c, sid, "again")["error"]
        assert err["data"]["kind"] == "model_error"
        assert err["data"]["endpoint"] == f"http://***@127.0.0.1:{port}/v1"
        assert "s3cret" not in json.dumps(err)
    log = (d.state_dir / "zocratesd.log").read_text(errors="replace")
    assert "HTTP Request: POST http://127.0.0.1" in log  # httpx logs every request, at INFO ...
    assert "s3cret" not in log  # ... without the password
