"""`offline`: the default model. Deterministic, extractive, no key, no network.

It behaves like a small research assistant that only quotes:
- a new question -> a short plan (a thought) and a `search_library` call with the question;
- the search's result -> an answer composed by engine/answer/: quotes of the passages
  that answer each part of the question, with their numbers [n], then `# Cited Sources` listing
  each cited item once; or, when nothing answers, the real reason (no library, still indexing,
  an empty scope, matches elsewhere in the library, or no match).
- a follow-up the search completed with the previous turn's topic (engine/followup.py): the
  answer is to the completed question, and says how it read the follow-up;
- a research turn answered before every part was searched ("answer now" at a checkpoint, or the
  extensions' cap): the answer covers the parts searched, and opens by saying which parts it
  answers, which were searched without an answer, and which were not searched yet (never "not
  answered" for those: nothing looked for them).
Same input, same output: tests and benchmarks can rely on every word.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

from zocratesd.adkcompat import LlmCapabilities
from zocratesd.engine.answer import compose_answer
from zocratesd.engine.answer.compose import scope_words
from zocratesd.engine.answer.sources import CITED_HEADER
from zocratesd.engine.research import ONLINE_NOT_ALLOWED
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


def _quoted(parts: list[str]) -> str:
    return "; ".join(f"“{p}”" for p in parts)


def _answered_parts(body: str, searched: list[str]) -> set[str]:
    """The searched parts that `body` (compose_answer's answer to them) answers: the ones whose
    section quotes something, or points at a quote above."""
    if CITED_HEADER not in body:
        return set()
    if len(searched) == 1:
        return set(searched)
    answered: set[str] = set()
    heading: str | None = None
    for line in body.splitlines():
        if line.startswith("#"):
            heading = line[3:].strip() if line.startswith("## ") else None
        elif heading and line.startswith("- "):
            # A part may be answered as its listed topics (question.py `topic_list`): each its own heading.
            answered.update(p for p in searched if heading.casefold() in p.casefold())
    return answered


# Said at an answer's end when the library left a part unanswered and online search was possible
# but nobody could be asked (online.mode ask, in a face that cannot ask mid-turn).
ONLINE_TIP = ("Beyond your library: I can search OpenAlex, arXiv and Crossref for what it leaves unanswered (only the "
              "search terms leave this machine) when you allow it, for one question (zocrates ask --online, or the "
              "MCP ask tool's online argument) or always (online.mode = on in the settings).")


def _online_lines(result: Mapping[str, Any]) -> str:
    """What the answer says first of the search beyond the library: what was searched online
    (its sources are marked in the list), or why nothing was found there."""
    research = result.get("research")
    if not isinstance(research, dict) or research.get("online_note") == ONLINE_NOT_ALLOWED:
        return ""
    online = [str(a) for a in research.get("online_aspects") or []]
    note = research.get("online_note")
    said = ""
    if online:
        said = f"Your library leaves {_quoted(online)} unanswered, so I searched online (OpenAlex, arXiv, Crossref) too."
    if isinstance(note, str) and note:
        said = f"{said} {note[0].upper()}{note[1:]}." if said else f"{note[0].upper()}{note[1:]}."
    return said + "\n\n" if said else ""


def answer_research(question: str, result: dict[str, Any]) -> str:
    """The answer to a search result: a follow-up answered as the search completed it, saying so;
    which parts were searched when research stopped before all of them (see the module docstring);
    and what was searched beyond the library."""
    research = result.get("research")
    tip = isinstance(research, dict) and research.get("online_note") == ONLINE_NOT_ALLOWED
    return _online_lines(result) + _answer_research(question, result) + (f"\n\n{ONLINE_TIP}" if tip else "")


def _answer_research(question: str, result: dict[str, Any]) -> str:
    follow = result.get("followup")
    if isinstance(follow, dict) and isinstance(follow.get("question"), str) and follow["question"]:
        left = len(follow.get("unsearched") or [])
        said = (f"Searching the {left} part{'s' if left != 1 else ''} of your earlier question I had not searched yet."
                if follow.get("rest") else f"As a follow-up on “{follow.get('topic') or ''}”, I searched for: {follow['question']}.")
        return said + "\n\n" + _answer_parts(follow["question"], result)
    return _answer_parts(question, result)


def _answer_parts(question: str, result: dict[str, Any]) -> str:
    research = result.get("research") if isinstance(result.get("research"), dict) else None
    left = [str(a) for a in (research or {}).get("unaddressed_aspects") or []]
    added = [str(a) for a in (research or {}).get("added_aspects") or []]
    if research is None or not (left or added):
        return compose_answer(question, result)
    searched = [str(a) for a in research.get("searched_aspects") or [] if a not in left]
    # Only the parts searched are answered: the others are reported as not searched, below.
    body = compose_answer("; ".join(searched), {**result, "research": {**research, "unaddressed_aspects": []}})
    answered = _answered_parts(body, searched) if searched else set()
    asked = len(searched) + len(left) - len(added)
    where = scope_words(result)
    head = f"Your question has {asked} part{'s' if asked != 1 else ''}"
    if added:
        head += f", and your guidance added {_quoted(added)} as {'a new part' if len(added) == 1 else 'new parts'}"
    if left:
        why = "the research reached its limit of extensions" if research.get("capped") else "you asked for the answer"
        head += f". I had searched {len(searched)} of {len(searched) + len(left)} when {why}"
    lines = [head + ".", ""]
    if answered:
        lines.append(f"- Answered: {_quoted([p for p in searched if p in answered])}.")
    if unanswered := [p for p in searched if p not in answered]:
        lines.append(f"- Searched, but nothing in {where} answers: {_quoted(unanswered)}.")
    if left:
        lines.append(f"- Not searched yet: {_quoted(left)}. Say “search the rest” and I will search {where} "
                     f"for {'it' if len(left) == 1 else 'them'}.")
    first, _, rest = body.partition("\n")
    # compose_answer's own opening counts only the parts searched: ours above replaces it.
    if len(searched) > 1 and first.startswith("Your question has "):
        body = rest.lstrip("\n")
    return "\n".join(lines) + "\n\n" + body


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
                return [types.Part(text=answer_research(_latest_question(request), dict(fr.response or {})))]
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
