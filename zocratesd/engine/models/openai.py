"""`openai`: any OpenAI-compatible chat-completions endpoint (OpenRouter, Ollama, LM Studio,
llama.cpp, vLLM), streaming and tool calls, over httpx.

The ADK request becomes `POST {base_url}/chat/completions`: the system instruction, the
conversation (text, the model's tool calls, tool results as `role: tool`), and the tools'
JSON Schemas. A streamed answer arrives as SSE `data:` lines of deltas: text deltas become partial
responses, `reasoning`/`reasoning_content` deltas (OpenRouter, DeepSeek, llama.cpp) become
thoughts, tool-call deltas are assembled by index. Failures are `ModelError`s with a message that
says what went wrong and what to check: an HTTP 429 is retried with bounded backoff (honouring
`Retry-After`) as long as nothing has been streamed yet; anything else fails the turn at once.

The endpoint is outside the daemon and may be broken or hostile, so nothing it sends is trusted:
an SSE line is read incrementally and may not pass `max_line_bytes` (config.ModelConfig), an
answer may not pass `max_answer_chars`, one call may not take longer than `max_call_s` however
often the endpoint sends keep-alive comments, every field of every chunk is type-checked (any
surprise is a `ModelError`, never an `internal` error), and text from the endpoint is escaped
before it goes into an error message (the message is logged, by ADK with its traceback, and shown
to clients). A `user:password@` in base_url is sent as HTTP Basic auth and never shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Awaitable
from contextlib import aclosing
from typing import Any, Final, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import anyio
import httpx
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import Field, PrivateAttr

from zocratesd.adkcompat import LlmCapabilities
from zocratesd.config import MODEL_MAX_ANSWER_CHARS, MODEL_MAX_LINE_BYTES, MODEL_MAX_TURN_S
from zocratesd.engine.models.fencing import tool_result_text
from zocratesd.errors import ModelError
from zocratesd.logtext import escape_for_log, redact_credentials, redact_url

# Connecting should be quick even to a remote endpoint; a local model may think for minutes
# before its first token, and a streamed answer may pause between tokens, so reads get long.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0
# 429s: a free OpenRouter model answers them routinely; a few retries with growing waits ride
# out a burst, and the cap keeps a turn from hanging on a daily quota.
MAX_RETRIES_429 = 3
BACKOFF_BASE_S = 1.0
MAX_BACKOFF_S = 20.0
# An HTTP error's body is read this far: an OpenAI-style error is a few hundred bytes, and only
# its message (cut to ERROR_DETAIL_CHARS) reaches the user.
ERROR_BODY_BYTES: Final = 8192
ERROR_DETAIL_CHARS: Final = 300
# Parallel tool calls in one answer: models make a handful; a tool-call index is a dict key here,
# so an unbounded one would let one chunk (`"index": 10**9`) ask for a billion tool runs.
MAX_TOOL_CALLS_PER_ANSWER: Final = 64
# A tool's name as chat-completions endpoints accept it (OpenAI: [a-zA-Z0-9_-]{1,64}; some allow
# dots and colons). Anything else is not a call of ours, and ADK would log it raw.
_TOOL_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

T = TypeVar("T")


class LineTooLong(Exception):
    """An SSE line passed its cap before it ended."""


class SseLines:
    """Sans-IO SSE line splitter: bytes in, complete lines out, with a bounded buffer.

    A line ends at `\\n`, `\\r\\n` or `\\r` (the SSE spec). Bytes of an unfinished line are kept
    until its end; once they pass `max_line_bytes`, `feed` raises LineTooLong, so at most
    max_line_bytes plus the chunk being fed are ever held however long the endpoint's line.
    """

    _EOL: Final = re.compile(rb"[\r\n]")

    def __init__(self, max_line_bytes: int):
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[str]:
        buf = self._buf
        # No line end is in the old bytes but perhaps a last `\r` waiting for its `\n`.
        scan = max(0, len(buf) - 1)
        buf += data
        lines: list[str] = []
        start = 0
        while (m := self._EOL.search(buf, scan)) is not None:
            i = m.start()
            if buf[i] == 0x0D:
                if i + 1 == len(buf):
                    break  # a `\r` at the end: the next chunk may start with its `\n`
                end = i + 2 if buf[i + 1] == 0x0A else i + 1
            else:
                end = i + 1
            if i - start > self.max_line_bytes:
                raise LineTooLong(i - start)
            # A line ends at an ASCII byte, so it never splits a UTF-8 sequence.
            lines.append(buf[start:i].decode("utf-8", "replace"))
            start = scan = end
        del buf[:start]
        if len(buf) > self.max_line_bytes + 1:  # + a pending `\r`
            raise LineTooLong(len(buf))
        return lines

    def close(self) -> list[str]:
        """The last line when the stream ended without a line end."""
        rest = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        return [rest.decode("utf-8", "replace")] if rest else []


def split_credentials(url: str) -> tuple[str, httpx.BasicAuth | None]:
    """`url` without its `user:password@`, and that user info as HTTP Basic auth (what httpx would
    send for it). The URL httpx sees is the one it logs (at INFO, every request), so it must hold no
    password; the compaction probe talks to the same endpoint the same way."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=host)), httpx.BasicAuth(unquote(user), unquote(password))


