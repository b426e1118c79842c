"""An answer checked against its sources: each quote and each cited claim found (or not) in the
text of the item its citation names, on the page it names.

What a citation names, in each citation style ("[n, p. X]", "(Lewis et al., 2020, p. X)",
"[@key, p. X]"): markers.py, from the answer's `# Cited Sources` entries "[n] ... (zotero://select/
.../KEY)" (the offline answerer's, and a model's that copies it) and the turn's last search. A
marker cites the text before it on its line, back to the sentence's start or the previous marker.

- A quote ("..." or “...”, three words or more) must be in the item's text letter for letter
  (text.py: whitespace, hyphenation, ligatures and quote marks aside). A quote that is there with
  a few words changed is `misquoted` (the check says what the source reads); one that is not there
  is `not_found`, and when another item of the turn has it, the check says which (a real quote
  given to the wrong paper).
- A claim with no quote is `found` when it is the source's sentence (the offline answerer quotes
  verbatim), `supported` when most of its content words are on one page of the item, else
  `unsupported`.
- The page is the page the text is on: a citation that names another one is `page_corrected`.
- An item whose text is partial (only its abstract, pages missing) says so.

A citation is `verified` True when all its checks pass (a corrected page still passes: the text is
there), False when one fails, None when nothing of it could be checked (no text of the item).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from zocrates_wire.ui_session import CitationCheck as CitationJson
from zocrates_wire.ui_session import FoundIn
from zocrates_wire.ui_session import QuoteCheck as CheckJson
from zocratesd.library.catalog import pdf_link
from zocratesd.quotes.align import CANDIDATE_SHARE, NEAR_RATIO, align
from zocratesd.quotes.markers import MARKER_RE, Ref, Sources, is_narrative, narrative_refs, refs_of, split_answer
from zocratesd.quotes.text import ItemText, Page, letters, words

Status = Literal["found", "supported", "misquoted", "not_found", "unsupported"]
PASSING: Final = frozenset({"found", "supported"})
# A quoted span shorter than this many words is a term in quotation marks ("RAG"), not a quote.
MIN_QUOTE_WORDS: Final = 3
# A claim is supported when this share of its content words is on one page of the item: a fair
# paraphrase keeps most of the source's terms; a claim the source never makes shares a few.
SUPPORT_SHARE: Final = 0.6
# A claim with fewer content words than this is too short to judge ("See the quote above [1].").
MIN_CLAIM_WORDS: Final = 3
# Characters of a quote or claim a check repeats (the answer has it whole).
MAX_CHECK_CHARS: Final = 240
# Citations checked in one answer, and checks per citation: an answer is a page, not a book.
MAX_CITATIONS: Final = 50
MAX_CHECKS: Final = 40

_QUOTE_RE: Final = re.compile(r"\u201c([^\u201d\n]+)\u201d|\"([^\"\n]+)\"|\u00ab\s*([^\u00bb\n]+?)\s*\u00bb")
_SENTENCE_END_RE: Final = re.compile(r"(?<=[.!?])[\"\u201d)]?\s+(?=[A-Z\"\u201c(])")
# The reporting verb a narrative citation opens with: "show that", "also found that", "write:".
_REPORTING_RE: Final = re.compile(r"^[\s,;]*(?:(?:[\w'-]+\s+){0,3}?that\b|[\w'-]+(?:\s+[\w'-]+)?\s*:)\s*", re.I)
# What leads into a narrative citation that ends a sentence: "X, as Lewis (2020) showed."
_TRAILING_RE: Final = re.compile(r"[\s,;:]*(?:\b(?:as|like|which|according to|following|see)\s*)?$", re.I)
_ELLIPSIS_RE: Final = re.compile(r"\s*(?:\[\s*(?:\.\s*){3}\]|\.\s*\.\s*\.|\u2026)\s*")
_STOP: Final = frozenset(
    "a an and are as at be been but by can could did do does for from had has have he her his i if in into is it its "
    "may might more most no not of on or our over she so such than that the their them then there these they this "
    "those to too under very was we were what when where which while who will with would you your also between "
    "both each found shows show showed paper study authors".split()
)


@dataclass(slots=True)
class Check:
    kind: Literal["quote", "claim"]
    text: str
    status: Status
    cited_page: str | None = None  # the page the answer gives
    page: str | None = None  # the page the text is on (its label, else number)
    page_number: int | None = None
    link: str | None = None  # opens the PDF at that page
    page_corrected: bool = False
    source_reads: str | None = None  # for a misquote: the source's own words
    found_in: FoundIn | None = None  # for a quote not in the cited item: the item of the turn that has it

    def to_json(self) -> CheckJson:
        return CheckJson(kind=self.kind, text=self.text, status=self.status, cited_page=self.cited_page, page=self.page,
                         page_number=self.page_number, link=self.link, page_corrected=self.page_corrected,
                         source_reads=self.source_reads, found_in=self.found_in)


@dataclass(slots=True)
class CitationCheck:
    n: int
    item_key: str | None
    library: str
    verified: bool | None
    checks: list[Check] = field(default_factory=list)
    partial: str | None = None  # why the item's text is incomplete, when it is
    title: str | None = None
    label: str | None = None  # how the answer cites it when not by number: "[@key]", "(Lewis, 2020)"
    citation_key: str | None = None  # the item's, shown with it wherever the answer is (a reload too)

    def to_json(self) -> CitationJson:
        return CitationJson(n=self.n, item_key=self.item_key, library=self.library, verified=self.verified,
                            partial=self.partial, title=self.title, citation_key=self.citation_key, label=self.label,
                            checks=[c.to_json() for c in self.checks])


@dataclass(slots=True)
class AnswerCheck:
    citations: list[CitationCheck]
    note: str  # what the answer must say about them ("" when all is well)

    def to_json(self) -> list[CitationJson]:
        return [c.to_json() for c in self.citations]


# Reads the text of an item (key, library) of the library; None when the library has none of it.
TextOf = Callable[[str, str], "ItemText | None"]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_CHECK_CHARS else text[: MAX_CHECK_CHARS - 1] + "\u2026"


@dataclass(frozen=True, slots=True)
class _Claim:
    refs: tuple[Ref, ...]
    text: str


def _marked(line: str, sources: Sources | None) -> list[tuple[re.Match[str], tuple[Ref, ...]]]:
    """The markers of a line with what they cite. With `sources`, a parenthesis or a bracket naming
    no item of the answer's is text, not a marker ("(since 2018)", "the Kyoto Protocol (1997)")."""
    out = []
    for m in MARKER_RE.finditer(line):
        refs = narrative_refs(m) if is_narrative(m) else refs_of(m)
        if sources is not None and m.group("numbers") is None:
            refs = tuple(r for r in refs if sources.resolve(r) is not None)
        if refs:
            out.append((m, refs[:1] if is_narrative(m) else refs))
    return out


