"""`offline`: the default model. Deterministic, extractive, no key, no network.

It behaves like a small research assistant that only quotes:
- a new question -> a short plan (a thought) and a `search_library` call with the question;
- the search's result -> an answer composed by engine/answer/: quotes of the passages
  that answer each part of the question, with their numbers [n], then `# Cited Sources` listing
  each cited item once; or, when nothing answers, the real reason (no library, still indexing,
  an empty scope, matches elsewhere in the library, or no match).
Same input, same output: tests and benchmarks can rely on every word.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from zocratesd.adkcompat import LlmCapabilities
from zocratesd.engine.answer import compose_answer
from zocratesd.limits import MAX_QUERY_CHARS

SEARCH_TOOL = "search_library"
# Streamed text arrives a paragraph at a time (a markdown block with the blank lines after it), so a
# client that renders markdown as it arrives never shows half a heading, list item or citation.
# A paragraph longer than this many words is sent a few whole lines at a time, and a line longer
# than that is cut between words. The whole answer exists before the first chunk, so smaller chunks
# would show nothing sooner: each one only costs the turn another event through ADK and another
# session/update (~0.4 M instructions each, bench/PROFILE.md section 9).
STREAM_MAX_WORDS = 24
# A rough, documented token estimate where no tokenizer exists: ~4 characters per token (English).
CHARS_PER_TOKEN = 4

__all__ = ["CHARS_PER_TOKEN", "SEARCH_TOOL", "OfflineLlm", "compose_answer", "estimate_tokens", "stream_pieces"]


def estimate_tokens(text: str) -> int:
    return _tokens_for(len(text))


def _tokens_for(chars: int) -> int:
    return max(1, chars // CHARS_PER_TOKEN) if chars else 0


def stream_pieces(text: str) -> list[str]:
    """`text` cut into the chunks it is streamed in (see STREAM_MAX_WORDS); they join back to `text`."""
    blocks: list[list[str]] = []  # paragraphs as lists of lines; blank lines end the one before them
    has_text = ended = False
    for line in text.splitlines(keepends=True):
        blank = not line.strip()
        if blocks and (blank or not ended):
            blocks[-1].append(line)
        else:
            blocks.append([line])
            has_text = False
        has_text = has_text or not blank
        ended = blank and has_text
    pieces: list[str] = []
    for block in blocks:
        piece, words = "", 0
        for line in block:
            n = len(line.split())
            if piece and words + n > STREAM_MAX_WORDS:
                pieces.append(piece)
                piece, words = "", 0
            if n <= STREAM_MAX_WORDS:
                piece, words = piece + line, words + n
                continue
            cut = line.split(" ")  # a line longer than a chunk: between words (`piece` is empty here)
            for i in range(0, len(cut) - STREAM_MAX_WORDS, STREAM_MAX_WORDS):
                pieces.append(" ".join(cut[i : i + STREAM_MAX_WORDS]) + " ")
            piece = " ".join(cut[(len(cut) - 1) // STREAM_MAX_WORDS * STREAM_MAX_WORDS :])
            words = len(piece.split())
        if piece:
            pieces.append(piece)
    return pieces


def _text_of(content: types.Content | None) -> str:
    return "".join(p.text or "" for p in (content.parts or []) if not p.thought) if content else ""


def _latest_question(request: LlmRequest) -> str:
    for content in reversed(request.contents):
        if content.role == "user":
            text = _text_of(content).strip()
            if text:
                return text
    return ""


class OfflineLlm(BaseLlm):
    """The offline model (see the module docstring)."""

    model: str = "offline"

    @classmethod
    def supported_models(cls) -> list[str]:
        return ["offline"]

    @property
    def capabilities(self) -> LlmCapabilities:
        return LlmCapabilities(output_schema_and_tools=True)

    def _respond(self, request: LlmRequest) -> list[types.Part]:
        last = request.contents[-1] if request.contents else None
        for part in (last.parts or []) if last else []:
            fr = part.function_response
            if fr is not None and fr.name == SEARCH_TOOL:
                return [types.Part(text=compose_answer(_latest_question(request), dict(fr.response or {})))]
        question = _latest_question(request)
        if SEARCH_TOOL in (request.tools_dict or {}) and question:
            query = " ".join(question.split())[:MAX_QUERY_CHARS]
            return [
                types.Part(text="Plan: search your library for this question, then answer from the passages found.", thought=True),
                types.Part(function_call=types.FunctionCall(name=SEARCH_TOOL, args={"query": query})),
            ]
        return [types.Part(text="Ask me a question about your papers and I will search your library.")]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        parts = self._respond(llm_request)
        prompt_chars = sum(len(_text_of(c)) for c in llm_request.contents)
        answer = "".join(p.text or "" for p in parts if not p.thought)
        usage = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=_tokens_for(prompt_chars),
            candidates_token_count=estimate_tokens(answer),
            total_token_count=_tokens_for(prompt_chars) + estimate_tokens(answer),
        )
        if stream:
            for part in parts:
                if not part.text:
                    continue
                for chunk in stream_pieces(part.text):
                    yield LlmResponse(
                        content=types.Content(role="model", parts=[types.Part(text=chunk, thought=part.thought)]),
                        partial=True,
                    )
        yield LlmResponse(
            content=types.Content(role="model", parts=parts),
            partial=False,
            turn_complete=True,
            finish_reason=types.FinishReason.STOP,
            usage_metadata=usage,
        )
