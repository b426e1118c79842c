"""The coordinator: the one LlmAgent every turn runs, in chat mode (it sees the whole conversation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.readonly_context import ReadonlyContext
from google.adk.models.base_llm import BaseLlm
from google.adk.tools.base_tool import BaseTool
from pydantic import PrivateAttr

from zocratesd.config import ResearchConfig
from zocratesd.engine import SESSION_CONFIG_KEY
from zocratesd.engine.online_tool import OnlineLookup
from zocratesd.engine.tools import build_search_tool
from zocratesd.library.retrieval import Retriever
from zocratesd.untrusted import RULE, fence

COORDINATOR = "coordinator"

BASE_INSTRUCTION = """You are Zocrates, a research assistant for a researcher who keeps their papers in Zotero.
Answer from their library: call search_library before answering a question about papers, and ground
every claim in the passages it returns, citing them by number like [1]. End an answer that cites
anything with a "# Cited Sources" list. If the library has nothing on the question, say so plainly;
never invent a source. A follow-up ("and what about X?") is about the conversation's topic: write
its search query with that topic's names and terms, not the follow-up's words alone.

""" + RULE


# How the session asks answers to cite (its `citation_style`; "numbered" is BASE_INSTRUCTION's).
CITATION_INSTRUCTIONS = {
    "author-year": "Cite in the text by author and year instead of numbers: (Lewis et al., 2020), with the page when "
                   "the passage has one: (Lewis et al., 2020, p. 4). Keep the numbered \"# Cited Sources\" list.",
    "pandoc": "Cite in the text with Pandoc citations instead of numbers: [@KEY], KEY being the passage's citation_key, "
              "with the page when the passage has one: [@KEY, p. 4]. Keep the numbered \"# Cited Sources\" list.",
}


def coordinator_instruction(ctx: ReadonlyContext) -> str:
    """The instruction with this turn's Zotero context (spec 2.3 `active_context_items_str` and
    `focal_snippets_str`). A provider function, not a `{key}` template: a missing key must not fail
    a turn, and snippet text must never be read as template syntax."""
    state = ctx.state
    parts = [BASE_INSTRUCTION]
    style = (state.get(SESSION_CONFIG_KEY) or {}).get("citation_style")
    if style in CITATION_INSTRUCTIONS:
        parts.append(CITATION_INSTRUCTIONS[style])
    header = state.get("active_context_items_str")
    if header:  # the selected items' titles are library text
        parts.append(fence(str(header), "the scope of this turn and the titles of the items the user selected"))
    snippets = state.get("focal_snippets_str")
    if snippets:
        parts.append("# Focal snippets the user pointed at\n" + fence(str(snippets), "the passages the user pointed at, "
                                                                        "quoted from their Zotero library"))
    return "\n\n".join(parts)


class Coordinator(LlmAgent):
    """The LlmAgent, running each turn on the model its session chose (the `model` setting, an id
    of `models`); `model` (the configured one) when the session chose none or one no longer offered."""

    _models: dict[str, BaseLlm] = PrivateAttr(default_factory=dict)

    async def canonical_model_async(self, ctx: ReadonlyContext) -> BaseLlm:
        chosen: Any = (ctx.state.get(SESSION_CONFIG_KEY) or {}).get("model")
        model = self._models.get(chosen) if isinstance(chosen, str) else None
        return model if model is not None else await super().canonical_model_async(ctx)


def build_coordinator(
    model: BaseLlm, retriever: Retriever, research: ResearchConfig | None = None,
    models: dict[str, BaseLlm] | None = None, more_tools: Sequence[BaseTool] = (), online: OnlineLookup | None = None,
) -> LlmAgent:
    agent = Coordinator(
        name=COORDINATOR,
        model=model,
        mode="chat",
        instruction=coordinator_instruction,
        tools=[build_search_tool(retriever, research, online=online), *more_tools],
    )
    agent._models = dict(models or {})
    return agent