def _sentence_end(before: str) -> str:
    """The sentence that `before` ends, its list bullet and leading punctuation aside."""
    pieces = [s for s in _SENTENCE_END_RE.split(before.strip()) if s.strip()]
    # The sentence the marker ends; a marker right after a full stop cites the sentence before it.
    text = pieces[-1] if pieces else ""
    return re.sub(r"^\s*(?:[-*+]|\d+\.)\s+", "", text).strip().lstrip(";,: ")


def _narrated(before: str, after: str) -> str:
    """What a narrative marker ("Lewis et al. (2020) show that X.") attributes: the rest of its
    sentence after the reporting verb, else (when that says nothing: "X, as Lewis (2020) showed.")
    the sentence before it."""
    pieces = [s for s in _SENTENCE_END_RE.split(after.strip()) if s.strip()]
    said = _REPORTING_RE.sub("", pieces[0] if pieces else "", count=1).strip().rstrip(".").strip()
    if quotes_in(said) or len(_content(words(said))) >= MIN_CLAIM_WORDS:
        return said
    return _TRAILING_RE.sub("", _sentence_end(before))


def claims(body: str, sources: Sources | None = None) -> list[_Claim]:
    """Each citation marker of the body with the text it cites: for a marker after the text, the
    text before it on its line, back to the sentence's start or the previous marker; for a
    narrative one ("Lewis (2020) found"), the sentence it opens, up to the next marker."""
    out: list[_Claim] = []
    for line in body.splitlines():
        start, text = 0, ""
        marked = _marked(line, sources)
        for i, (m, refs) in enumerate(marked):
            before = line[start : m.start()]
            start = m.end()
            if is_narrative(m):
                text = _narrated(before, line[m.end() : marked[i + 1][0].start() if i + 1 < len(marked) else len(line)])
            elif not before.strip(" ,;") and text:
                pass  # "[1][2]", "[1], [2]": the next marker cites the same text
            else:
                text = _sentence_end(before)
            out.append(_Claim(refs, text))
    return out


