"""Synthetic content, deterministic for a seed: prose, research chats as ADK events, session ids,
and the small library the `search_library` tool searches in the turn benchmarks."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import _paths  # noqa: F401 (sys.path first: the repo as a fallback)

from zocratesd import locations

if TYPE_CHECKING:  # ADK is imported where it is used: bench_library and run_all never need it
    from google.adk.events import Event

_WORDS = (
    "retrieval augmented generation dense sparse passage reranker corpus embedding transformer attention "
    "citation survey benchmark evaluation recall precision hallucination grounding context window query "
    "expansion hypothetical document bm25 colbert contrastive pretraining fine-tuning dataset annotation "
    "zotero library collection abstract methodology baseline ablation results discussion limitation "
    "future work reproducibility statistical significance confidence interval effect size sample "
    "participants protocol literature review systematic meta-analysis heterogeneity bias risk quality "
    "the a of and to in for with on that this we our their its is are was were be by from as which "
    "however therefore moreover although because whereas while thus notably specifically in particular"
).split()

_TOOLS = ("search_library", "search_online_literature", "read_item", "list_collection")


class TextGen:
    """Deterministic pseudo-prose of about a given length (seeded: two runs build the same data)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def text(self, approx_chars: int) -> str:
        rng = self.rng
        target = max(8, int(approx_chars * rng.uniform(0.85, 1.15)))
        out: list[str] = []
        n = 0
        sentence_len = 0
        while n < target:
            w = rng.choice(_WORDS)
            if sentence_len == 0:
                w = w.capitalize()
            out.append(w)
            n += len(w) + 1
            sentence_len += 1
            if sentence_len > rng.randint(8, 18):
                out[-1] += rng.choice((".", ".", ".", "?", " [1].", " [2]."))
                sentence_len = 0
        s = " ".join(out)
        return s if s.endswith((".", "?")) else s + "."

    def key(self) -> str:
        return "".join(self.rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") for _ in range(8))


def session_id_at(epoch: float, rng: random.Random) -> str:
    """An id shaped like the ones Daemon.create_session mints."""
    return f"session-{int(epoch * 1000)}-{rng.getrandbits(24):06x}"


def research_chat(gen: TextGen, n_events: int, start_ts: float, *, tool_turn_ratio: float = 0.75) -> list[Event]:
    """`n_events` ADK Events of a research chat: each turn is a ~500-char user question, then either a
    ~500-char answer, or (in `tool_turn_ratio` of the turns) a model event with a short text and a
    function_call, its function_response (~500 chars of search hits) and the ~500-char answer: a tool
    round trip every ~4.7 events. Timestamps strictly increase from `start_ts`."""
    from google.adk.events import Event
    from google.genai import types

    rng = gen.rng
    events: list[Event] = []
    ts = start_ts
    turn = 0

    def add(author: str, inv: str, role: str, parts: list[types.Part]) -> None:
        nonlocal ts
        ts += rng.uniform(0.5, 8.0)
        events.append(
            Event(id=Event.new_id(), author=author, invocation_id=inv, timestamp=ts,
                  content=types.Content(role=role, parts=parts))
        )

    while len(events) < n_events:
        turn += 1
        inv = f"e-{uuid.uuid4()}"
        ts += rng.uniform(20.0, 300.0)  # the user reads and thinks between turns
        add("user", inv, "user", [types.Part(text=gen.text(500))])
        if rng.random() < tool_turn_ratio:
            call_id = f"adk-{uuid.uuid4()}"
            tool = rng.choice(_TOOLS)
            query = gen.text(40).rstrip(".?")
            add("coordinator", inv, "model", [
                types.Part(text=f"Let me look that up: {query}."),
                types.Part(function_call=types.FunctionCall(id=call_id, name=tool, args={"query": query, "limit": 8})),
            ])
            hits = [
                {"key": gen.key(), "title": gen.text(60).rstrip("."), "year": rng.randint(1995, 2026),
                 "snippet": gen.text(90)}
                for _ in range(3)
            ]
            add("coordinator", inv, "user", [
                types.Part(function_response=types.FunctionResponse(id=call_id, name=tool, response={"result": hits}))
            ])
        add("coordinator", inv, "model", [types.Part(text=gen.text(500))])
    return events[:n_events]


# A small library for the `search_library` tool: the e2e tests' three passages and some generated
# ones, so BM25 has a realistic few dozen documents to rank.
LIBRARY_SEED_PASSAGES: list[dict[str, Any]] = [
    {"item_key": "LEWIS202", "title": "Retrieval-Augmented Generation for Knowledge-Intensive NLP Tasks",
     "creators": ["Patrick Lewis", "Ethan Perez"], "year": 2020, "page": 1,
     "text": "RAG models combine parametric and non-parametric memory. The retriever finds passages in a dense index of Wikipedia."},
    {"item_key": "GAOHYDE1", "title": "Precise Zero-Shot Dense Retrieval without Relevance Labels",
     "creators": ["Luyu Gao"], "year": 2022, "page": 2,
     "text": "HyDE asks a language model to write a hypothetical document, then embeds it to retrieve real ones."},
    {"item_key": "KARPDPR1", "title": "Dense Passage Retrieval for Open-Domain Question Answering",
     "creators": ["Vladimir Karpukhin"], "year": 2020, "page": 3,
     "text": "Dense passage retrieval encodes questions and passages with two BERT encoders and outperforms BM25."},
]


def library_passages(n: int = 40, seed: int = 7) -> list[dict[str, Any]]:
    """`n` passages (the three seed ones first), as the dicts of `library_passages.jsonl`."""
    gen = TextGen(seed)
    out = [dict(p) for p in LIBRARY_SEED_PASSAGES[:n]]
    while len(out) < n:
        out.append({
            "item_key": gen.key(), "title": gen.text(60).rstrip("."), "creators": [gen.text(12).rstrip(".")],
            "year": gen.rng.randint(1995, 2026), "page": gen.rng.randint(1, 30), "text": gen.text(400),
        })
    return out


def write_library(data_dir: Path, passages: Sequence[dict[str, Any]]) -> Path:
    """`<data_dir>/zocrates-data/library_passages.jsonl`, which a daemon without a Zotero index
    searches (daemon.load_library_passages)."""
    from zocratesd.core.daemon import LIBRARY_PASSAGES_FILE

    path = locations.state_dir(data_dir) / LIBRARY_PASSAGES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    return path