class _Malformed(Exception):
    """A chunk or answer of the wrong shape; `what` says where (no text of the endpoint's)."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def _kind(value: Any) -> str:
    return "null" if value is None else {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{where} should be an object, not {_kind(value)}")
    return value


def _opt_obj(value: Any, where: str) -> dict[str, Any]:
    return {} if value is None else _obj(value, where)


def _opt_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Malformed(f"{where} should be an array, not {_kind(value)}")
    return value


def _opt_str(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Malformed(f"{where} should be a string, not {_kind(value)}")
    return value


def _index(value: Any, where: str) -> int:
    if value is None:
        return 0  # some servers leave it out when there is one call
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Malformed(f"{where} should be an integer, not {_kind(value)}")
    if not 0 <= value < MAX_TOOL_CALLS_PER_ANSWER:
        raise _Malformed(f"{where} is {value}, outside 0..{MAX_TOOL_CALLS_PER_ANSWER - 1}")
    return value


def _count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _Malformed(f"{where} should be a count (an integer of 0 or more), not {_kind(value)}")
    return value


def _usage(raw: Any) -> types.GenerateContentResponseUsageMetadata | None:
    """Token counts, when the endpoint sends them."""
    usage = _opt_obj(raw, "usage")
    if not usage:
        return None
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=_count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        candidates_token_count=_count(usage.get("completion_tokens"), "usage.completion_tokens"),
        total_token_count=_count(usage.get("total_tokens"), "usage.total_tokens"),
    )


def _parse_json(raw: str | bytes) -> Any:
    """JSON, or None when it is not: malformed, too deeply nested for the parser (a line of
    `[[[[...`), or a number too long to convert."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return _NOT_JSON


_NOT_JSON: Final = object()


class _Answer:
    """One answer as it streams in: text, thoughts and tool calls, with its size checked as it grows."""

    def __init__(self, max_chars: int):
        self.max_chars = max_chars
        self.chars = 0
        self.text: list[str] = []
        self.thought: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.usage: types.GenerateContentResponseUsageMetadata | None = None
        self.finish: str | None = None

    def grow(self, piece: str) -> None:
        self.chars += len(piece)
        if self.chars > self.max_chars:
            raise _TooBig(self.max_chars)

    def call(self, index: int) -> dict[str, str]:
        return self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})


class _TooBig(Exception):
    def __init__(self, limit: int):
        super().__init__(limit)
        self.limit = limit


def _final(answer: _Answer) -> LlmResponse:
    parts: list[types.Part] = []
    thought = "".join(answer.thought)
    text = "".join(answer.text)
    if thought:
        parts.append(types.Part(text=thought, thought=True))
    if text:
        parts.append(types.Part(text=text))
    for _, call in sorted(answer.calls.items()):
        if not _TOOL_NAME_RE.fullmatch(call["name"]):
            what = "a tool call without a name" if not call["name"] else f"a tool call named {escape_for_log(call['name'], 80)!s}"
            raise ModelError(f"the model sent {what}, which cannot name a tool")
        args = _parse_json(call["arguments"] or "{}")
        if args is _NOT_JSON:
            raise ModelError("the model sent tool arguments that are not JSON", tool=call["name"])
        if not isinstance(args, dict):
            raise ModelError(f"the model sent tool arguments that are {_kind(args)}, not an object", tool=call["name"])
        parts.append(types.Part(function_call=types.FunctionCall(id=call["id"] or None, name=call["name"], args=args)))
    if not parts:
        raise ModelError("the model answered with nothing (no text, no tool call)")
    return LlmResponse(
        content=types.Content(role="model", parts=parts),
        partial=False,
        turn_complete=True,
        finish_reason=types.FinishReason.MAX_TOKENS if answer.finish == "length" else types.FinishReason.STOP,
        usage_metadata=answer.usage,
    )


