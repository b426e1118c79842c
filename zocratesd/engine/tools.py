"""`search_library`: the coordinator's one tool, and where its evidence is recorded.

Isolation choice (research/adk.md section 5): the tool is an async-generator FunctionTool,
which ADK 2.13 runs as a FunctionNode on the tool's own branch `search_library@<call id>`. Whatever
the pipeline emits there (its rounds and its checkpoints, engine/research.py) stays off the
coordinator's prompt: the coordinator sees only the call and its result. We chose this over the
spec's isolation scope because a scope must be closed by hand with a `finish_task` response on
every exit path, or the next user message is swallowed (adk.md `s06_iso`), and `isolation_scope` is
documented as internal to ADK; a branch closes itself. The UI hides branch events too (store/ui.py).
"""

from __future__ import annotations

from typing import Any

from google.adk.events import Event, RequestInput
from google.adk.tools import FunctionTool, ToolContext
from google.genai import types

from zocratesd.config import ResearchConfig
from zocratesd.engine.answer.causes import search_facts
from zocratesd.engine.answer.question import terms_of, word_stems
from zocratesd.engine.followup import previous_turn, resolve, topic_of
from zocratesd.engine.online_tool import OnlineLookup, online_passages
from zocratesd.engine.research import ONLINE_NOT_ALLOWED, SNAPSHOT_KEY, Research, Round
from zocratesd.errors import ZocratesError
from zocratesd.library.retrieval import DEFAULT_TOP_K, Hit, Passage, PassageJson, Retriever, Scope
from zocratesd.limits import CITATION_STYLES
from zocratesd.untrusted import NOTE, UNTRUSTED_KEY

TOOL_NAME = "search_library"
# spec 2.3: retrieved_evidence keeps the last 5 turns' queries, chunks and citations.
MAX_AUDIT_HISTORY_TURNS = 5
# What the audit trail keeps of each chunk's text: enough to recognise it, small in the state.
EVIDENCE_TEXT_CHARS = 300
# Where a round's progress event keeps its facts (aspect, hits), for clients and tests.
ROUND_METADATA_KEY = "zocrates_round"
# Works one online round brings into the answer for one part of the question.
ONLINE_WORKS_PER_PART = 5
# What an online round sends: a part's words, cut to this many characters (the terms, not a text).
ONLINE_TERMS_CHARS = 200


def scope_from_state(state: Any) -> Scope:
    items = state.get("active_context_items") or []
    return Scope(
        mode=state.get("active_mode") or "library",
        item_keys=tuple(k for i in items if isinstance(i, dict) and isinstance(k := i.get("item_key"), str)),
        collection=state.get("active_collection"),
        library=state.get("active_library"),
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


def _numbered(passages: list[tuple[Passage, float | None]]) -> list[PassageJson]:
    out: list[PassageJson] = []
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
                "page_label": p.page_label,
                "kind": p.kind,
                "source_key": p.source_key,
                "library": p.library,
                "link": p.link,
                "citation_key": p.citation_key,
                "citation": p.citation(),
                "text": p.text,
                "score": None if score is None else round(score, 4),
                "focal": score is None,
            }
        )
    return out


def record_evidence(state: Any, invocation_id: str, queries: list[str], passages: list[PassageJson],
                    question: str | None = None, topic: str | None = None, unsearched: list[str] | None = None) -> None:
    """Append this search to `retrieved_evidence`, keeping the last MAX_AUDIT_HISTORY_TURNS turns.
    `question` is what was searched, `topic` its key terms, and `unsearched` its parts left when
    the user asked for the answer first: the next turn's follow-up reads them (engine/followup.py);
    a follow-up keeps the topic it was completed with."""
    trail = [e for e in (state.get("retrieved_evidence") or []) if isinstance(e, dict)]
    if trail and trail[-1].get("invocation_id") == invocation_id:
        entry = trail[-1]
    else:
        entry = {"invocation_id": invocation_id, "queries": [], "chunks": [], "citations": []}
        trail.append(entry)
    if question is not None:
        entry["question"] = question
        entry["topic"] = topic if topic is not None else topic_of(question)
        entry["unsearched"] = list(unsearched or [])
    entry["queries"].extend(queries)
    for p in passages:
        chunk = {k: p[k] for k in ("item_key", "attachment_key", "title", "page", "score")}
        entry["chunks"].append(chunk | {"text": p["text"][:EVIDENCE_TEXT_CHARS]})
        if p["item_key"] not in entry["citations"]:
            entry["citations"].append(p["item_key"])
    state["retrieved_evidence"] = trail[-MAX_AUDIT_HISTORY_TURNS:]


