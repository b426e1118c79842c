"""Which passages answer a part of a question, and what to quote from each.

A passage is evidence for a part when it covers enough of the part's terms (`coverage`: the
weighted share of the part's terms found in the passage's title, authors and text, `MIN_COVERAGE`)
and names enough of what the part is about (`MIN_REQUIRED` of its anchors, e.g. "HyDE", or of a
compared subject's own words). One shared word is not evidence: "What is lost in the middle?"
meets a paper on coralline algae only in "lost" (coverage 0.5), the paper it asks about in both.
The two thresholds were measured on bench/bench_answers.py (`--sweep`): see the constants.

The quote is the passage's best sentence for the part (most term weight, earliest on ties), with:
- the sentence before it when the best one does not name the part's subject and that one does, or
  when it opens by pointing back ("This prevents units from co-adapting" needs "dropout");
- the sentence after it when that one carries the comparison ("..., by contrast, ...");
- a second sentence that covers terms the first lacks, joined with " … " when not adjacent;
all within `MAX_QUOTE_CHARS`.

A part that names authors (authors.py) is answered from their passages only (`narrow`); when it
asks nothing besides the names ("What did Strohle and Kuhn find?"), every passage of theirs is
evidence, their abstracts first, and the quote is what the passage reports (`_findings`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from zocratesd.engine.answer.authors import TITLE_MARK, author_focus, by_authors
from zocratesd.engine.answer.question import Part, word_stems
from zocratesd.engine.answer.segment import sentences
from zocratesd.library.retrieval import METADATA_BREAK, PassageJson
from zocratesd.textnorm import fold

# Measured on bench/bench_answers.py --sweep (97 cases): at 0.5 passages sharing one of two words
# come back (precision 0.90, abstention 0.85), at 0.55 some still do (0.97, 0.93); 0.6 and 0.65
# give precision 0.99, recall 1.0, abstention 0.96; from 0.7 answers worded differently from the
# question are lost (recall 0.94 at 0.7, 0.87 at 0.8). 0.6: the lower end of the plateau.
MIN_COVERAGE = 0.6
# A claim (a statement: "IL-18 plays a role in atherosclerosis", or "Is it true that ...?" without
# its frame; question.py `Part.claim`) has many content words, and the papers that support or
# refute it say it in their own: the abstract a SciFact claim cites shares a median of 0.6 of its
# words, a quarter share under 0.5. For a part of at least CLAIM_TERMS full-weight terms, the
# passages the search ranked first (CLAIM_TOP_RANKS) are evidence from CLAIM_MIN_COVERAGE. With
# the rules below, on 120 SciFact claims (three draws of 40, 1,500 distractor abstracts each),
# the claims answered from their cited abstract went from 53 to 79 of the 102 whose abstract the
# search found; passages of other papers accepted rose from 41 to 69 (SciFact marks only the
# cited abstract: many of those are on the claim's topic); bench/bench_answers.py is unchanged.
CLAIM_TERMS = 5
CLAIM_MIN_COVERAGE = 0.45
CLAIM_TOP_RANKS = 2
# A claim's named thing may be named otherwise in the paper on it ("Galliformes": chickens,
# "M2-like": alternatively activated): the passage the search ranked first that covers this much
# of the claim's words is evidence even without it.
CLAIM_STRONG_COVERAGE = 0.7
# Half the named things: "Does BERT beat ELMo?" may still quote a BERT result, "What causes
# resistance in Staphylococcus?" may not quote a paper on C. difficile.
MIN_REQUIRED = 0.5
# A word of the question found only in a passage's title counts this much of its weight.
TITLE_SHARE = 0.5
# A quote with its context: two or three sentences of an abstract, readable in the Zotero sidebar.
MAX_QUOTE_CHARS = 480

_OPENS_BACK = re.compile(
    r"^(?:this|these|that|those|it|its|they|their|such|both|the latter|the former|here|thus|however|"
    r"in contrast|by contrast|conversely|similarly|likewise|in comparison|by comparison|in addition|moreover)\b",
    re.I,
)
# A sentence that reports a finding ("We find that ...", "Results show ...", "... dropped by 40%").
_FINDING = re.compile(
    r"\b(?:we|our|this study|this paper|results?|data|analyses|experiments?)\b.{0,40}?\b(?:find|found|show|shows|showed|"
    r"shown|demonstrate|demonstrates|demonstrated|report|reports|reveal|reveals|revealed|indicate|indicates|suggest|"
    r"suggests|observe|observed|conclude)\b|\b(?:increased|decreased|reduced|improved|dropped|rose|fell|outperform\w*)\b|\d\s?%",
    re.I,
)
_CARRIES_COMPARISON = re.compile(r"\b(?:by contrast|in contrast|by comparison|in comparison|whereas|conversely)\b", re.I)


@dataclass
class Source:
    """One retrieved passage, prepared once per answer."""

    rank: int  # its place in the search result (0 first)
    passage: PassageJson
    sentences: Sequence[str]
    sentence_stems: Sequence[frozenset[str]]
    stems: frozenset[str]  # authors and text
    title_stems: frozenset[str]
    focal: bool = False

    @property
    def item_key(self) -> str:
        return str(self.passage.get("item_key") or "")


def _body(p: PassageJson) -> str:
    """The passage's text; for an item's metadata chunk, only the abstract after the header of
    creators, year and tags (`METADATA_BREAK`, library/retrieval.py): a quote starts at the
    abstract's first word. A passage the user pointed at that has no abstract keeps its header
    (something to show). An index written before the break existed: the header's leading
    "Author; Author 2020" is cut as before."""
    text = str(p.get("text") or "")
    metadata = p.get("kind") == "metadata" or (p.get("kind") is None and p.get("page") is None and p.get("attachment_key") is None)
    if not metadata:
        return text
    header, brk, abstract = text.partition(METADATA_BREAK)
    if brk and p.get("kind") == "metadata":
        return abstract if abstract.strip() or not p.get("focal") else header
    if not p.get("focal"):
        names = "; ".join(str(c) for c in p.get("creators") or [])
        if names and text.startswith(names):
            text = text[len(names):].lstrip()
        year = str(p.get("year") or "")
        if year and text.startswith(year):
            text = text[len(year):].lstrip()
    return text


def prepare(passages: Sequence[PassageJson]) -> list[Source]:
    out = []
    for rank, p in enumerate(passages):
        creators = " ".join(str(c) for c in p.get("creators") or [])
        found, sent_stems, stems, title_stems = _prepared(_body(p), creators, str(p.get("title") or ""))
        out.append(Source(rank, p, found, sent_stems, stems, title_stems, focal=bool(p.get("focal"))))
    return out


# A turn prepares its passages two or three times (the search's facts, then the answer), and a
# library's passages come back turn after turn: the sentences and stems of the last few hundred
# are kept (each entry holds its texts twice and their stems: a few KB).
PREPARED_CACHED = 256


@functools.lru_cache(maxsize=PREPARED_CACHED)
def _prepared(
    body: str, creators: str, title: str
) -> tuple[tuple[str, ...], tuple[frozenset[str], ...], frozenset[str], frozenset[str]]:
    found = tuple(s.text for s in sentences(body))
    sent_stems = tuple(frozenset(word_stems(s)) for s in found)
    return found, sent_stems, frozenset().union(word_stems(creators), *sent_stems), frozenset(word_stems(title))


def coverage(part: Part, stems: AbstractSet[str], title: AbstractSet[str] = frozenset()) -> float:
    """The weighted share of the part's terms in `stems`; a term only in the `title` counts
    `TITLE_SHARE` (a title says what the whole paper is about, not what this passage says)."""
    total = part.weight
    if not total:
        return 0.0
    got = sum(t.weight if t.stem in stems else t.weight * TITLE_SHARE if t.stem in title else 0.0 for t in part.terms)
    return got / total


def source_coverage(part: Part, src: Source) -> float:
    """The passage's coverage; a title that alone covers the part counts whole ("Tell me about
    the okapi" and a paper titled "... (with okapi)": the paper is about it)."""
    return max(coverage(part, src.stems, src.title_stems), _title_coverage(part, src))