def quotes_in(text: str) -> list[str]:
    found = [next(g for g in m.groups() if g is not None) for m in _QUOTE_RE.finditer(text)]
    return [q.strip() for q in found if len(words(q)) >= MIN_QUOTE_WORDS]


def _content(ws: list[str]) -> set[str]:
    return {w for w in ws if w not in _STOP and len(w) > 2 and not w.isdigit()}


def _locate(item: ItemText, quote: str) -> Page | None:
    """The page where all of `quote` is, its pieces cut at an ellipsis ("... [...] ...") in order."""
    pieces = [p for p in _ELLIPSIS_RE.split(quote) if letters(p)]
    first: Page | None = None
    at = 0
    for piece in pieces:
        found = item.find_from(piece, at)
        if found is None:
            return None
        first, at = first or found[0], found[1]
    return first


def _link(item: ItemText, page: Page) -> str | None:
    if page.attachment_key and page.page:
        return pdf_link(item.library, page.attachment_key, page.page)
    return None


def _place(check: Check, item: ItemText, page: Page, cited: Sequence[str]) -> None:
    check.page, check.page_number, check.link = page.cited, page.page, _link(item, page)
    if page.cited is not None and cited and page.cited not in cited and (page.page is None or str(page.page) not in cited):
        check.page_corrected = True


def _near(item: ItemText, text: str) -> tuple[float, Page, str] | None:
    """The page most like `text` (word alignment), its ratio and the words it has there."""
    want = words(text)
    best: tuple[float, Page, str] | None = None
    for page, ws in item.candidates(want, CANDIDATE_SHARE):
        got = align(want, ws)
        if got is not None and (best is None or got.ratio > best[0]):
            best = (got.ratio, page, " ".join(ws[got.start : max(got.end, got.start + len(want))]))
    return best


def _supported(item: ItemText, text: str) -> Page | None:
    want = _content(words(text))
    if len(want) < MIN_CLAIM_WORDS:
        return None
    best, share = None, 0.0
    for page, ws in zip(item.pages, item.page_words(), strict=True):
        s = len(want & set(ws)) / len(want)
        if s > share:
            best, share = page, s
    return best if share >= SUPPORT_SHARE else None


def check_quote(item: ItemText, quote: str, cited_pages: Sequence[str], others: Sequence[ItemText] = ()) -> Check:
    check = Check("quote", _clip(quote), "not_found", cited_page=", ".join(cited_pages) or None)
    page = _locate(item, quote)
    if page is not None:
        check.status = "found"
        _place(check, item, page, cited_pages)
        return check
    near = _near(item, quote)
    if near is not None and near[0] >= NEAR_RATIO:
        check.status, check.source_reads = "misquoted", _clip(near[2])
        _place(check, item, near[1], cited_pages)
        return check
    for other in others:
        elsewhere = _locate(other, quote)
        if elsewhere is not None:
            check.found_in = FoundIn(item_key=other.item_key, library=other.library, title=other.title,
                                     page=elsewhere.cited, link=_link(other, elsewhere))
            break
    return check


def check_claim(item: ItemText, claim: str, cited_pages: Sequence[str]) -> Check | None:
    """None for a claim too short to judge."""
    check = Check("claim", _clip(claim), "unsupported", cited_page=", ".join(cited_pages) or None)
    page = _locate(item, claim)
    if page is not None:
        check.status = "found"
    else:
        near = _near(item, claim)
        if near is not None and near[0] >= NEAR_RATIO:
            page, check.status = near[1], "supported"
        else:
            page = _supported(item, claim)
            if page is None:
                return check if len(_content(words(claim))) >= MIN_CLAIM_WORDS else None
            check.status = "supported"
    _place(check, item, page, cited_pages)
    return check


