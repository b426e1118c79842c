"""The decision probe against a real HTTP server on 127.0.0.1 that answers like the API."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from zocratesd.compaction import HttpDecisionProbe, ProbeError, ProbeInput, RuleProbe, default_probe
from zocratesd.compaction import probe as probe_mod
from zocratesd.config import ZocratesConfig

pytestmark = pytest.mark.anyio

INPUT = ProbeInput(questions=["a", "b"], recent="user: a\nassistant: b", prompt_tokens=100,
                   hard_backstop_tokens=1000, turns_since_compaction=4, keep_recent_turns=2)


@dataclass
class FakeDecisions:
    """Scripted replies, one per request (the last one repeats): (status, body, delay_s, headers)."""

    script: list[tuple[int, str, float, dict[str, str]]]
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                fake.requests.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
                status, text, delay, headers = fake.script[min(len(fake.requests), len(fake.script)) - 1]
                time.sleep(delay)
                data = text.encode()
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Any]:
    made: list[FakeDecisions] = []

    def start(*script: tuple[int, str, float, dict[str, str]]) -> FakeDecisions:
        made.append(FakeDecisions(list(script)))
        return made[-1]

    yield start
    for f in made:
        f.close()


OK = (200, json.dumps({"id": "d1", "probability": 0.82, "decision": "compact"}), 0.0, {})


async def test_a_good_answer_gives_its_probability_and_the_request_has_the_documented_shape(serve: Any) -> None:
    fake = serve(OK)
    p = await HttpDecisionProbe(fake.url, "inception/mercury-decide:free", api_key="sk-x").decide(INPUT)
    assert p == 0.82
    [req] = fake.requests
    assert req["path"] == "/api/v1/decisions" and req["auth"] == "Bearer sk-x"
    assert req["body"]["model"] == "inception/mercury-decide:free"
    assert req["body"]["options"] == ["compact", "continue"]
    assert req["body"]["context"] == INPUT.recent and req["body"]["question"]


async def test_429_is_retried_with_bounded_backoff(serve: Any) -> None:
    fake = serve((429, "{}", 0.0, {"retry-after": "0"}), (429, "{}", 0.0, {"retry-after": "0"}), OK)
    assert await HttpDecisionProbe(fake.url, "m").decide(INPUT) == 0.82
    assert len(fake.requests) == 3


async def test_429_forever_gives_up_after_the_bounded_retries(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_mod, "MAX_BACKOFF_S", 0.05)
    fake = serve((429, "{}", 0.0, {"retry-after": "30"}))  # a long Retry-After is capped
    t0 = time.monotonic()
    with pytest.raises(ProbeError, match="429"):
        await HttpDecisionProbe(fake.url, "m").decide(INPUT)
    assert len(fake.requests) == probe_mod.MAX_RETRIES_429 + 1
    assert time.monotonic() - t0 < 20  # the Retry-After honoured would be 60 s


async def test_a_slow_endpoint_times_out(serve: Any) -> None:
    fake = serve((200, json.dumps({"probability": 0.9}), 60.0, {}))
    t0 = time.monotonic()
    with pytest.raises(ProbeError, match="did not answer"):
        await HttpDecisionProbe(fake.url, "m", timeout_s=0.3).decide(INPUT)
    assert time.monotonic() - t0 < 20  # the answer would take 60 s


@pytest.mark.parametrize("body", ["not json", "[0.9]", json.dumps({"probability": 1.5}), json.dumps({"probability": "high"}), "{}"])
async def test_malformed_answers_are_probe_errors(serve: Any, body: str) -> None:
    fake = serve((200, body, 0.0, {}))
    with pytest.raises(ProbeError):
        await HttpDecisionProbe(fake.url, "m").decide(INPUT)


async def test_other_http_errors_and_a_dead_endpoint_are_probe_errors(serve: Any) -> None:
    fake = serve((500, "{}", 0.0, {}))
    with pytest.raises(ProbeError, match="500"):
        await HttpDecisionProbe(fake.url, "m").decide(INPUT)
    url = fake.url
    fake.close()
    with pytest.raises(ProbeError):
        await HttpDecisionProbe(url, "m", timeout_s=1).decide(INPUT)


async def test_alternative_probability_shapes(serve: Any) -> None:
    fake = serve((200, json.dumps({"choices": [{"probability": 0.3}]}), 0.0, {}),
                 (200, json.dumps({"decision": {"probability": 0.6}}), 0.0, {}))
    probe = HttpDecisionProbe(fake.url, "m")
    assert await probe.decide(INPUT) == 0.3
    assert await probe.decide(INPUT) == 0.6


async def test_an_oversized_answer_is_refused_and_outside_text_is_escaped(serve: Any) -> None:
    fake = serve((200, json.dumps({"probability": 0.5, "padding": "x" * (20 * 1024 * 1024)}), 0.0, {}),
                 (200, json.dumps({"probability": "high\n2099-01-01 ERROR zocratesd: forged\x1b[2J"}), 0.0, {}))
    with pytest.raises(ProbeError, match="passed 65536 bytes"):
        await HttpDecisionProbe(fake.url, "m", max_answer_bytes=65536).decide(INPUT)
    with pytest.raises(ProbeError) as info:
        await HttpDecisionProbe(fake.url, "m").decide(INPUT)
    assert "\\n2099-01-01" in str(info.value) and "\n" not in str(info.value) and "\x1b" not in str(info.value)


async def test_credentials_in_the_url_are_sent_as_basic_auth_and_never_logged(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    fake = serve(OK)
    url = fake.url.replace("http://", "http://proxy:s3cret-pw@")
    assert await HttpDecisionProbe(url, "m").decide(INPUT) == 0.82
    assert fake.requests[0]["auth"] == "Basic " + base64.b64encode(b"proxy:s3cret-pw").decode()
    assert "HTTP Request: POST" in caplog.text and "s3cret" not in caplog.text


def test_the_probe_follows_the_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(default_probe(ZocratesConfig()), RuleProbe)
    monkeypatch.setenv("ZQ_KEY", "sk-1")
    cfg = ZocratesConfig(model={"provider": "openai", "name": "m", "base_url": "http://127.0.0.1:1/v1", "api_key_env": "ZQ_KEY"},
                         compaction={"probe_timeout_s": 3})
    probe = default_probe(cfg)
    assert isinstance(probe, HttpDecisionProbe)
    assert (probe.base_url, probe.model, probe.api_key, probe.timeout_s) == ("http://127.0.0.1:1/v1", "inception/mercury-decide:free", "sk-1", 3)
    assert probe.max_answer_bytes == cfg.model.max_line_bytes


async def test_rule_probe_rewards_topic_shift_progression_and_pressure() -> None:
    probe = RuleProbe()
    same = ProbeInput(questions=["graph neural networks", "graph neural networks depth"], recent="", prompt_tokens=0,
                      hard_backstop_tokens=100, turns_since_compaction=2, keep_recent_turns=2)
    assert await probe.decide(same) < 0.75
    shifted = ProbeInput(questions=["graph neural networks", "protein folding energy"], recent="", prompt_tokens=0,
                         hard_backstop_tokens=100, turns_since_compaction=2, keep_recent_turns=2)
    assert await probe.decide(shifted) >= 0.75
    progressed = ProbeInput(questions=same.questions, recent="", prompt_tokens=50, hard_backstop_tokens=100,
                            turns_since_compaction=4, keep_recent_turns=2)
    assert await probe.decide(progressed) >= 0.75


async def test_a_rate_limited_probe_never_fails_the_turn(serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from zocratesd.core.daemon import Daemon

    monkeypatch.setattr(probe_mod, "MAX_BACKOFF_S", 0.0)
    fake = serve((429, "{}", 0.0, {}))
    d = Daemon(tmp_path, ZocratesConfig(compaction={"min_turns": 3, "token_floor": 0}))
    await d.start()
    try:
        d.compactor.probe = HttpDecisionProbe(fake.url, "m", timeout_s=2)
        row = await d.create_session()
        results = [await d.prompt(row.id, f"question {i}") for i in range(4)]
        assert [r.stop_reason for r in results] == ["end_turn"] * 4
        assert len(fake.requests) == 2 * (probe_mod.MAX_RETRIES_429 + 1)  # asked after turns 3 and 4
        live = (await d.live_session(row.id)).live
        assert not any((ev.get("actions") or {}).get("compaction") for ev in live)
    finally:
        await d.aclose()
