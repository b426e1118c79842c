"""Follow-ups read against the conversation before anything is searched.

"What were the outcomes of the DESMOND programme?" then "And what about lifestyle?": searched
alone, the second finds whatever paper says "lifestyle" most. A follow-up that leaves its topic
out is completed with the previous turn's topic (its key terms), and the papers that turn drew
on are preferred when they speak to it (engine/tools.py). The previous turn is the latest entry
of `retrieved_evidence` (engine/tools.py `record_evidence`): the state the engine keeps anyway,
rewound with the turns, so a rewound turn is never the topic.

What counts as a follow-up, by its form only (a complete question is never touched):
- "what about X?", "and what about X?", "how about X?", "how about its X?";
- "and X?" with a few words after "and";
- "what did they find about X?" (they, the authors, the study, the trial...);
- a question whose first word of substance points back: "How did it affect HbA1c?",
  "What were their results?";
- "search the rest" (or "search them", "yes, search those too") after an answer given before
  every part of its question was searched: the parts left are searched now.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TypedDict

from zocratesd.engine.answer.question import QUESTION_WORDS, parse_question, terms_of
from zocratesd.library.retrieval import STOPWORDS
from zocratesd.textnorm import fold

# "And X?" is a follow-up when X is short ("and lifestyle?", "and at three years?"); a longer
# clause after "and" is more likely a question of its own.
MAX_AND_WORDS = 5
# The previous turn's papers that a follow-up prefers: the first ones its search ranked.
MAX_PREFERRED_ITEMS = 8

_WHAT_ABOUT = re.compile(r"^(?:(?:and|but|so|ok|okay|then)[,\s]+)?(?:what|how)\s+about\s+(?P<x>.+?)[\s?.!]*$", re.I)
_AND = re.compile(r"^(?:and|also)[,\s]+(?P<x>.+?)[\s?.!]*$", re.I)
_FOUND = re.compile(
    r"^(?:and\s+)?(?:what|how)\s+(?:did|do|does)\s+(?:they|it|the\s+(?:authors?|stud(?:y|ies)|trials?|papers?|"
    r"programmes?|programs?|researchers|investigators))\s+(?:find|found|show|report|say|conclude)\s+"
    r"(?:about|on|for|regarding|concerning)\s+(?P<x>.+?)[\s?.!]*$", re.I)
_REST = re.compile(
    r"^(?:(?:yes|ok|okay|sure|please|then)[,.!\s]+)*(?:please\s+)?(?:search|look\s+up|look\s+for|find)\s+"
    r"(?:(?:for|up)\s+)?(?:them|those|these|the\s+rest|the\s+others|the\s+other\s+parts|the\s+remaining(?:\s+parts)?|"
    r"the\s+parts?\s+(?:left|not\s+searched(?:\s+yet)?))(?:\s+(?:too|as\s+well|now|please))*[\s.!?]*$", re.I)
_POINTERS = frozenset("it its they their them this these those he she his her".split())
# "it" that points at nothing: "Is it true that ...", "Is it possible to ...", "It is not proven
# that ...", "It has been shown that ...": these words after it (past `_DUMMY_IT_VERBS`).
_DUMMY_IT_NEXT = frozenset(
    "true false possible impossible known unknown likely unlikely clear unclear correct right wrong accurate fair "
    "plausible established proven shown reported necessary worth safe feasible common usual normal ok okay the a an "
    "that to claimed believed thought said argued suggested assumed accepted debated disputed".split())
_DUMMY_IT_VERBS = frozenset("is was seems seemed appears appeared has had been be remains not still now well generally "
                            "widely often commonly really actually".split())
_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")


@dataclass(frozen=True)
class Previous:
    """What the previous turn searched: its topic (key terms) and the papers it drew on."""

    question: str
    topic: str
    items: tuple[str, ...]
    unsearched: tuple[str, ...] = ()  # its parts left unsearched (answered before they were)


class FollowUpJson(TypedDict):
    """A follow-up as the research snapshot keeps it (engine/research.py `Research.followup`)."""

    asked: str
    question: str
    focus: str
    rest: bool
    previous_question: str
    topic: str
    items: list[str]
    unsearched: list[str]


@dataclass(frozen=True)
class FollowUp:
    """A follow-up completed: `question` is searched (and answered) in its place."""

    asked: str
    question: str
    focus: str  # what the follow-up adds (its own words); "" for the parts left
    previous: Previous
    rest: bool = False  # "search the rest": `question` is the previous turn's parts left unsearched

    def as_json(self) -> FollowUpJson:
        return {"asked": self.asked, "question": self.question, "focus": self.focus, "rest": self.rest,
                "previous_question": self.previous.question, "topic": self.previous.topic,
                "items": list(self.previous.items), "unsearched": list(self.previous.unsearched) if self.rest else []}


def topic_of(question: str) -> str:
    """A question's key terms, as written ("outcomes DESMOND programme"), without the frame it
    was asked in ("What does the literature say about ...": question.py)."""
    return " ".join(t.surface for part in parse_question(question).parts for t in part.terms)


def previous_turn(state: Any, invocation_id: str) -> Previous | None:
    """The latest earlier turn that searched, from `retrieved_evidence`."""
    for entry in reversed([e for e in state.get("retrieved_evidence") or [] if isinstance(e, dict)]):
        if entry.get("invocation_id") == invocation_id:
            continue
        queries = [q for q in entry.get("queries") or [] if isinstance(q, str)]
        asked, kept = entry.get("question"), entry.get("topic")
        question = asked if isinstance(asked, str) else " ".join(queries)
        topic = kept if isinstance(kept, str) else topic_of(question)
        if not topic:
            return None
        items = tuple(dict.fromkeys(k for k in entry.get("citations") or [] if isinstance(k, str)))
        left = tuple(p for p in entry.get("unsearched") or [] if isinstance(p, str))
        return Previous(question=question, topic=topic, items=items[:MAX_PREFERRED_ITEMS], unsearched=left)
    return None


def _points_back(question: str) -> bool:
    """The question's first word of substance is a pronoun ("How did it affect HbA1c?")."""
    words = [fold(w) for w in _WORD.findall(question)]
    for i, low in enumerate(words):
        if low == "it":
            after = next((w for w in words[i + 1:] if w not in _DUMMY_IT_VERBS), "")
            if after in _DUMMY_IT_NEXT:
                continue
        if low in _POINTERS:
            return True
        if low not in STOPWORDS and low not in QUESTION_WORDS:
            return False
    return False