def with_passages(item: ItemText | None, key: str, library: str, passages: Sequence[Mapping[str, Any]]) -> ItemText | None:
    """The item's text with the turn's passages of it that the library's text lacks (the text the
    user pointed at, a passage of an item indexed since): the model was given those too."""
    mine = [p for p in passages if p.get("item_key") == key and str(p.get("library") or "user") == library
            and isinstance(p.get("text"), str) and p["text"].strip()]
    extra = [p for p in mine if item is None or item.find(p["text"]) is None]
    if not extra:
        return item
    pages = [Page(p["text"], p["page"] if isinstance(p.get("page"), int) else None,
                  p.get("page_label") if isinstance(p.get("page_label"), str) else None,
                  p.get("attachment_key") if isinstance(p.get("attachment_key"), str) else None,
                  str(p.get("kind") or "fulltext")) for p in extra]
    if item is None:
        cited = next((p["citation_key"] for p in mine if isinstance(p.get("citation_key"), str)), None)
        return ItemText(key, library, str(mine[0].get("title") or key), pages, citation_key=cited)
    return ItemText(item.item_key, item.library, item.title, [*item.pages, *pages], item.partial, item.citation_key)


def check_answer(answer: str, passages: Sequence[Mapping[str, Any]], text_of: TextOf) -> AnswerCheck:
    """Every citation of `answer` checked (`passages`: the turn's last search result, numbered)."""
    body, listed = split_answer(answer)
    sources = Sources(listed, passages)
    texts: dict[tuple[str, str], ItemText | None] = {}

    def text(key: str, library: str) -> ItemText | None:
        if (key, library) not in texts:
            texts[key, library] = with_passages(text_of(key, library), key, library, passages)
        return texts[key, library]

    results: dict[int, CitationCheck] = {}
    for claim in claims(body, sources):
        for ref in claim.refs:
            c = sources.resolve(ref)
            if c is None or len(results) >= MAX_CITATIONS and c.n not in results:
                continue
            item = text(c.item_key, c.library)
            res = results.setdefault(c.n, CitationCheck(
                c.n, c.item_key, c.library, None, title=item.title if item else None, partial=item.partial if item else None,
                label=ref.label, citation_key=item.citation_key if item and item.citation_key else sources.key_of(c)))
            if item is None or len(res.checks) >= MAX_CHECKS or not claim.text:
                continue
            pages = (ref.page,) if ref.page else c.pages
            quoted = quotes_in(claim.text)
            if quoted:
                # The other items the answer cites, then those the turn's search found.
                others = [t for kl in sources.items() if kl != (c.item_key, c.library) and (t := text(*kl)) is not None]
                res.checks += [check_quote(item, q, pages, others) for q in quoted]
            else:
                one = check_claim(item, claim.text, pages)
                if one is not None:
                    res.checks.append(one)
    for res in results.values():
        if res.checks:
            res.verified = all(ch.status in PASSING for ch in res.checks)
    ordered = [results[n] for n in sorted(results)]
    return AnswerCheck(ordered, note(ordered))


def note(citations: Sequence[CitationCheck]) -> str:
    """What the answer says about its citations: quotes not found or misquoted, pages corrected,
    partial text. A paraphrase judged unsupported only flags its citation (`verified` false): a
    judgement by shared words is not one to print as a fact."""
    lines: list[str] = []
    for c in citations:
        for ch in c.checks:
            said = f"{c.label or f'[{c.n}]'} \u201c{ch.text}\u201d"
            if ch.status == "not_found":
                where = ""
                if ch.found_in:
                    page = f", p. {ch.found_in['page']}" if ch.found_in.get("page") else ""
                    where = f"; it is in \u201c{ch.found_in['title']}\u201d{page}"
                lines.append(f"- {said}: not found in the cited source{where}.")
            elif ch.status == "misquoted":
                lines.append(f"- {said}: not found in the cited source as quoted; p. {ch.page} reads "
                             f"\u201c{ch.source_reads}\u201d." if ch.page else
                             f"- {said}: not found in the cited source as quoted; it reads \u201c{ch.source_reads}\u201d.")
            if ch.page_corrected and (ch.kind == "quote" or ch.status == "found"):
                lines.append(f"- {said}: on p. {ch.page}, not p. {ch.cited_page}.")
        if c.partial:
            lines.append(f"- {c.label or f'[{c.n}]'} {c.title or c.item_key}: {c.partial}; the rest of it was not read.")
    if not lines:
        return ""
    return "\n".join(["**Checked against the sources:**", *lines])
