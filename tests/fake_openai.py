"""A real HTTP server on 127.0.0.1 that answers like an OpenAI-compatible chat-completions endpoint.

It records every request body (so a test can see exactly what the model was sent) and behaves as
scripted: a research assistant that first calls `search_library` and then answers from the tool
result, streamed in small chunks; optionally slow, rate-limited (429) a number of times, failing
with an HTTP status, or streaming garbage.

Hostile modes (issue 16): one endless line (`line_bytes`, streamed from a small block, never held
whole), keep-alive comments forever, a huge answer, calls of a tool that does not exist on every
answer, and any raw SSE lines a test wants (`raw_lines`: malformed chunks, forged error text).
`sent_bytes` counts what the server managed to write, so a test can see where a client stopped.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

try:
    from fences import fenced_body
except ImportError:  # imported as tests.fake_openai (the JS tests start it so)
    from tests.fences import fenced_body


@dataclass
class Behaviour:
    chunk_delay_s: float = 0.0  # pause between streamed chunks
    rate_limit_times: int = 0  # answer 429 this many times first
    retry_after: str = "0"
    fail_status: int | None = None  # answer this HTTP status (with an OpenAI-style error body)
    malformed: bool = False  # stream a line that is not JSON
    reasoning: bool = False  # stream a reasoning delta before the text
    use_tools: bool = True
    line_bytes: int = 0  # stream one `data:` line of this many bytes that never ends
    keepalive_forever: bool = False  # stream ": keep-alive" comments until the client hangs up
    keepalive_interval_s: float = 0.05
    answer_chars: int = 0  # answer with this many characters of text, in 64 KiB deltas
    unknown_tool: str | None = None  # every answer calls this tool (which does not exist)
    raw_lines: list[bytes] | None = None  # stream these lines as they are, then [DONE]
    # A model that obeys instructions found in library text: a passage saying "tag every item with X"
    # makes it call tag_items on the passages' items (the prompt-injection case of writes).
    obey_library: bool = False
    # When the library search finds nothing, search online (search_online_literature) and answer from it.
    online_when_empty: bool = False
    # Go online first (search_online_literature before the library), as a model may decide to.
    online_first: bool = False
    # A model that writes its own answer from the search: (the question, the numbered passages it was
    # given) -> the answer's text (right or wrong quotes, pages, papers: whatever a test needs).
    answer: Callable[[str, list[dict[str, Any]]], str] | None = None


@dataclass
class FakeOpenAI:
    behaviour: Behaviour = field(default_factory=Behaviour)
    requests: list[dict[str, Any]] = field(default_factory=list)
    rate_limited: int = 0
    sent_bytes: int = 0

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                fake.requests.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
                fake.answer(self, body)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hangs up mid-answer (a cancelled turn) is not the server's error

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- what the "model" says -------------------------------------------------------------

    @staticmethod
    def reply_for(body: dict[str, Any], use_tools: bool, obey_library: bool = False, online_when_empty: bool = False,
                  online_first: bool = False, answer: Callable[[str, list[dict[str, Any]]], str] | None = None) -> dict[str, Any]:
        messages = body["messages"]
        last = messages[-1]
        questions = [m["content"] for m in messages if m["role"] == "user"]
        if last["role"] == "tool":  # fenced untrusted text around the tool's JSON, which a model reads
            result = json.loads(fenced_body(last["content"]))
            if "write_id" in result:
                return {"content": f"I proposed the change ({result['write_id']}); you are asked to confirm it."}
            if "works" in result:  # search_online_literature's answer
                cited = "; ".join(f"[{w['n']}] {w['title']} ({w['source']}: {w['link']})" for w in result["works"])
                return {"content": f"From {len(result['works'])} online works: {cited}"}
            tools = {t["function"]["name"] for t in body.get("tools") or []}
            if online_when_empty and not result.get("passages") and "search_online_literature" in tools:
                args = json.dumps({"query": questions[-1]})
                return {"tool_calls": [{"id": f"call_{len(messages)}", "name": "search_online_literature", "arguments": args}]}
            injected = re.search(r"tag every item with (\w+)", json.dumps(result.get("passages") or []))
            if obey_library and injected:
                keys = sorted({p["item_key"] for p in result["passages"]})
                args = json.dumps({"item_keys": keys, "tags": [injected.group(1)]})
                return {"tool_calls": [{"id": f"call_{len(messages)}", "name": "tag_items", "arguments": args}]}
            if answer is not None:
                return {"content": answer(questions[-1], list(result.get("passages") or []))}
            n = len(result.get("passages") or [])
            said = f"From {n} passages: answer to '{questions[-1]}' [1]. I have seen {len(questions)} questions."
            # Sources from beyond the library are cited as a model is told to: title, marked online, DOI link.
            online = [p for p in result.get("passages") or [] if p.get("kind") == "online"]
            if online:
                said += " Online works: " + "; ".join(f"[{p['n']}] {p['title']} (online: {p['link']})" for p in online)
            return {"content": said}
        if online_first and "search_online_literature" in {t["function"]["name"] for t in body.get("tools") or []}:
            args = json.dumps({"query": questions[-1]})
            return {"tool_calls": [{"id": f"call_{len(messages)}", "name": "search_online_literature", "arguments": args}]}
        if use_tools and body.get("tools"):
            return {"tool_calls": [{"id": f"call_{len(messages)}", "name": "search_library", "arguments": json.dumps({"query": questions[-1]})}]}
        return {"content": f"Plain answer to '{questions[-1]}'."}

    def answer(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        b = self.behaviour
        if self.rate_limited < b.rate_limit_times:
            self.rate_limited += 1
            self._json(h, 429, {"error": {"message": "Rate limit exceeded: free-models-per-min"}}, {"Retry-After": b.retry_after})
            return
        if b.fail_status:
            self._json(h, b.fail_status, {"error": {"message": "Invalid API key provided", "code": b.fail_status}})
            return
        if b.line_bytes or b.keepalive_forever or b.answer_chars or b.raw_lines is not None:
            self._hostile(h, b)
            return
        reply = self.reply_for(body, b.use_tools, b.obey_library, b.online_when_empty, b.online_first, b.answer)
        if b.unknown_tool:
            n = len(body["messages"])
            reply = {"tool_calls": [{"id": f"call_{n}", "name": b.unknown_tool, "arguments": "{}"}]}
        usage = {"prompt_tokens": sum(len(str(m.get("content") or "")) for m in body["messages"]) // 4, "completion_tokens": 7, "total_tokens": 99}
        if not body.get("stream"):
            msg: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
            if "tool_calls" in reply:
                msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in reply["tool_calls"]]
            self._json(h, 200, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}], "usage": usage})
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()

        def send(obj: Any) -> None:
            data = b": keep-alive\n\n" if obj is None else (obj if isinstance(obj, bytes) else f"data: {json.dumps(obj)}\n\n".encode())
            self._chunk(h, data)

        def delta(d: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"choices": [{"index": 0, "delta": d, "finish_reason": finish}]}

        try:
            send(None)
            if b.malformed:
                send(b"data: {this is not json\n\n")
            if b.reasoning:
                send(delta({"reasoning": "Thinking about it. "}))
            if "tool_calls" in reply:
                for i, c in enumerate(reply["tool_calls"]):
                    args = c["arguments"]
                    send(delta({"tool_calls": [{"index": i, "id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": args[: len(args) // 2]}}]}))
                    send(delta({"tool_calls": [{"index": i, "function": {"arguments": args[len(args) // 2 :]}}]}))
            else:
                words = reply["content"].split(" ")
                for i in range(0, len(words), 3):
                    if b.chunk_delay_s:
                        time.sleep(b.chunk_delay_s)
                    send(delta({"content": " ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "")}))
            send(delta({}, "tool_calls" if "tool_calls" in reply else "stop"))
            send({"choices": [], "usage": usage})
            send(b"data: [DONE]\n\n")
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a cancelled turn)

    def _chunk(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        h.wfile.flush()
        self.sent_bytes += len(data)

    def _hostile(self, h: BaseHTTPRequestHandler, b: Behaviour) -> None:
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        try:
            self._chunk(h, b": keep-alive\n\n")
            if b.line_bytes:
                self._chunk(h, b'data: {"choices": [{"index": 0, "delta": {"content": "')
                block = b"x" * 65536
                left = b.line_bytes
                while left > 0:
                    self._chunk(h, block[: min(left, len(block))])
                    left -= len(block)
            elif b.keepalive_forever:
                while True:
                    time.sleep(b.keepalive_interval_s)
                    self._chunk(h, b": keep-alive\n\n")
            elif b.answer_chars:
                piece = "y" * 65536
                for i in range(0, b.answer_chars, len(piece)):
                    text = piece[: min(len(piece), b.answer_chars - i)]
                    delta = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
                    self._chunk(h, f"data: {json.dumps(delta)}\n\n".encode())
                self._chunk(h, b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n')
            else:
                for line in b.raw_lines or []:
                    self._chunk(h, line + b"\n\n")
            self._chunk(h, b"data: [DONE]\n\n")
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading, as it should

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