def round_event(r: Round, branch: str | None) -> Event:
    """A round's record on the tool's branch: progress for the client, and the persisted proof
    of which aspects were searched (a resumed turn never repeats one)."""
    keys = list(dict.fromkeys(h["item_key"] for h in r.hits))
    said = f"Round {r.n}: searched{' online' if r.source == 'online' else ''} \"{r.aspect}\" ({len(r.hits)} passages)"
    return Event(
        author=TOOL_NAME,
        branch=branch,
        content=types.Content(role="model", parts=[types.Part(text=said)]),
        custom_metadata={ROUND_METADATA_KEY: {"n": r.n, "aspect": r.aspect, "hits": len(r.hits), "item_keys": keys,
                                              "source": r.source}},
    )


def _terms(part: str) -> str:
    """What an online round sends for a part: its content words ("tardigrades survive desiccation"
    for "How do tardigrades survive desiccation?"), cut to ONLINE_TERMS_CHARS."""
    words = " ".join(t.surface for t in terms_of(part)) or " ".join(part.split())
    return words if len(words) <= ONLINE_TERMS_CHARS else words[:ONLINE_TERMS_CHARS].rsplit(" ", 1)[0]


async def online_rounds(online: OnlineLookup, research: Research, tool_context: ToolContext, chosen: bool) -> list[Round]:
    """The parts the library leaves unanswered (and, when the person `chosen` "search online" at a
    checkpoint, those not searched yet), searched beyond the library when the turn may go online.
    A failure ends the online rounds with its line in `research.online_note`; nothing is lost."""
    parts = research.online_parts(with_unsearched=chosen)
    if not parts or online.mode == "off":
        return []
    if not chosen:
        decision = await online.decide(tool_context.session.id, tool_context.state.get("online_allowed"), _terms(parts[0]))
        if decision != "yes":
            research.online_note = ONLINE_NOT_ALLOWED if decision == "unasked" else None
            return []
    rounds: list[Round] = []
    for part in parts:
        try:
            found = await online.search(_terms(part), limit=ONLINE_WORKS_PER_PART)
        except ZocratesError as exc:
            research.online_note = exc.message
            break
        rounds.append(research.record_round(part, online_passages(found), part, source="online"))
        if found.get("offline"):
            research.online_note = "offline: no provider could be reached; searched your library only"
            break
        if found.get("message"):
            research.online_note = str(found["message"])
    return rounds


async def search_round(retriever: Retriever, research: Research, query: str, top_k: int) -> list[Hit]:
    """One round's passages. A follow-up's round puts first the previous turn's passages that
    carry the follow-up's own words ("lifestyle" in the DESMOND papers), then the library's."""
    hits: list[Hit] = await retriever.search(query, research.scope, top_k)
    preferred = research.preferred()
    if preferred is None:
        return hits
    scope, focus = preferred
    words = {t.stem for t in terms_of(focus)}  # its content words, stemmed: "lifestyles" meets "lifestyle"
    mine = [h for h in await retriever.search(query, scope, top_k) if words & word_stems(f"{h.passage.title} {h.passage.text}")]
    seen = {(h.passage.item_key, h.passage.attachment_key, h.passage.page, h.passage.text) for h in mine}
    rest = [h for h in hits if (h.passage.item_key, h.passage.attachment_key, h.passage.page, h.passage.text) not in seen]
    return (mine + rest)[:top_k]