def _title_coverage(part: Part, src: Source) -> float:
    c = coverage(part, src.title_stems)
    return c if c >= MIN_COVERAGE else 0.0


def names_subject(part: Part, stems: AbstractSet[str]) -> bool:
    if not part.required:
        return True
    return len(part.required & stems) / len(part.required) >= MIN_REQUIRED


def is_claim(part: Part) -> bool:
    return part.claim and sum(1 for t in part.terms if t.weight >= 1.0) >= CLAIM_TERMS


def is_evidence(part: Part, src: Source) -> bool:
    if part.authors and not part.terms:  # "What did Strohle and Kuhn find?": among their passages, all
        return True
    cov = source_coverage(part, src)
    claim = is_claim(part)
    if not names_subject(part, src.stems | src.title_stems):
        return claim and src.rank == 0 and cov >= CLAIM_STRONG_COVERAGE
    return cov >= (CLAIM_MIN_COVERAGE if claim and src.rank < CLAIM_TOP_RANKS else MIN_COVERAGE)


def narrow(part: Part, sources: Sequence[Source]) -> tuple[Part, list[Source]]:
    """The part and the passages that may answer it: for a part that names authors (authors.py),
    its topic and those authors' passages; else the part and all of them."""
    creators = [list(s.passage.get("creators") or []) for s in sources]
    texts = [frozenset().union(*s.sentence_stems, {TITLE_MARK + t for t in s.title_stems}) for s in sources]
    focus = author_focus(part, creators, texts)
    if focus is None:
        return part, list(sources)
    chosen = by_authors(focus, creators, [s.passage.get("year") for s in sources])
    return focus.part, [sources[i] for i in chosen]


