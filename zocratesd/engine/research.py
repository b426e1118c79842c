"""Deep research under a budget: plan the question's aspects, search one aspect per round, and
stop at a checkpoint when the budget is spent with aspects left (spec section 5).

This module is the pipeline's state and rules, with no ADK in it: `Research` is what
`hitl_snapshot` holds (JSON), so a turn paused at a checkpoint resumes in another process exactly
where it stopped, and no round runs twice. `engine/tools.py` drives it from `search_library`.

Rules:
- Aspects are the question's parts, as the offline answer is written (engine/answer/question.py:
  sentences, abbreviation-aware, `;` clauses, enumerations, "..., and how ..." clauses). The
  planner is deterministic, so a three-part question with a budget of 1 pauses after round 1.
- A round searches one aspect, in order. The budget is `research.initial_budget` rounds; each
  extension the user grants adds as many again, and its guidance (if any) is searched first.
- Guidance never changes how many parts the question has, unless it names a new topic. Guidance
  that names what a part names, or whose words are mostly a part's, is searched for that part
  (with the part's own words when the part was not searched yet: the part counts as searched);
  other guidance becomes a part of its own (`added_parts`), and the checkpoint and the answer say so.
- The result's report says which parts were searched (`searched_aspects`) and which were not
  (`unaddressed_aspects`): "answer now" reports the latter as not searched yet, never as parts
  the library does not answer (engine/models/offline.py).
- With aspects left and the budget spent, the pipeline asks (checkpoint `interrupt_ext_N`, N
  counting this turn's checkpoints) while N <= `research.max_extensions`; past the cap it
  synthesises without asking (DESIGN.md, "Decisions").
- Beyond the library (engine/online_tool.py): parts whose passages answer nothing are searched
  online when the turn may go online (online.mode `on`, or the person allowed it); at a checkpoint
  "search online" searches the parts not searched yet there too, then answers. Online rounds are
  rounds of their own (`source` "online") and do not spend the library's budget.
- Synthesis fuses the rounds' rankings (reciprocal rank fusion), so each aspect's best passages
  make the answer whatever the scale of their scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from zocratesd.engine.answer.evidence import has_evidence
from zocratesd.engine.answer.question import parse_question, search_texts, terms_of, word_stems
from zocratesd.engine.followup import FollowUpJson
from zocratesd.library.retrieval import Hit, Passage, PassageJson, Scope, tokens
from zocratesd.limits import MAX_GUIDANCE_CHARS

SNAPSHOT_KEY = "hitl_snapshot"
SNAPSHOT_VERSION = 1
INTERRUPT_PREFIX = "interrupt_ext_"
# A pasted paragraph must not become dozens of rounds: the first aspects are searched one by one,
# the rest of the text joins the last one (searched together, as one query).
MAX_ASPECTS = 8
# Reciprocal rank fusion's constant (Cormack, Clarke & Buettcher, SIGIR 2009): 60 damps the weight
# of the very first ranks just enough that a passage found by two rounds outranks a single top hit.
RRF_K = 60
# Passages handed to the model at synthesis: the usual top-k, plus room for each extra round's best.
SYNTHESIS_EXTRA_PER_ROUND = 2
MAX_SYNTHESIS_PASSAGES = 12
# Guidance refines a part when it names a thing the part names ("NRF2 antioxidant genes" and "What
# does NRF2 activate?"), or when at least this share of its words are the part's words ("cystine
# uptake inhibition" and "How is cystine uptake regulated?"); otherwise it is a new topic.
GUIDANCE_PART_OVERLAP = 0.5
# Parts searched online in one turn at most (each is one search of the providers, at most three
# requests): with online.max_requests_per_turn = 9, three parts use the turn's allowance.
MAX_ONLINE_PARTS = 3
# `online_note` when online search is possible but not allowed for the turn (online.mode ask, no yes).
ONLINE_NOT_ALLOWED = "not_allowed"

def plan_aspects(question: str) -> list[str]:
    """The question's aspects: its parts (engine/answer/question.py: sentences, `;` clauses,
    enumerations, and clauses joined by "and how ..."), each with at least one content word. A question with no such split is one aspect."""
    aspects: list[str] = []
    for part in search_texts(question):  # the parts the offline answer is written in, one round each
        clause = " ".join(part.split()).strip(" ;,")
        if clause and tokens(clause) and clause not in aspects:
            aspects.append(clause)
    if not aspects:
        return [" ".join(question.split())] if question.strip() else []
    if len(aspects) > MAX_ASPECTS:
        aspects = aspects[: MAX_ASPECTS - 1] + [" ".join(aspects[MAX_ASPECTS - 1 :])]
    return aspects


def interrupt_id(n: int) -> str:
    return f"{INTERRUPT_PREFIX}{n}"


@dataclass
class Round:
    n: int
    aspect: str  # what was searched
    hits: list[PassageJson]  # Hit.as_json(), best first
    part: str = ""  # the part it searched for; "" (a snapshot without parts): `aspect` itself
    source: str = "library"  # "online": a search beyond the library (OpenAlex, arXiv, Crossref)

    @property
    def for_part(self) -> str:
        return self.part or self.aspect

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "aspect": self.aspect, "hits": self.hits, "part": self.for_part, "source": self.source}


@dataclass
class Research:
    """One turn's research, as `hitl_snapshot` stores it (see the module docstring)."""

    invocation_id: str
    branch: str | None  # the tool's branch: the pipeline's isolation (engine/tools.py)
    query: str
    scope: Scope
    aspects: list[str]
    budget: int  # rounds allowed so far
    initial_budget: int
    max_extensions: int
    rounds: list[Round] = field(default_factory=list)
    asked: int = 0  # checkpoints raised this turn: the last one is interrupt_ext_<asked>
    completed_extensions: list[int] = field(default_factory=list)
    guidance: list[str] = field(default_factory=list)
    added_parts: list[str] = field(default_factory=list)  # guidance that named a new topic: parts of their own
    guided: int = 0  # how many of `guidance` were searched (in order)
    followup: FollowUpJson | None = None  # `query` completed from the turn before (engine/followup.py)
    capped: bool = False  # the cap stopped it: synthesised without asking
    online_note: str | None = None  # why online search found nothing or was not done ("offline: ...")

    @classmethod
    def start(cls, *, invocation_id: str, branch: str | None, query: str, scope: Scope,
              initial_budget: int, max_extensions: int, followup: FollowUpJson | None = None) -> Research:
        return cls(
            invocation_id=invocation_id, branch=branch, query=query, scope=scope, aspects=plan_aspects(query),
            budget=initial_budget, initial_budget=initial_budget, max_extensions=max_extensions, followup=followup,
        )

    def preferred(self) -> tuple[Scope, str] | None:
        """For a follow-up: the previous turn's papers within this turn's scope, and the words a
        passage of theirs must carry to be preferred (the follow-up's own); None otherwise."""
        f = self.followup
        if not f or not f.get("items") or not f.get("focus"):
            return None
        items = tuple(k for k in f["items"] if self.scope.mode == "library" or k in self.scope.item_keys)
        if self.scope.mode == "collection" or not items:
            return None  # which of them the collection holds is the retriever's to say: no preference
        return Scope(mode="papers", item_keys=items, library=self.scope.library), str(f.get("focus") or "")

    # --- progress -----------------------------------------------------------------------------

    @property
    def searched_parts(self) -> list[str]:
        done = {r.for_part for r in self.rounds}
        return [a for a in self.aspects if a in done]

    @property
    def unaddressed(self) -> list[str]:
        done = {r.for_part for r in self.rounds}
        return [a for a in self.aspects if a not in done]

    @property
    def addressed(self) -> list[str]:
        return self.searched_parts

    def _pending_guidance(self) -> str | None:
        return self.guidance[self.guided] if self.guided < len(self.guidance) else None

    def guidance_part(self, g: str) -> str | None:
        """The part guidance `g` refines: one that names a thing `g` names ("NRF2"), or shares at
        least GUIDANCE_PART_OVERLAP of its words; the closest such, a part not searched yet before
        one searched. None: `g` names a new topic."""
        if g in self.added_parts:
            return g
        words = word_stems(g)
        if not words:
            return None
        named = {t.stem for t in terms_of(g) if t.anchor}
        left = set(self.unaddressed)

        def closeness(a: str) -> tuple[bool, int, bool]:
            theirs = word_stems(a)
            return bool(named & theirs), len(words & theirs), a in left

        best = max(self.aspects, key=closeness, default=None)
        if best is None:
            return None
        names, shared, _ = closeness(best)
        return best if names or shared >= GUIDANCE_PART_OVERLAP * len(words) else None

    @property
    def library_rounds(self) -> list[Round]:
        """The rounds that searched the library: what the budget counts."""
        return [r for r in self.rounds if r.source == "library"]

    def online_parts(self, with_unsearched: bool = False) -> list[str]:
        """The parts to search beyond the library: those searched whose passages answer nothing
        (evidence.py), and with `with_unsearched` (the person chose "search online" at a
        checkpoint) those not searched yet; never one searched online already; at most
        MAX_ONLINE_PARTS."""
        online = {r.for_part for r in self.rounds if r.source == "online"}
        found: dict[str, list[PassageJson]] = {}
        for r in self.library_rounds:
            found.setdefault(r.for_part, []).extend(r.hits)
        weak = [a for a in self.aspects if a in found and not has_evidence(parse_question(a).parts, found[a])]
        wanted = weak + ([a for a in self.aspects if a not in found] if with_unsearched else [])
        return [a for a in wanted if a not in online][:MAX_ONLINE_PARTS]

    def next_query(self) -> tuple[str, str, bool] | None:
        """(what the next round searches, the part it searches for, whether it is guidance), or
        None when the budget is spent or every part was searched. Guidance first, in the order
        given; then the parts, in the order asked."""
        if len(self.library_rounds) >= self.budget:
            return None
        g = self._pending_guidance()
        if g is not None:
            part = self.guidance_part(g) or g
            return (f"{part} {g}" if part != g and part in self.unaddressed else g), part, True
        left = self.unaddressed
        return (left[0], left[0], False) if left else None

    def next_aspect(self) -> str | None:
        """What the next round searches, or None when the budget is spent or all are done."""
        nq = self.next_query()
        return nq[0] if nq else None

    def record_round(self, aspect: str, hits: list[Hit], part: str | None = None, guided: bool = False,
                     source: str = "library") -> Round:
        r = Round(n=len(self.rounds) + 1, aspect=aspect, hits=[h.as_json() for h in hits], part=part or aspect,
                  source=source)
        self.rounds.append(r)
        self.guided += guided
        return r

    def should_ask(self) -> bool:
        """Aspects left with the budget spent: ask, unless the cap is reached (then synthesise)."""
        if not self.unaddressed:
            return False
        if self.asked >= self.max_extensions:
            self.capped = True
            return False
        return True

    def raise_checkpoint(self) -> str:
        self.asked += 1
        return interrupt_id(self.asked)

    @property
    def pending_interrupt(self) -> str | None:
        """The checkpoint this snapshot waits on (it is saved only when one is raised)."""
        return interrupt_id(self.asked) if self.asked and self.asked not in self.completed_extensions else None

    def extend(self, guidance: str | None) -> None:
        """The user granted checkpoint `asked`: more rounds, the guidance first."""
        self.completed_extensions.append(self.asked)
        self.budget = len(self.library_rounds) + self.initial_budget
        g = " ".join((guidance or "").split())[:MAX_GUIDANCE_CHARS]
        if g and tokens(g) and g not in self.guidance:
            self.guidance.append(g)
            if self.guidance_part(g) is None:
                self.added_parts.append(g)
                self.aspects.append(g)

    def parts_phrase(self) -> str:
        """"8 parts of your question", with the parts guidance added said as such."""
        asked = len(self.aspects) - len(self.added_parts)
        out = f"{asked} part{'s' if asked != 1 else ''} of your question"
        if not self.added_parts:
            return "the " + out
        return (f"{len(self.aspects)} parts (the {out} and " + "; ".join(f'"{a}"' for a in self.added_parts)
                + (", a new part from your guidance)" if len(self.added_parts) == 1 else ", new parts from your guidance)"))

    def checkpoint_message(self, online: bool = False) -> str:
        left = self.unaddressed
        return (
            f"I searched {len(self.searched_parts)} of {self.parts_phrase()}, which spent the research "
            f"budget of {self.budget} round{'s' if self.budget != 1 else ''}. Not yet searched: "
            + "; ".join(f'"{a}"' for a in left) + ". "
            + ("Search further, search online (OpenAlex, arXiv, Crossref: only the search terms leave this "
               "machine), or answer now from what I found?" if online else "Search further, or answer now from what I found?")
        )

    def checkpoint_payload(self, online: bool = False) -> dict[str, Any]:
        """`online`: online search is not off, so "search online" is offered beside the others."""
        return {
            "unaddressed_aspects": self.unaddressed,
            "addressed_aspects": self.addressed,
            "rounds": len(self.rounds),
            "evidence": len(self.evidence()),
            "extension": self.asked,
            "max_extensions": self.max_extensions,
            "actions": ["extend_budget", "synthesize", *(["search_online"] if online else [])],
        }

    # --- synthesis ----------------------------------------------------------------------------

    def evidence(self) -> list[Passage]:
        """Every distinct passage found so far, fused across rounds, best first."""
        return [p for p, _ in self._fused()]

    def synthesis(self) -> list[tuple[Passage, float]]:
        """The passages the answer is written from: the fused ranking, cut to size."""
        limit = min(MAX_SYNTHESIS_PASSAGES, 6 + SYNTHESIS_EXTRA_PER_ROUND * max(0, len(self.rounds) - 1))
        return self._fused()[:limit]

    def _fused(self) -> list[tuple[Passage, float]]:
        scores: dict[tuple[Any, ...], float] = {}
        first: dict[tuple[Any, ...], Passage] = {}
        for r in self.rounds:
            for rank, h in enumerate(r.hits, start=1):
                p = passage_from_json(h)
                key = (p.item_key, p.attachment_key, p.page, p.text)
                first.setdefault(key, p)
                scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
        order = sorted(scores, key=lambda k: (-scores[k], k[0], k[2] or 0))
        return [(first[k], scores[k]) for k in order]

    def report(self) -> dict[str, Any]:
        """What the pipeline did, for the tool's result (the model and the audit trail see it)."""
        return {
            "aspects": self.aspects,
            "rounds": [{"n": r.n, "aspect": r.aspect, "part": r.for_part, "hits": len(r.hits), "source": r.source}
                       for r in self.rounds],
            "unaddressed_aspects": self.unaddressed,
            "searched_aspects": self.searched_parts,
            "added_aspects": self.added_parts,
            "guidance": self.guidance,
            "extensions": self.completed_extensions,
            "capped": self.capped,
            "online_aspects": [r.for_part for r in self.rounds if r.source == "online"],
            "online_note": self.online_note,
        }

    # --- the snapshot ---------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": SNAPSHOT_VERSION,
            "invocation_id": self.invocation_id,
            "isolation": {"branch": self.branch},
            "query": self.query,
            "scope": {"mode": self.scope.mode, "item_keys": list(self.scope.item_keys), "collection": self.scope.collection},
            "aspects": self.aspects,
            "evidence": [r.as_json() for r in self.rounds],
            "search_report": self.report(),
            "ceilings": {"budget": self.budget, "initial_budget": self.initial_budget, "max_extensions": self.max_extensions},
            "asked": self.asked,
            "completed_extensions": self.completed_extensions,
            "guidance": self.guidance,
            "added_parts": self.added_parts,
            "guided": self.guided,
            "followup": self.followup,
            "online_note": self.online_note,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Research | None:
        """The snapshot back, or None when it is absent, cleared, or not one we can read."""
        if not isinstance(raw, dict) or raw.get("version") != SNAPSHOT_VERSION:
            return None
        try:
            scope = raw["scope"]
            ceilings = raw["ceilings"]
            return cls(
                invocation_id=str(raw["invocation_id"]),
                branch=(raw.get("isolation") or {}).get("branch"),
                query=str(raw["query"]),
                scope=Scope(mode=scope["mode"], item_keys=tuple(scope["item_keys"]), collection=scope["collection"]),
                aspects=[str(a) for a in raw["aspects"]],
                budget=int(ceilings["budget"]),
                initial_budget=int(ceilings["initial_budget"]),
                max_extensions=int(ceilings["max_extensions"]),
                rounds=[Round(n=int(r["n"]), aspect=str(r["aspect"]), hits=list(r["hits"]), part=str(r.get("part") or ""),
                              source="online" if r.get("source") == "online" else "library")
                        for r in raw["evidence"]],
                asked=int(raw["asked"]),
                completed_extensions=[int(n) for n in raw["completed_extensions"]],
                guidance=[str(g) for g in raw.get("guidance") or []],
                added_parts=[str(g) for g in raw.get("added_parts") or []],
                # A snapshot without `guided` keeps its guidance among the aspects, searched as they are.
                guided=int(raw.get("guided", len(raw.get("guidance") or []))),
                followup=cast("FollowUpJson", raw["followup"]) if isinstance(raw.get("followup"), dict) else None,
                online_note=raw["online_note"] if isinstance(raw.get("online_note"), str) else None,
            )
        except (KeyError, TypeError, ValueError):
            return None


_PASSAGE_FIELDS = frozenset(f.name for f in msgspec.structs.fields(Passage))


def passage_from_json(d: PassageJson) -> Passage:
    kw: dict[str, Any] = {k: v for k, v in d.items() if k in _PASSAGE_FIELDS}
    for k in ("creators", "collections"):
        if k in kw:
            kw[k] = tuple(kw[k] or ())
    return Passage(**kw)