def build_search_tool(
    retriever: Retriever, research: ResearchConfig | None = None, top_k: int = DEFAULT_TOP_K,
    online: OnlineLookup | None = None,
) -> FunctionTool:
    """`online`: the search beyond the library, for the parts the library leaves unanswered."""
    limits = research or ResearchConfig()

    # No return annotation: ADK derives the tool's response schema from it, and cannot for an
    # async generator (it logs a traceback on every turn).
    async def search_library(query: str, tool_context: ToolContext):  # type: ignore[no-untyped-def]
        """Search the user's Zotero library within the active scope (the selected papers, a
        collection, or the whole library) and return the most relevant passages, numbered, each
        with its citation. Cite passages by their number, like [1]."""
        state = tool_context.state
        invocation_id = tool_context.invocation_id
        branch = getattr(tool_context, "branch", None)
        # A resumed checkpoint reruns this body from the top (ADK replays the call): everything it
        # did before the checkpoint comes back from the snapshot, so no round runs twice.
        research = Research.from_json(state.get(SNAPSHOT_KEY))
        if research is not None and (research.invocation_id != invocation_id or research.branch != branch):
            research = None  # a checkpoint of an earlier turn, superseded by this one
        synthesize = chose_online = False
        if research is not None:
            waiting = research.pending_interrupt
            answer = tool_context.resume_inputs.get(waiting) if waiting else None
            if isinstance(answer, dict) and answer.get("action") == "extend_budget":
                guidance = answer.get("guidance")
                research.extend(guidance if isinstance(guidance, str) else None)
            else:  # "synthesize" or "search_online" (the daemon admits nothing else): answer with what was found
                synthesize = True
                chose_online = isinstance(answer, dict) and answer.get("action") == "search_online"
        else:
            # The session's `research_budget` setting (core/session_config.py), else the config's.
            chosen = (state.get("session_config") or {}).get("research_budget")
            budget = chosen if isinstance(chosen, int) and not isinstance(chosen, bool) and chosen >= 1 else None
            # A follow-up that leaves its topic out ("And what about lifestyle?") is searched with
            # the previous turn's topic and papers (engine/followup.py); a complete question as asked.
            scope = scope_from_state(state)
            previous = previous_turn(state, invocation_id)
            if previous is not None and scope.mode == "papers" and not set(scope.item_keys) & set(previous.items):
                previous = None  # the user points at other papers now: they are what "they" means
            follow = resolve(query, previous)
            research = Research.start(
                invocation_id=invocation_id, branch=branch, query=follow.question if follow else query,
                scope=scope, initial_budget=budget or limits.initial_budget,
                max_extensions=limits.max_extensions, followup=follow.as_json() if follow else None,
            )
        while not synthesize and (step := research.next_query()) is not None:
            aspect, part, guided = step
            hits = await search_round(retriever, research, aspect, top_k)
            yield round_event(research.record_round(aspect, hits, part, guided), branch)
        if not synthesize and research.should_ask():
            interrupt = research.raise_checkpoint()
            state[SNAPSHOT_KEY] = research.to_json()
            offered = online is not None and online.mode != "off"
            yield RequestInput(
                interrupt_id=interrupt, message=research.checkpoint_message(offered),
                payload=research.checkpoint_payload(offered),
                response_schema=None,  # ADK's default, spelled out: mypy misses its positional Field(None)
            )
            return
        if online is not None:
            for r in await online_rounds(online, research, tool_context, chose_online):
                yield round_event(r, branch)
        state[SNAPSHOT_KEY] = None
        focal = _snippet_passages(state)
        seen = {(p.item_key, p.page, p.text) for p in focal}
        ranked: list[tuple[Passage, float | None]] = [(p, None) for p in focal]
        ranked += [(p, s) for p, s in research.synthesis() if (p.item_key, p.page, p.text) not in seen]
        passages = _numbered(ranked)
        record_evidence(state, invocation_id, [r.aspect for r in research.rounds] or [query], passages,
                        question=research.query, topic=research.followup.get("topic") if research.followup else None,
                        unsearched=research.unaddressed)
        # The passages as found (the offline answerer quotes them verbatim); the model adapters
        # fence the whole result as untrusted text (models/fencing.py), and it says so itself.
        # How the answer cites (the session's `citation_style`: core/session_config.py); the offline
        # answerer writes its markers so (engine/answer/sources.py).
        style = (state.get("session_config") or {}).get("citation_style")
        yield {"query": query, "scope": research.scope.mode, "passages": passages, "research": research.report(),
               **({"citation_style": style} if style in CITATION_STYLES else {}),
               **({"followup": research.followup} if research.followup else {}),
               "library": await search_facts(retriever, research.scope, research.query, research.aspects, passages),
               UNTRUSTED_KEY: NOTE}

    return FunctionTool(search_library)