@dataclass
class Quote:
    source: Source
    text: str
    sentences: tuple[int, ...]
    score: float
    new: bool = True  # False: the same sentences are quoted under an earlier part already
    terms: set[str] = field(default_factory=set)


def _sentence_score(part: Part, stems: AbstractSet[str]) -> float:
    return sum(t.weight for t in part.terms if t.stem in stems) + 0.25 * len(part.required & stems)


# A sentence ending in none of these ran to its paragraph's end (a highlight, a line of a note):
# the next one is set apart by a dash, not run on ("... coral bleaching — recovery time").
_ENDS_SENTENCE = frozenset(".!?…\"'”’)]。！？」』）")


def _join(src: Source, chosen: list[int]) -> str:
    out = ""
    prev: int | None = None
    for i in sorted(chosen):
        sep = "" if prev is None else (" … " if i != prev + 1 else " " if out[-1:] in _ENDS_SENTENCE else " — ")
        out += sep + src.sentences[i]
        prev = i
    return out


def _fits(src: Source, chosen: list[int]) -> bool:
    return len(_join(src, chosen)) <= MAX_QUOTE_CHARS


def quote(part: Part, src: Source, avoid: frozenset[int] = frozenset(), *, need: frozenset[str] | None = None,
          taken: frozenset[int] = frozenset()) -> Quote | None:
    """The passage's quote for `part` (see the module docstring); None when no sentence of it
    names any of the part's terms (and it is not a passage the user pointed at). `avoid`: sentences
    already quoted under another part; `need`: stems the main sentence must contain (one of);
    `taken`: sentences never to quote (another passage quotes them: a highlight of this text)."""
    if part.authors and not part.terms:
        return _findings(src, avoid | taken)
    scores = [0.0 if i in taken else _sentence_score(part, st) for i, st in enumerate(src.sentence_stems)]
    candidates = [i for i in range(len(scores)) if scores[i] > 0 and (need is None or need & src.sentence_stems[i])]
    if not candidates:
        free = [i for i in range(len(src.sentences)) if i not in taken]
        if (src.focal or _title_coverage(part, src)) and free:  # pointed at, or about it by its title
            chosen = free[:1]
            for i in free[1:]:
                if not _fits(src, [*chosen, i]):
                    break
                chosen.append(i)
            return Quote(src, _cut(_join(src, chosen)), tuple(chosen), 0.0)
        return None
    fresh = [i for i in candidates if i not in avoid]
    pool = fresh or candidates
    best = max(pool, key=lambda i: (scores[i], -i))
    chosen = [best]
    # The subject, or what a pointing-back opener points at, from the sentence before.
    subject = part.required or {t.stem for t in part.terms if t.anchor}
    if best > 0 and best - 1 not in taken and (
        (subject and not subject & src.sentence_stems[best] and subject & src.sentence_stems[best - 1])
        or _OPENS_BACK.match(src.sentences[best])
    ) and _fits(src, [best - 1, best]):
        chosen.append(best - 1)
    # The comparison, from the sentence after.
    nxt = best + 1
    if nxt < len(src.sentences) and nxt not in taken and _CARRIES_COMPARISON.search(src.sentences[nxt]) and _fits(src, [*chosen, nxt]):
        chosen.append(nxt)
    # A second sentence for the terms still missing.
    have = set().union(*(src.sentence_stems[i] for i in chosen))
    missing = {t.stem for t in part.terms if t.weight >= 1.0} - have
    if missing:
        extra = [i for i in range(len(src.sentences)) if i not in chosen and i not in taken and missing & src.sentence_stems[i]]
        extra.sort(key=lambda i: (-len(missing & src.sentence_stems[i]), abs(i - best)))
        for i in extra[:1]:
            if _fits(src, [*chosen, i]):
                chosen.append(i)
    if src.passage.get("kind") == "annotation" and _fits(src, list(range(len(src.sentences)))):
        chosen = list(range(len(src.sentences)))  # the highlight with the user's comment: quoted whole
    text = _cut(_join(src, chosen))
    terms = set().union(*(src.sentence_stems[i] for i in chosen)) & {t.stem for t in part.terms}
    return Quote(src, text, tuple(sorted(chosen)), scores[best], new=bool(fresh), terms=terms)


