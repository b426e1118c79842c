"""`search_library`: the coordinator's one tool, and where its evidence is recorded.

Isolation choice (issue 3, research/adk.md section 5): the tool is an async-generator FunctionTool,
which ADK 2.13 runs as a FunctionNode on the tool's own branch `search_library@<call id>`. Whatever
the pipeline emits there (progress, raw retrieval, and later its checkpoints) stays off the
coordinator's prompt: the coordinator sees only the call and its result. We chose this over the
spec's isolation scope because a scope must be closed by hand with a `finish_task` response on
every exit path, or the next user message is swallowed (adk.md `s06_iso`), and `isolation_scope` is
documented as internal to ADK; a branch closes itself. The UI hides branch events too (store/ui.py).
"""

from __future__ import annotations

from typing import Any

from google.adk.tools import FunctionTool, ToolContext

from zocratesd.engine.retrieval import DEFAULT_TOP_K, Hit, Passage, Retriever, Scope

TOOL_NAME = "search_library"
# spec 2.3: retrieved_evidence keeps the last 5 turns' queries, chunks and citations.
MAX_AUDIT_HISTORY_TURNS = 5
# What the audit trail keeps of each chunk's text: enough to recognise it, small in the state.
EVIDENCE_TEXT_CHARS = 300


def scope_from_state(state: Any) -> Scope:
    items = state.get("active_context_items") or []
    return Scope(
        mode=state.get("active_mode") or "library",
        item_keys=tuple(i.get("item_key") for i in items if isinstance(i, dict)),
        collection=state.get("active_collection"),
    )


def _snippet_passages(state: Any) -> list[Passage]:
    out = []
    for s in state.get("snippets") or []:
        if isinstance(s, dict) and s.get("kind", "text") == "text" and s.get("text"):
            out.append(
                Passage(
                    item_key=s["item_key"], title=s.get("title") or s["item_key"], text=s["text"],
                    page=s.get("page"), attachment_key=s.get("key"),
                )
            )
    return out


def _numbered(passages: list[tuple[Passage, float | None]]) -> list[dict[str, Any]]:
    out = []
    for n, (p, score) in enumerate(passages, start=1):
        out.append(
            {
                "n": n,
                "item_key": p.item_key,
                "attachment_key": p.attachment_key,
                "title": p.title,
                "creators": list(p.creators),
                "year": p.year,
                "page": p.page,
                "citation": p.citation(),
                "text": p.text,
                "score": None if score is None else round(score, 4),
                "focal": score is None,
            }
        )
    return out


def record_evidence(state: Any, invocation_id: str, query: str, passages: list[dict[str, Any]]) -> None:
    """Append this search to `retrieved_evidence`, keeping the last MAX_AUDIT_HISTORY_TURNS turns."""
    trail = [e for e in (state.get("retrieved_evidence") or []) if isinstance(e, dict)]
    if trail and trail[-1].get("invocation_id") == invocation_id:
        entry = trail[-1]
    else:
        entry = {"invocation_id": invocation_id, "queries": [], "chunks": [], "citations": []}
        trail.append(entry)
    entry["queries"].append(query)
    for p in passages:
        entry["chunks"].append({k: p[k] for k in ("item_key", "attachment_key", "title", "page", "score")} | {"text": p["text"][:EVIDENCE_TEXT_CHARS]})
        if p["item_key"] not in entry["citations"]:
            entry["citations"].append(p["item_key"])
    state["retrieved_evidence"] = trail[-MAX_AUDIT_HISTORY_TURNS:]


def build_search_tool(retriever: Retriever, top_k: int = DEFAULT_TOP_K) -> FunctionTool:
    # No return annotation: ADK derives the tool's response schema from it, and cannot for an
    # async generator (it logs a traceback on every turn).
    async def search_library(query: str, tool_context: ToolContext):  # type: ignore[no-untyped-def]
        """Search the user's Zotero library within the active scope (the selected papers, a
        collection, or the whole library) and return the most relevant passages, numbered, each
        with its citation. Cite passages by their number, like [1]."""
        state = tool_context.state
        scope = scope_from_state(state)
        focal = _snippet_passages(state)
        hits: list[Hit] = await retriever.search(query, scope, top_k) if query.strip() else []
        seen = {(p.item_key, p.page, p.text) for p in focal}
        ranked: list[tuple[Passage, float | None]] = [(p, None) for p in focal]
        ranked += [(h.passage, h.score) for h in hits if (h.passage.item_key, h.passage.page, h.passage.text) not in seen]
        passages = _numbered(ranked)
        record_evidence(state, tool_context.invocation_id, query, passages)
        yield {"query": query, "scope": scope.mode, "passages": passages}

    return FunctionTool(search_library)
