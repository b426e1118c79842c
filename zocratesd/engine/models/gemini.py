"""ADK's Gemini, sent tool results fenced as untrusted library text (fencing.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from google.adk.models.google_llm import Gemini
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse

from zocratesd.engine.models.fencing import fenced_request


class FencedGemini(Gemini):
    """ADK's Gemini; each request's function responses go fenced (`fenced_request`)."""

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        async for response in super().generate_content_async(fenced_request(llm_request), stream):
            yield response
