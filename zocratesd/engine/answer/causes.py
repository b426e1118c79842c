"""The facts behind "found nothing": gathered by `search_library` (engine/tools.py) with its result,
so the offline composer (and a real model) can say the real cause.

- the index's state and progress, from the retriever's `status()` (the library's
  `_zocrates/library/status`; the in-memory retriever reports its own);
- how many items the scope holds, from the retriever's `scope_size(scope)` when it has one, and
  for "papers" with nothing selected, from the scope itself;
- when nothing in the scope is evidence (evidence.py), how many passages of the whole library are:
  one more search per aspect, on that path only.
Duck-typed: `status()` and `scope_size()` are not part of the `Retriever` protocol (a model's own
retriever may lack them).
"""

from __future__ import annotations

import inspect
from typing import Any

from zocratesd.engine.answer.evidence import evidence_items, has_evidence
from zocratesd.engine.answer.question import parse_question
from zocratesd.library.retrieval import DEFAULT_TOP_K, Hit, PassageJson, Retriever, Scope

# The library-wide search behind "matches elsewhere" covers at most this many aspects: it runs only
# when the scoped search found nothing, and a count does not need every round again.
MAX_ELSEWHERE_ASPECTS = 3


async def search_facts(retriever: Retriever, scope: Scope, query: str, aspects: list[str],
                       passages: list[PassageJson]) -> dict[str, Any]:
    """The facts for a search of `query` in `scope` (its `aspects` as searched) that found `passages`.
    Takes the search's parts, not engine/research.py's `Research`: the answerer is what research
    uses (question.py), never the other way round."""
    facts: dict[str, Any] = {"scope": scope.mode}
    status = getattr(retriever, "status", None)
    st = status() if callable(status) else None
    if isinstance(st, dict):
        # The papers the status names too (its `kinds`), not the index's records (notes, files).
        kinds = st.get("kinds")
        kinds = kinds if isinstance(kinds, dict) else {}
        facts.update(state=st.get("state"), percent=st.get("percent"), items=kinds.get("items", st.get("items_indexed")),
                     message=st.get("message"))
    if scope.mode == "papers" and not scope.item_keys:
        facts["scope_items"] = 0
    elif scope.mode != "library":
        size = getattr(retriever, "scope_size", None)
        if callable(size):
            n = size(scope)
            facts["scope_items"] = await n if inspect.isawaitable(n) else n
    if scope.mode != "library" and facts.get("scope_items") != 0:
        q = parse_question(query)
        if not has_evidence(q.parts, passages):
            hits: list[Hit] = []
            for aspect in (aspects or [query])[:MAX_ELSEWHERE_ASPECTS]:
                hits += await retriever.search(aspect, Scope(), DEFAULT_TOP_K)
            found = [h.as_json() for h in hits]
            keys = evidence_items(q.parts, found)
            facts["elsewhere_items"] = len(keys)
            facts["elsewhere"] = sum(1 for h in found if h["item_key"] in keys)
    return facts