def _schema(value: Any) -> Any:
    """genai Schema dumps use upper-case type names ("OBJECT"); JSON Schema wants lower case."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "type" and isinstance(v, str):
                out[k] = v.lower()
            elif k == "property_ordering":
                continue
            else:
                out[k] = _schema(v)
        return out
    if isinstance(value, list):
        return [_schema(v) for v in value]
    return value


def _tools(request: LlmRequest) -> list[dict[str, Any]]:
    out = []
    for tool in (request.config.tools if request.config and request.config.tools else []):
        for decl in getattr(tool, "function_declarations", None) or []:
            if decl.parameters_json_schema is not None:
                params = decl.parameters_json_schema
            elif decl.parameters is not None:
                params = _schema(decl.parameters.model_dump(mode="json", exclude_none=True))
            else:
                params = {"type": "object", "properties": {}}
            out.append({"type": "function", "function": {"name": decl.name, "description": decl.description or "", "parameters": params}})
    return out


def _system(request: LlmRequest) -> str | None:
    si = request.config.system_instruction if request.config else None
    if si is None:
        return None
    if isinstance(si, str):
        return si
    if isinstance(si, types.Content):
        return "".join(p.text or "" for p in si.parts or [])
    return str(si)


def to_messages(request: LlmRequest) -> list[dict[str, Any]]:
    """The conversation in chat-completions form (thoughts are not sent back)."""
    messages: list[dict[str, Any]] = []
    system = _system(request)
    if system:
        messages.append({"role": "system", "content": system})
    for content in request.contents:
        texts = [p.text for p in content.parts or [] if p.text and not p.thought]
        calls = [p.function_call for p in content.parts or [] if p.function_call]
        results = [p.function_response for p in content.parts or [] if p.function_response]
        for fr in results:  # fenced: untrusted library text (fencing.py)
            messages.append({"role": "tool", "tool_call_id": fr.id or fr.name, "content": tool_result_text(fr)})
        if content.role == "model":
            if texts or calls:
                msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
                if calls:
                    msg["tool_calls"] = [
                        {"id": fc.id or fc.name, "type": "function",
                         "function": {"name": fc.name, "arguments": json.dumps(fc.args or {}, ensure_ascii=False)}}
                        for fc in calls
                    ]
                messages.append(msg)
        elif texts:
            messages.append({"role": "user", "content": "".join(texts)})
    return messages


class OpenAICompatLlm(BaseLlm):
    """A chat-completions endpoint. `model` is the endpoint's model id; the limits are
    config.ModelConfig's (`max_call_s` is its `max_turn_s`: no one call may outlast a turn)."""

    # Out of the model's repr (an agent's repr, a debug dump): the URL may hold a password.
    base_url: str = Field(repr=False)
    api_key: str | None = Field(None, repr=False)
    max_line_bytes: int = MODEL_MAX_LINE_BYTES
    max_answer_chars: int = MODEL_MAX_ANSWER_CHARS
    max_call_s: float = MODEL_MAX_TURN_S
    _client: httpx.AsyncClient | None = PrivateAttr(default=None)

    @classmethod
    def supported_models(cls) -> list[str]:
        return []

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=True)

    @property
    def endpoint(self) -> str:
        """base_url as it may be shown: in messages, logs and `error.data.endpoint`."""
        return redact_url(self.base_url)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            url, auth = split_credentials(self.base_url.rstrip("/"))
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                base_url=url,
                auth=auth,
                headers=headers,
                timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            )
        return self._client

    def _body(self, request: LlmRequest, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": to_messages(request), "stream": stream}
        tools = _tools(request)
        if tools:
            body["tools"] = tools
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def _error(self, message: str, **data: Any) -> ModelError:
        return ModelError(message, endpoint=self.endpoint, **data)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        body = self._body(llm_request, stream)
        client = self._http()
        deadline = anyio.current_time() + self.max_call_s
        for attempt in range(MAX_RETRIES_429 + 1):
            try:
                request = client.build_request("POST", "/chat/completions", json=body)
                resp = await _before(deadline, client.send(request, stream=True))
                try:
                    if resp.status_code == 429 and attempt < MAX_RETRIES_429:
                        wait = self._backoff(resp, attempt)
                        await resp.aclose()
                        await _before(deadline, anyio.sleep(wait))
                        continue
                    if resp.status_code >= 400:
                        raise self._error(await self._http_error(resp, deadline), status=resp.status_code)
                    if stream:
                        async with aclosing(self._read_stream(resp, deadline)) as responses:
                            async for r in responses:
                                yield r
                    else:
                        yield self._read_whole(await self._read_body(resp, deadline))
                    return
                finally:
                    await resp.aclose()
            except TimeoutError:
                raise self._error(
                    f"the model endpoint {self.endpoint} took longer than {self.max_call_s:g} s for one answer "
                    "(model.max_turn_s); stopped"
                ) from None
            except httpx.TimeoutException:
                raise self._error(f"the model endpoint {self.endpoint} did not answer in time") from None
            except httpx.TransportError as exc:
                reason = escape_for_log(redact_credentials(str(exc)), ERROR_DETAIL_CHARS)
                raise self._error(f"cannot reach the model endpoint {self.endpoint}: {reason}") from None
            except LineTooLong:
                raise self._error(
                    f"the model endpoint {self.endpoint} sent a line longer than {self.max_line_bytes} bytes "
                    "(model.max_line_bytes); stopped reading"
                ) from None
            except _TooBig as exc:
                raise self._error(
                    f"the model's answer passed {exc.limit} characters (model.max_answer_chars); stopped reading"
                ) from None
            except _Malformed as exc:
                raise self._error(f"the model endpoint {self.endpoint} answered something malformed: {exc.what}") from None

    @staticmethod
    def _backoff(resp: httpx.Response, attempt: int) -> float:
        try:
            retry_after = float(resp.headers.get("retry-after", ""))
        except ValueError:
            retry_after = BACKOFF_BASE_S * (2**attempt)
        if retry_after != retry_after:  # NaN
            retry_after = MAX_BACKOFF_S
        return min(max(retry_after, 0.0), MAX_BACKOFF_S)

    async def _chunks(self, resp: httpx.Response, deadline: float) -> AsyncGenerator[bytes, None]:
        """The body's bytes as they arrive; each wait ends at the call's deadline, so an endpoint
        that sends a comment every few seconds cannot keep the call alive past it."""
        it = resp.aiter_bytes()
        try:
            while True:
                try:
                    data = await _before(deadline, it.__anext__())
                except StopAsyncIteration:
                    return
                yield data
        finally:
            await it.aclose()  # type: ignore[attr-defined]  # httpx's iterators are async generators

    async def _read_upto(self, resp: httpx.Response, deadline: float, limit: int) -> tuple[bytes, bool]:
        """The body's first `limit` bytes, and whether there was more."""
        out = bytearray()
        async with aclosing(self._chunks(resp, deadline)) as chunks:
            async for data in chunks:
                out += data
                if len(out) > limit:
                    return bytes(out[:limit]), True
        return bytes(out), False

    async def _read_body(self, resp: httpx.Response, deadline: float) -> bytes:
        """The whole body (a non-streamed answer), refused past max_line_bytes."""
        body, more = await self._read_upto(resp, deadline, self.max_line_bytes)
        if more:
            raise LineTooLong(len(body))
        return body

    async def _http_error(self, resp: httpx.Response, deadline: float) -> str:
        raw = (await self._read_upto(resp, deadline, ERROR_BODY_BYTES))[0].decode("utf-8", "replace")
        detail: Any = raw
        parsed = _parse_json(raw)
        if isinstance(parsed, dict) and parsed.get("error"):
            err = parsed["error"]
            detail = err.get("message", err) if isinstance(err, dict) else err
        hint = {401: " (check the API key)", 403: " (check the API key's permissions)", 404: " (check model.name and model.base_url)",
                429: " (rate limited; try again later)"}.get(resp.status_code, "")
        text = escape_for_log(str(detail).strip(), ERROR_DETAIL_CHARS)
        return f"the model endpoint answered HTTP {resp.status_code}: {text}{hint}"

    def _read_whole(self, raw: bytes) -> LlmResponse:
        data = _parse_json(raw)
        if data is _NOT_JSON:
            raise self._error(f"the model endpoint {self.endpoint} answered something that is not JSON")
        answer = _Answer(self.max_answer_chars)
        data = _obj(data, "the answer")
        choices = _opt_list(data.get("choices"), "choices")
        if not choices:
            raise self._error("the model endpoint's answer has no choices[0].message")
        choice = _obj(choices[0], "choices[0]")
        msg = _obj(choice.get("message"), "choices[0].message")
        answer.finish = _opt_str(choice.get("finish_reason"), "choices[0].finish_reason") or None
        answer.usage = _usage(data.get("usage"))
        for key in ("content", "reasoning", "reasoning_content"):
            piece = _opt_str(msg.get(key), f"choices[0].message.{key}")
            answer.grow(piece)
            if key == "content":
                answer.text.append(piece)
            elif piece and not answer.thought:
                answer.thought.append(piece)
        tool_calls = _opt_list(msg.get("tool_calls"), "choices[0].message.tool_calls")
        if len(tool_calls) > MAX_TOOL_CALLS_PER_ANSWER:
            raise _Malformed(f"choices[0].message.tool_calls has {len(tool_calls)} calls, over {MAX_TOOL_CALLS_PER_ANSWER}")
        for i, c in enumerate(tool_calls):
            where = f"choices[0].message.tool_calls[{i}]"
            c = _obj(c, where)
            fn = _obj(c.get("function"), f"{where}.function")
            args = fn.get("arguments")
            # A few servers send the arguments as an object rather than as JSON text.
            args = json.dumps(args, ensure_ascii=False) if isinstance(args, dict) else _opt_str(args, f"{where}.function.arguments")
            slot = answer.call(i)
            slot["id"] = _opt_str(c.get("id"), f"{where}.id")
            slot["name"] = _opt_str(fn.get("name"), f"{where}.function.name")
            slot["arguments"] = args
            answer.grow(slot["id"] + slot["name"] + args)
        return _final(answer)

    async def _lines(self, resp: httpx.Response, deadline: float) -> AsyncGenerator[str, None]:
        lines = SseLines(self.max_line_bytes)
        async with aclosing(self._chunks(resp, deadline)) as chunks:
            async for data in chunks:
                for line in lines.feed(data):
                    yield line
        for line in lines.close():
            yield line

    async def _read_stream(self, resp: httpx.Response, deadline: float) -> AsyncGenerator[LlmResponse, None]:
        answer = _Answer(self.max_answer_chars)
        async with aclosing(self._lines(resp, deadline)) as lines:
            async for line in lines:
                if not line.startswith("data:"):
                    continue  # SSE comments (": keep-alive"), event names, blank lines
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                chunk = _parse_json(payload)
                if chunk is _NOT_JSON:
                    raise self._error(f"the model endpoint {self.endpoint} streamed a line that is not JSON")
                chunk = _obj(chunk, "a streamed chunk")
                if chunk.get("error"):
                    err = chunk["error"]
                    detail = err.get("message", err) if isinstance(err, dict) else err
                    raise self._error(f"the model failed mid-answer: {escape_for_log(str(detail), ERROR_DETAIL_CHARS)}")
                answer.usage = _usage(chunk.get("usage")) or answer.usage
                for n, choice in enumerate(_opt_list(chunk.get("choices"), "choices")):
                    for r in self._apply(answer, _obj(choice, f"choices[{n}]"), f"choices[{n}]"):
                        yield r
        yield _final(answer)

    @staticmethod
    def _apply(answer: _Answer, choice: dict[str, Any], where: str) -> list[LlmResponse]:
        """Add one choice's delta to the answer; the partial responses it makes."""
        out: list[LlmResponse] = []
        answer.finish = _opt_str(choice.get("finish_reason"), f"{where}.finish_reason") or answer.finish
        delta = _opt_obj(choice.get("delta"), f"{where}.delta")
        r = _opt_str(delta.get("reasoning"), f"{where}.delta.reasoning") or _opt_str(
            delta.get("reasoning_content"), f"{where}.delta.reasoning_content"
        )
        if r:
            answer.grow(r)
            answer.thought.append(r)
            out.append(LlmResponse(content=types.Content(role="model", parts=[types.Part(text=r, thought=True)]), partial=True))
        text = _opt_str(delta.get("content"), f"{where}.delta.content")
        if text:
            answer.grow(text)
            answer.text.append(text)
            out.append(LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]), partial=True))
        for k, tc in enumerate(_opt_list(delta.get("tool_calls"), f"{where}.delta.tool_calls")):
            at = f"{where}.delta.tool_calls[{k}]"
            tc = _obj(tc, at)
            slot = answer.call(_index(tc.get("index"), f"{at}.index"))
            fn = _opt_obj(tc.get("function"), f"{at}.function")
            call_id = _opt_str(tc.get("id"), f"{at}.id")
            name = _opt_str(fn.get("name"), f"{at}.function.name")
            args = _opt_str(fn.get("arguments"), f"{at}.function.arguments")
            answer.grow(call_id + name + args)
            slot["id"] = call_id or slot["id"]
            slot["name"] = name or slot["name"]
            slot["arguments"] += args
        return out


async def _before(deadline: float, aw: Awaitable[T]) -> T:
    """`await aw`, or TimeoutError at `deadline` (anyio's clock). The scope never spans a yield of
    the generators above, so it is entered and left in the task that runs them."""
    with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
        return await aw