def _findings(src: Source, avoid: frozenset[int]) -> Quote | None:
    """What a passage of the named authors reports: its sentences that state a finding, in order,
    within MAX_QUOTE_CHARS; else its opening sentences."""
    pool = [i for i in range(len(src.sentences)) if i not in avoid]
    if not pool:
        return None
    chosen = [i for i in pool if _FINDING.search(src.sentences[i])][:2] or pool[:1]
    for i in pool:  # context up to the limit: the sentence after the last one chosen
        if i > max(chosen) and _fits(src, [*chosen, i]):
            chosen.append(i)
            break
    while len(chosen) > 1 and not _fits(src, chosen):
        chosen.pop()
    return Quote(src, _cut(_join(src, chosen)), tuple(sorted(chosen)), 1.0, new=True)


# A highlight this short is matched only as a whole sentence of the full text, not inside one
# (a few words recur: "as shown in Table 2").
MIN_HIGHLIGHT_INSIDE = 30
_NON_WORD = re.compile(r"\W+")


def sentence_key(text: str) -> str:
    """A sentence as compared across passages: folded, its words only (a PDF's text and the
    highlight made on it differ in spaces, hyphens, ligatures and quotes)."""
    return _NON_WORD.sub(" ", fold(text)).strip()


def repeats(src: Source, quoted: AbstractSet[str]) -> frozenset[int]:
    """The sentences of `src` that say what another passage of its item quotes (`quoted`: their
    `sentence_key`s): the same sentence, one inside a quoted highlight, or one that contains it."""
    if not quoted:
        return frozenset()
    out = set()
    for i, text in enumerate(src.sentences):
        key = sentence_key(text)
        if key in quoted or any((len(k) >= MIN_HIGHLIGHT_INSIDE and k in key) or (len(key) >= MIN_HIGHLIGHT_INSIDE and key in k)
                                for k in quoted):
            out.add(i)
    return frozenset(out)


def _cut(text: str) -> str:
    if len(text) <= MAX_QUOTE_CHARS:
        return text
    return text[: MAX_QUOTE_CHARS - 1].rsplit(" ", 1)[0] + "…"


def select(part: Part, sources: Sequence[Source], limit: int) -> list[Source]:
    """The part's evidence, best first: the passages the user pointed at, then by coverage, then
    by search rank; at most `limit`, and at most two passages of one item."""
    chosen = [s for s in sources if s.focal or is_evidence(part, s)]
    # An abstract says what a paper found; for a question that names only authors, it comes first.
    abstract_first = bool(part.authors) and not part.terms
    chosen.sort(key=lambda s: (not s.focal, abstract_first and s.passage.get("kind") != "metadata",
                               -source_coverage(part, s), s.rank))
    out: list[Source] = []
    per_item: dict[str, int] = {}
    for s in chosen:
        if per_item.get(s.item_key, 0) >= 2:
            continue
        per_item[s.item_key] = per_item.get(s.item_key, 0) + 1
        out.append(s)
        if len(out) == limit:
            break
    return out


def has_evidence(parts: Sequence[Part], passages: Sequence[PassageJson]) -> bool:
    """Does any passage answer any part? (What "found nothing" means, for the search's facts.)"""
    sources = prepare(passages)
    return any(s.focal or is_evidence(p, s) for part in parts for p, mine in [narrow(part, sources)] for s in mine)


def evidence_items(parts: Sequence[Part], passages: Sequence[PassageJson]) -> list[str]:
    """The item keys of the passages that answer some part, in order, once each."""
    sources = prepare(passages)
    narrowed = [(p, {id(s) for s in mine}) for p, mine in (narrow(part, sources) for part in parts)]
    keys = [s.item_key for s in sources if any(id(s) in mine and is_evidence(p, s) for p, mine in narrowed)]
    return list(dict.fromkeys(keys))
