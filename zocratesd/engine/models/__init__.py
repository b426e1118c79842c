"""The model the agent runs on, chosen by `model.provider` (config.ModelConfig checks it at load)."""

from __future__ import annotations

import os

from google.adk.models.base_llm import BaseLlm

from zocratesd.config import ModelConfig
from zocratesd.engine.models.offline import OfflineLlm

DEFAULT_GEMINI_MODEL = "gemini-2.5-flash"


def build_model(cfg: ModelConfig) -> BaseLlm:
    if cfg.provider == "openai":
        from zocratesd.engine.models.openai import OpenAICompatLlm

        assert cfg.base_url and cfg.name  # ModelConfig's validator guarantees both
        return OpenAICompatLlm(
            model=cfg.name, base_url=cfg.base_url, api_key=cfg.api_key(),
            max_line_bytes=cfg.max_line_bytes, max_answer_chars=cfg.max_answer_chars, max_call_s=cfg.max_turn_s,
        )
    if cfg.provider == "gemini":
        from google.adk.models.google_llm import Gemini

        key = cfg.api_key()
        if key:  # ADK's Gemini client reads the key from the environment
            os.environ.setdefault("GOOGLE_API_KEY", key)
        return Gemini(model=cfg.name or DEFAULT_GEMINI_MODEL)
    return OfflineLlm()
