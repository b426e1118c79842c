"""`openai`: any OpenAI-compatible chat-completions endpoint (OpenRouter, Ollama, LM Studio,
llama.cpp, vLLM), streaming and tool calls, over httpx.

The ADK request becomes `POST {base_url}/chat/completions`: the system instruction, the
conversation (text, the model's tool calls, tool results as `role: tool`), and the tools'
JSON Schemas. A streamed answer arrives as SSE `data:` lines of deltas: text deltas become partial
responses, `reasoning`/`reasoning_content` deltas (OpenRouter, DeepSeek, llama.cpp) become
thoughts, tool-call deltas are assembled by index. Failures are `ModelError`s with a message that
says what went wrong and what to check: an HTTP 429 is retried with bounded backoff (honouring
`Retry-After`) as long as nothing has been streamed yet; anything else fails the turn at once.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import httpx
from google.adk.models._capabilities import LlmCapabilities
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types
from pydantic import PrivateAttr

from zocratesd.errors import ZocratesError

# Connecting should be quick even to a remote endpoint; a local model may think for minutes
# before its first token, and a streamed answer may pause between tokens, so reads get long.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0
# 429s: a free OpenRouter model answers them routinely; a few retries with growing waits ride
# out a burst, and the cap keeps a turn from hanging on a daily quota.
MAX_RETRIES_429 = 3
BACKOFF_BASE_S = 1.0
MAX_BACKOFF_S = 20.0


class ModelError(ZocratesError):
    kind = "model_error"


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
        for fr in results:
            messages.append({"role": "tool", "tool_call_id": fr.id or fr.name, "content": json.dumps(fr.response or {}, ensure_ascii=False)})
        if content.role == "model":
            if texts or calls:
                msg: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
                if calls:
                    msg["tool_calls"] = [
                        {"id": fc.id or fc.name, "type": "function", "function": {"name": fc.name, "arguments": json.dumps(fc.args or {}, ensure_ascii=False)}}
                        for fc in calls
                    ]
                messages.append(msg)
        elif texts:
            messages.append({"role": "user", "content": "".join(texts)})
    return messages


def _usage(raw: dict[str, Any] | None) -> types.GenerateContentResponseUsageMetadata | None:
    if not raw:
        return None
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=raw.get("prompt_tokens"),
        candidates_token_count=raw.get("completion_tokens"),
        total_token_count=raw.get("total_tokens"),
    )


def _final(text: str, thought: str, calls: dict[int, dict[str, str]], usage: Any, finish: str | None) -> LlmResponse:
    parts: list[types.Part] = []
    if thought:
        parts.append(types.Part(text=thought, thought=True))
    if text:
        parts.append(types.Part(text=text))
    for _, call in sorted(calls.items()):
        try:
            args = json.loads(call["arguments"] or "{}")
        except json.JSONDecodeError as exc:
            raise ModelError(f"the model sent tool arguments that are not JSON: {exc.msg}", tool=call["name"]) from None
        parts.append(types.Part(function_call=types.FunctionCall(id=call["id"] or None, name=call["name"], args=args)))
    if not parts:
        raise ModelError("the model answered with nothing (no text, no tool call)")
    return LlmResponse(
        content=types.Content(role="model", parts=parts),
        partial=False,
        turn_complete=True,
        finish_reason=types.FinishReason.MAX_TOKENS if finish == "length" else types.FinishReason.STOP,
        usage_metadata=usage,
    )


class OpenAICompatLlm(BaseLlm):
    """A chat-completions endpoint. `model` is the endpoint's model id."""

    base_url: str
    api_key: str | None = None
    _client: httpx.AsyncClient | None = PrivateAttr(default=None)

    @classmethod
    def supported_models(cls) -> list[str]:
        return []

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=True)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.AsyncClient(
                base_url=self.base_url.rstrip("/"),
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

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        body = self._body(llm_request, stream)
        for attempt in range(MAX_RETRIES_429 + 1):
            try:
                async with self._http().stream("POST", "/chat/completions", json=body) as resp:
                    if resp.status_code == 429 and attempt < MAX_RETRIES_429:
                        await resp.aread()
                        await anyio.sleep(self._backoff(resp, attempt))
                        continue
                    if resp.status_code >= 400:
                        raise ModelError(await self._http_error(resp), status=resp.status_code, endpoint=self.base_url)
                    if stream:
                        async for r in self._read_stream(resp):
                            yield r
                    else:
                        yield self._read_whole(json.loads(await resp.aread()))
                    return
            except httpx.TimeoutException:
                raise ModelError(f"the model endpoint {self.base_url} did not answer in time", endpoint=self.base_url) from None
            except httpx.TransportError as exc:
                raise ModelError(f"cannot reach the model endpoint {self.base_url}: {exc}", endpoint=self.base_url) from None
            except json.JSONDecodeError:
                raise ModelError(f"the model endpoint {self.base_url} answered something that is not JSON", endpoint=self.base_url) from None

    @staticmethod
    def _backoff(resp: httpx.Response, attempt: int) -> float:
        try:
            retry_after = float(resp.headers.get("retry-after", ""))
        except ValueError:
            retry_after = BACKOFF_BASE_S * (2**attempt)
        return min(max(retry_after, 0.0), MAX_BACKOFF_S)

    async def _http_error(self, resp: httpx.Response) -> str:
        raw = (await resp.aread())[:2000].decode("utf-8", "replace")
        detail = raw
        try:
            err = json.loads(raw).get("error")
            detail = err.get("message", raw) if isinstance(err, dict) else str(err or raw)
        except (ValueError, AttributeError):
            pass
        hint = {401: " (check the API key)", 403: " (check the API key's permissions)", 404: " (check model.name and model.base_url)",
                429: " (rate limited; try again later)"}.get(resp.status_code, "")
        return f"the model endpoint answered HTTP {resp.status_code}: {detail.strip()[:300]}{hint}"

    def _read_whole(self, data: dict[str, Any]) -> LlmResponse:
        try:
            choice = data["choices"][0]
            msg = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise ModelError("the model endpoint's answer has no choices[0].message") from None
        calls = {
            i: {"id": c.get("id") or "", "name": c["function"]["name"], "arguments": c["function"].get("arguments") or ""}
            for i, c in enumerate(msg.get("tool_calls") or [])
        }
        thought = msg.get("reasoning") or msg.get("reasoning_content") or ""
        return _final(msg.get("content") or "", thought, calls, _usage(data.get("usage")), choice.get("finish_reason"))

    async def _read_stream(self, resp: httpx.Response) -> AsyncGenerator[LlmResponse, None]:
        text: list[str] = []
        thought: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        usage = None
        finish = None
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue  # SSE comments (": keep-alive"), event names, blank lines
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            try:
                chunk = json.loads(payload)
            except json.JSONDecodeError:
                raise ModelError("the model endpoint streamed a line that is not JSON") from None
            if chunk.get("error"):
                err = chunk["error"]
                raise ModelError(f"the model failed mid-answer: {err.get('message', err) if isinstance(err, dict) else err}")
            usage = _usage(chunk.get("usage")) or usage
            for choice in chunk.get("choices") or []:
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta") or {}
                r = delta.get("reasoning") or delta.get("reasoning_content")
                if r:
                    thought.append(r)
                    yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=r, thought=True)]), partial=True)
                if delta.get("content"):
                    text.append(delta["content"])
                    yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=delta["content"])]), partial=True)
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(int(tc.get("index", 0)), {"id": "", "name": "", "arguments": ""})
                    slot["id"] = tc.get("id") or slot["id"]
                    fn = tc.get("function") or {}
                    slot["name"] = fn.get("name") or slot["name"]
                    slot["arguments"] += fn.get("arguments") or ""
        yield _final("".join(text), "".join(thought), calls, usage, finish)
