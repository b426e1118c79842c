"""Tool results as a real model reads them: fenced as untrusted library text (zocratesd/untrusted.py).

The search tool's result holds passages anyone could have written (a paper's author, any member
of a group library). The session keeps it as found, and the offline answerer (our own code, not a
model that can be talked into anything) quotes it verbatim; each adapter of a real model sends it
inside a fence instead: the chat-completions adapter as the tool message's text (openai.py), the
Gemini one as the response's one string (gemini.py).
"""

from __future__ import annotations

import json

from google.adk.models.llm_request import LlmRequest
from google.genai import types

from zocratesd.untrusted import fence

# The key of the fenced text in a function response sent as a dict (Gemini's convention: "output"
# for a result, "error" for a failure).
RESULT_KEY = "output"


def tool_result_text(fr: types.FunctionResponse) -> str:
    """A tool's result as the text a model reads: its JSON, fenced."""
    return fence(json.dumps(fr.response or {}, ensure_ascii=False), f"the result of the tool {fr.name}, "
                 "quoted from the user's Zotero library")


def fenced_request(request: LlmRequest) -> LlmRequest:
    """A copy of `request` in which each function response is `{RESULT_KEY: tool_result_text}`;
    `request` (whose contents are the session's events) is left as it was."""
    contents = []
    for content in request.contents:
        parts = content.parts or []
        if not any(p.function_response for p in parts):
            contents.append(content)
            continue
        fenced = [
            p.model_copy(update={"function_response": types.FunctionResponse(
                id=p.function_response.id, name=p.function_response.name,
                response={RESULT_KEY: tool_result_text(p.function_response)},
            )}) if p.function_response else p
            for p in parts
        ]
        contents.append(content.model_copy(update={"parts": fenced}))
    return request.model_copy(update={"contents": contents})