def focus_of(question: str) -> str | None:
    """What an elliptical follow-up asks about, or None when `question` stands alone."""
    q = " ".join(question.split())
    for pattern in (_WHAT_ABOUT, _FOUND):
        m = pattern.match(q)
        if m and terms_of(m.group("x")):
            return m.group("x")
    m = _AND.match(q)
    if m and terms_of(m.group("x")) and len(m.group("x").split()) <= MAX_AND_WORDS:
        return m.group("x")
    if _points_back(q) and terms_of(q):
        return q
    return None


def resolve(question: str, previous: Previous | None) -> FollowUp | None:
    """`question` completed with the previous turn's topic, or None when it is no follow-up (or
    there is no previous turn, or it names the topic already)."""
    if previous is None:
        return None
    if previous.unsearched and _REST.match(" ".join(question.split())):
        # The parts as one question again: "; " keeps each a part of its own (question.py `split_parts`).
        return FollowUp(asked=question, question="; ".join(previous.unsearched), focus="", previous=previous, rest=True)
    focus = focus_of(question)
    if focus is None:
        return None
    own = {t.stem for t in terms_of(focus)}
    # "a " first: the topic's first word is no question's first word, so a capital names a thing.
    topic = terms_of(f"a {previous.topic}")
    terms = [t for t in topic if t.stem not in own]
    # The things the topic names ("DESMOND") carry it; its other words ("outcomes") would weigh
    # as much as the follow-up's own in the search and the answer, so they come only without a name.
    carried = [t.surface for t in terms if t.anchor] or [t.surface for t in terms]
    if not carried or any(t.anchor for t in topic if t.stem in own):
        return None
    return FollowUp(asked=question, question=f"{focus.rstrip(' ?.!')} — {' '.join(carried)}", focus=focus,
                    previous=previous)
