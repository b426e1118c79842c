"""The offline answer: from a `search_library` result to cited text (deterministic).

- One part: "Here is what <scope> says:", a quote per evidence passage, best first.
- Several parts (see question.py): a heading per part, in the order asked, each with its quotes,
  or a line saying the library does not answer it; the opening line says how many parts the
  library answers and which it does not.
- A comparison: the quotes that name both subjects first ("Compared directly"), then a heading per
  subject, its quotes naming that subject: the subjects' findings side by side.
- Nothing found: the real cause, from the search's facts (causes.py): no library, the library
  still indexing (N%), an empty scope, matches elsewhere in the library, or simply no match.
- Then `# Cited Sources` (sources.py): each item once, numbered in the order first cited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from zocratesd.engine.answer.evidence import (
    Quote,
    Source,
    coverage,
    is_evidence,
    narrow,
    prepare,
    quote,
    repeats,
    select,
    sentence_key,
    source_coverage,
)
from zocratesd.engine.answer.question import Part, Question, parse_question
from zocratesd.engine.answer.sources import CITED_HEADER, Citations
from zocratesd.library.retrieval import ONLINE_KIND, PassageJson

# Quotes in a one-part answer, and per part of a longer one: enough to ground a claim in several
# papers, short enough to read in the Zotero sidebar.
MAX_QUOTES = 5
MAX_QUOTES_PER_PART = 3
# Words a refusal names as missing from the closest passage (the rest are counted).
MAX_NAMED_MISSING = 4


@dataclass
class Section:
    heading: str | None
    quotes: list[Quote] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # said after the quotes (missing parts, pointers)
    pointers: list[Source] = field(default_factory=list)  # "only in the direct comparison above [n]"


def scope_words(result: dict[str, Any]) -> str:
    scope = result.get("scope")
    if scope == "papers":
        return "the selected papers"
    if scope == "collection":
        return "the selected collection"
    return "your library"


def _quoted(text: str) -> str:
    return f"“{text}”"


def _section(part: Part, sources: list[Source], limit: int, used: dict[int, set[int]], quoted: dict[str, dict[str, int]], *,
             need_subject: bool = False, heading: str | None = None) -> Section:
    """`quoted`: item key -> the sentences quoted from its passages so far (`sentence_key`), and
    the passage (its rank) each was quoted from, for the whole answer. A sentence is quoted once:
    from a highlight (its page label and the user's comment: the richer citation), else from the
    page it is on, never again from the item's abstract or another of its passages (an abstract's
    sentences are often on page 1 too)."""
    sec = Section(heading)
    part, sources = narrow(part, sources)  # a part that names authors: their passages, its topic
    chosen = select(part, sources, limit)
    place = {src.rank: n for n, src in enumerate(chosen)}
    for src in sorted(chosen, key=_citing_order):
        annotation = src.passage.get("kind") == "annotation"
        elsewhere = {k for k, rank in quoted.get(src.item_key, {}).items() if rank != src.rank}
        taken = frozenset() if annotation else repeats(src, elsewhere)
        q = quote(part, src, frozenset(used.get(src.rank, set())), need=part.required if need_subject else None, taken=taken)
        if q is None:
            if taken and heading is not None and any(s.item_key == src.item_key for s in chosen if s is not src):
                sec.pointers.append(src)  # its sentence is quoted above, from another passage of the item
            continue
        if not q.new and heading is not None:
            sec.pointers.append(src)  # the same sentences answer an earlier part: point, don't repeat
            continue
        used.setdefault(src.rank, set()).update(q.sentences)
        quoted.setdefault(src.item_key, {}).update((sentence_key(src.sentences[i]), src.rank) for i in q.sentences)
        sec.quotes.append(q)
    sec.quotes.sort(key=lambda q: place[q.source.rank])  # in the order select chose them
    sec.pointers.sort(key=lambda s: place[s.rank])
    return sec


def _citing_order(src: Source) -> tuple[bool, bool]:
    """Which passage of an item quotes a sentence they share: a highlight, then a page, then the rest."""
    return src.passage.get("kind") != "annotation", not isinstance(src.passage.get("page"), int)


def _direct(q: Question, sources: list[Source], used: dict[int, set[int]]) -> Section:
    """Sentences that name both compared subjects."""
    a, b = q.parts[0], q.parts[1]
    sec = Section("Compared directly")
    for src in sources:
        if not (is_evidence(a, src) and is_evidence(b, src)):
            continue
        both = [i for i, st in enumerate(src.sentence_stems) if a.required & st and b.required & st]
        if not both:
            continue
        best = max(both, key=lambda i: (coverage(a, src.sentence_stems[i]) + coverage(b, src.sentence_stems[i]), -i))
        sec.quotes.append(Quote(src, src.sentences[best], (best,), 1.0))
        used.setdefault(src.rank, set()).add(best)
        if len(sec.quotes) == MAX_QUOTES_PER_PART:
            break
    return sec


def _plan(q: Question, sources: list[Source], where: str) -> list[Section]:
    used: dict[int, set[int]] = {}
    quoted: dict[str, dict[str, int]] = {}
    if len(q.parts) == 1:
        return [_section(q.parts[0], sources, MAX_QUOTES, used, quoted)]
    sections: list[Section] = []
    if q.comparison:
        direct = _direct(q, sources, used)
        if direct.quotes:
            sections.append(direct)
        focus = f" ({q.focus})" if q.focus else ""
        for part in q.parts:
            sec = _section(part, sources, MAX_QUOTES_PER_PART, used, quoted, need_subject=True, heading=part.text)
            if not sec.quotes:
                sec.pointers = [d.source for d in direct.quotes]
                if not sec.pointers:
                    sec.notes.append(f"Nothing in {where} covers {part.topic}{focus}, so there is nothing to set beside the rest.")
            sections.append(sec)
        return sections
    for part in q.parts:
        sec = _section(part, sources, MAX_QUOTES_PER_PART, used, quoted, heading=part.text)
        if not sec.quotes and not sec.pointers:  # a pointer to a quote above answers it too
            sec.notes.append(f"Nothing in {where} answers this part: no passage covers {_quoted(part.topic)}.")
        sections.append(sec)
    return sections


def _missing_names(part: Part, quotes: list[Quote]) -> list[str]:
    """The part's anchors and subject that no quoted passage names (said plainly: a partial
    answer). Other words are not listed: a passage says "stability" where the question says
    "unstable", and a list of such words would be noise, not a finding."""
    named = set().union(*(q.source.stems | q.source.title_stems for q in quotes)) if quotes else set()
    return [t.surface for t in part.terms if t.stem in part.required and t.stem not in named]


def compose_answer(question: str, result: dict[str, Any]) -> str:
    """The answer to `question` from a `search_library` result (deterministic)."""
    # The tool's response as the model saw it: JSON, checked here for the one field the answer needs.
    passages = cast("list[PassageJson]", [p for p in (result.get("passages") or []) if isinstance(p, dict) and p.get("text")])
    q = parse_question(question or str(result.get("query") or ""))
    where = scope_words(result)
    sources = prepare(passages)
    sections = _plan(q, sources, where)
    if not any(s.quotes for s in sections):
        return nothing_found(q, result, sources)

    citations = Citations(str(result.get("citation_style") or "numbered"))
    for sec in sections:
        for qt in sec.quotes:
            citations.cite(qt.source.passage)
        for src in sec.pointers:
            citations.cite(src.passage)
    # Works found beyond the library are not the library's words: the answer says whose they are.
    online = sum(1 for c in citations.items.values() if c.meta.get("kind") == ONLINE_KIND)
    if online:
        where = "the literature found online" if online == len(citations.items) else f"{where}, with the literature found online,"

    lines: list[str] = []
    if q.comparison:
        focus = f" ({q.focus})" if q.focus else ""
        lines.append(f"Side by side, what {where} says about {q.subjects[0]} and {q.subjects[1]}{focus}:")
    elif len(q.parts) > 1:
        answered = [s for s in sections if s.quotes or s.pointers]
        n, k = len(q.parts), len(answered)
        if k == n:
            lines.append(f"Your question has {n} parts; here is what {where} says on each.")
        else:
            left = "; ".join(_quoted(p.text) for p, s in zip(q.parts, sections, strict=True) if not (s.quotes or s.pointers))
            lines.append(f"Your question has {n} parts; {where} answers {k} of them. Not answered: {left}.")
    else:
        lines.append(f"Here is what {where} says:")
    lines.append("")
    for sec in sections:
        if sec.heading:
            lines.append(f"## {sec.heading}")
        for qt in sec.quotes:
            lines.append(f"- {qt.text} {citations.marker(qt.source.passage)}")
        for src in sec.pointers:
            lines.append(f"- See the quote above {citations.marker(src.passage)}.")
        lines += sec.notes
        lines.append("")
    if len(q.parts) == 1:
        missing = _missing_names(narrow(q.parts[0], sources)[0], sections[0].quotes)
        if missing:
            lines += [f"None of these passages mentions {', '.join(_quoted(m) for m in missing)}: "
                      f"{where} may answer this question only in part.", ""]
    lines += _notes(result)
    lines.append(CITED_HEADER)
    lines += citations.lines()
    return "\n".join(lines)


def _notes(result: dict[str, Any]) -> list[str]:
    out: list[str] = []
    left = (result.get("research") or {}).get("unaddressed_aspects") or []
    if left:
        out += ["Not searched, as you asked for the answer first: " + "; ".join(_quoted(str(a)) for a in left) + ".", ""]
    facts = result.get("library") or {}
    if facts.get("state") in ("starting", "indexing"):
        out += [f"Your library is still being indexed ({float(facts.get('percent') or 0):.0f}% done): "
                "asked again later, this question may find more.", ""]
    return out


def nothing_found(q: Question, result: dict[str, Any], sources: list[Source]) -> str:
    """Why nothing answers, as precisely as the search's facts allow (causes.py gathers them)."""
    facts = result.get("library") or {}
    scope = result.get("scope") or facts.get("scope") or "library"
    where = scope_words({"scope": scope})
    topic = _quoted(" / ".join(p.topic for p in q.parts if p.topic) or q.text)
    state = facts.get("state")
    items = facts.get("items")
    message = str(facts.get("message") or "").strip().rstrip(".")
    if state == "disabled" or (state in ("unavailable", "error", "stopped") and not items):
        return f"I have no library to search{': ' + message if message else ''}. " \
               "Once Zocrates can read your Zotero library, ask again."
    if facts.get("scope_items") == 0:
        if scope == "papers":
            return "No papers are selected, so there was nothing to search. Select papers in Zotero, " \
                   "or ask again with the whole library as the scope."
        return "The selected collection has no items, so there was nothing to search. " \
               "Pick another collection, or ask again with the whole library as the scope."
    elsewhere = int(facts.get("elsewhere") or 0)
    if scope != "library" and elsewhere:
        n_items = int(facts.get("elsewhere_items") or 0)
        return (f"I found nothing about {topic} in {where}, but {elsewhere} passage{'s' if elsewhere != 1 else ''} "
                f"in {n_items} item{'s' if n_items != 1 else ''} elsewhere in your library answer it. "
                "Widen the scope to the whole library to use them.")
    near = _near(q, sources)
    if state in ("starting", "indexing"):
        pct = float(facts.get("percent") or 0)
        return (f"I found nothing about {topic} in {where} so far, but your library is still being indexed "
                f"({pct:.0f}% done).{near} Ask again when indexing has finished.")
    if scope == "library":
        count = f" ({items} items indexed)" if isinstance(items, int) and items else ""
        return f"I found nothing about {topic} in your library{count}.{near} Try other words."
    if "elsewhere" in facts:
        return f"I found nothing about {topic} in {where}, nor anywhere else in your library.{near} Try other words."
    return f"I found nothing about {topic} in {where}.{near} Try other words, or widen the scope to the whole library."


def _near(q: Question, sources: list[Source]) -> str:
    """" The closest passage lacks “secretome”, “HOXB4” (it has 3 of the 5 words asked about)."
    What is missing is what the user can act on (other words, another paper); the named things
    and the rarest words first."""
    best = 0.0
    closest: tuple[Part, Source] | None = None
    for candidate in sources:
        for asked in q.parts:
            c = source_coverage(asked, candidate)
            if c > best:
                best, closest = c, (asked, candidate)
    if closest is None:
        return ""
    part, src = closest
    have = src.stems | src.title_stems
    missing = [t for t in part.terms if t.stem not in have]
    if not missing:
        return ""
    missing.sort(key=lambda t: (not t.anchor, t.stem not in part.required, t.weight < 1.0))
    shown = ", ".join(_quoted(t.surface) for t in missing[:MAX_NAMED_MISSING])
    more = f" and {len(missing) - MAX_NAMED_MISSING} more" if len(missing) > MAX_NAMED_MISSING else ""
    found = len(part.terms) - len(missing)
    return (f" The closest passage lacks {shown}{more} (it has {found} of the {len(part.terms)} words asked about), "
            "which is not enough to answer.")
