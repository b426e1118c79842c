"""The model the agent runs on, chosen by `model.provider` (config.ModelConfig checks it at load)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from zocratesd import deferred
from zocratesd.config import DEFAULT_GEMINI_MODEL, ModelConfig

if TYPE_CHECKING:  # ADK is loaded with the engine (engine/__init__.py says why)
    from google.adk.models.base_llm import BaseLlm

OFFLINE = "offline"
# Each provider's model class, by module: the core names this package before ADK is loaded.
PROVIDER_MODULES: Final = {
    "openai": "zocratesd.engine.models.openai", "gemini": "zocratesd.engine.models.gemini",
    OFFLINE: "zocratesd.engine.models.offline",
}


def model_id(cfg: ModelConfig) -> str:
    """How a session names the configured model in its `model` setting: `offline`, or
    `provider:name` (`openai:meta-llama/llama-3.3-70b-instruct:free`, `gemini:gemini-2.5-flash`)."""
    if cfg.provider == "openai":
        return f"openai:{cfg.name}"
    if cfg.provider == "gemini":
        return f"gemini:{cfg.name or DEFAULT_GEMINI_MODEL}"
    return OFFLINE


def model_choices(cfg: ModelConfig) -> dict[str, str]:
    """The models a session may run on, id -> label: the configured one first (the default),
    and the offline model always (it needs no key and no network)."""
    choices = {model_id(cfg): f"{cfg.provider} ({cfg.name or DEFAULT_GEMINI_MODEL})"} if cfg.provider != "offline" else {}
    choices[OFFLINE] = "offline (extractive, no network)"
    return choices


def build_model(cfg: ModelConfig) -> BaseLlm:
    module = deferred.load(PROVIDER_MODULES.get(cfg.provider, PROVIDER_MODULES[OFFLINE]))
    if cfg.provider == "openai":
        assert cfg.base_url and cfg.name  # ModelConfig's validator guarantees both
        llm: BaseLlm = module.OpenAICompatLlm(
            model=cfg.name, base_url=cfg.base_url, api_key=cfg.api_key(),
            max_line_bytes=cfg.max_line_bytes, max_answer_chars=cfg.max_answer_chars, max_call_s=cfg.max_turn_s,
        )
    elif cfg.provider == "gemini":
        key = cfg.api_key()
        if key:  # ADK's Gemini client reads the key from the environment
            os.environ.setdefault("GOOGLE_API_KEY", key)
        llm = module.FencedGemini(model=cfg.name or DEFAULT_GEMINI_MODEL)
    else:
        llm = module.OfflineLlm()
    return llm
