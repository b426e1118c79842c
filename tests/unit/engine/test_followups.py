"""Follow-ups read against the previous turn: elliptical ones carry its topic and prefer its papers,
complete questions are searched as asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.engine.followup import Previous, focus_of, previous_turn, resolve
from zocratesd.engine.research import plan_aspects
from zocratesd.library.retrieval import Hit, InMemoryRetriever, Passage, Scope

DESMOND = "What were the outcomes of the DESMOND programme?"
PREVIOUS = Previous(question=DESMOND, topic="outcomes DESMOND programme", items=("DESMOND1", "DESMOND3"))


@pytest.mark.parametrize(("asked", "focus"), [
    ("And what about lifestyle?", "lifestyle"),
    ("what about lifestyle", "lifestyle"),
    ("How about its cost?", "its cost"),
    ("and weight loss?", "weight loss"),
    ("What did they find about smoking cessation?", "smoking cessation"),
    ("What did the authors report on HbA1c?", "HbA1c"),
    ("How did it affect HbA1c?", "How did it affect HbA1c?"),
    ("Was it effective in older people?", "Was it effective in older people?"),
    ("What were their results at three years?", "What were their results at three years?"),
])
def test_elliptical_follow_ups_are_recognised(asked: str, focus: str) -> None:
    assert focus_of(asked) == focus
    follow = resolve(asked, PREVIOUS)
    assert follow is not None and "DESMOND" in follow.question and focus.rstrip("?") in follow.question


@pytest.mark.parametrize("asked", [
    "How does lifestyle modification affect blood pressure in older adults?",
    "What are the side effects of metformin, and what are their costs?",
    "Does structured education improve HbA1c in type 2 diabetes?",
    "And what are the effects of structured education on depression in adults with diabetes?",
    "Is it true that structured education lowers HbA1c?",
    "Is it possible to prevent type 2 diabetes with diet alone?",
    "It is not proven that moderate consumption of chocolate reduces the risk of cardiovascular disease.",
    "It has been widely claimed that structured education lowers HbA1c.",
    "What about?",  # nothing of its own to add
    "What about the DESMOND programme outcomes?",  # names the topic already: nothing to carry
])
def test_complete_questions_are_left_alone(asked: str) -> None:
    assert resolve(asked, PREVIOUS) is None


def test_there_is_no_follow_up_without_a_previous_search() -> None:
    assert resolve("And what about lifestyle?", None) is None
    assert previous_turn({}, "e-2") is None
    state: dict[str, Any] = {"retrieved_evidence": [
        {"invocation_id": "e-1", "queries": [DESMOND], "chunks": [], "citations": ["DESMOND1"]},
        {"invocation_id": "e-2", "queries": ["x"], "chunks": [], "citations": ["OTHER001"]},
    ]}
    # The turn running now is not its own previous turn; an entry without `question` (written
    # before they were kept) gives its queries.
    assert previous_turn(state, "e-2") == Previous(DESMOND, "outcomes DESMOND programme", ("DESMOND1",))


PASSAGES = [
    Passage("DESMOND1", "Effectiveness of the DESMOND structured education programme for newly diagnosed type 2 diabetes",
            "The DESMOND programme improved weight loss and smoking cessation at 12 months. Participants reported "
            "lifestyle changes in physical activity and diet.", ("M. Davies",), 2008),
    Passage("DESMOND3", "DESMOND: three-year follow-up", "At three years DESMOND sustained benefits on illness beliefs.",
            ("K. Khunti",), 2012),
    Passage("LIFESTY1", "Lifestyle modification in older adults", "Lifestyle modification lowered blood pressure in older "
            "adults. A healthy lifestyle of diet and exercise matters; lifestyle counselling helps.", ("R. Other",), 2015),
    Passage("LIFESTY2", "Lifestyle and sleep", "Lifestyle factors such as sleep and lifestyle habits shape lifestyle risk.",
            ("S. Else",), 2019),
]


class RecordingRetriever(InMemoryRetriever):
    def __init__(self, passages: list[Passage]):
        super().__init__(list(passages))
        self.asked: list[tuple[str, Scope]] = []

    async def search(self, query: str, scope: Scope, top_k: int = 6) -> list[Hit]:
        self.asked.append((query, scope))
        return await super().search(query, scope, top_k)


def cited(answer: str) -> list[str]:
    sources = answer.split("# Cited Sources", 1)[1] if "# Cited Sources" in answer else ""
    return [line.rsplit("/items/", 1)[1].rstrip(")") for line in sources.splitlines() if "/items/" in line]


@pytest.mark.anyio
async def test_a_follow_up_searches_the_previous_topic_and_prefers_its_papers(tmp_path: Path) -> None:
    retriever = RecordingRetriever(PASSAGES)
    d = Daemon(tmp_path, ZocratesConfig(), retriever=retriever)
    await d.start()
    try:
        sid = (await d.create_session()).id

        async def ask(question: str) -> str:
            turn = await d.prompt(sid, question)
            messages = (await d.get_session(sid))["messages"]
            return [m["text"] for m in messages if m["invocation_id"] == turn.invocation_id and m["role"] == "assistant"][-1]

        first = await ask(DESMOND)
        assert cited(first) == ["DESMOND1"]
        retriever.asked.clear()
        second = await ask("And what about lifestyle?")
        assert cited(second) == ["DESMOND1"], second
        assert "lifestyle changes in physical activity and diet" in second
        assert second.startswith("As a follow-up on “outcomes DESMOND programme”, I searched for: lifestyle")
        queries = [q for q, _ in retriever.asked]
        assert all("DESMOND" in q and "lifestyle" in q for q in queries), queries
        assert Scope(mode="papers", item_keys=("DESMOND1", "DESMOND3")) in [s for _, s in retriever.asked]
        state = await d.reader.session_state(sid)
        assert state["retrieved_evidence"][-1]["topic"] == "outcomes DESMOND programme"  # a chain keeps its topic

        retriever.asked.clear()
        fresh = await ask("How does lifestyle modification affect blood pressure in older adults?")
        assert cited(fresh) == ["LIFESTY1"]
        assert [q for q, _ in retriever.asked] == ["How does lifestyle modification affect blood pressure in older adults?"]
        assert "follow-up" not in fresh
    finally:
        await d.aclose()


@pytest.mark.parametrize("asked", ["search the rest", "Yes, search them too.", "please search the remaining parts",
                                   "ok search the parts not searched yet", "Search those as well"])
def test_search_the_rest_searches_the_parts_left(asked: str) -> None:
    left = Previous(question="A? B? C?", topic="A B C", items=(), unsearched=("What does ACSL4 enrich?", "What is B"))
    follow = resolve(asked, left)
    assert follow is not None and follow.rest and follow.question == "What does ACSL4 enrich?; What is B"
    assert plan_aspects(follow.question) == ["What does ACSL4 enrich?", "What is B"]
    assert resolve(asked, PREVIOUS) is None  # nothing was left: searched as asked
    assert resolve("search the rest of the literature on ACSL4", left) is None
