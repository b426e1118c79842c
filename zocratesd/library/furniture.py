"""Page furniture in a PDF's extracted text: running headers and footers, page numbers, and words
hyphenated at a line break, found from the document itself and taken out before it is indexed.

Zotero writes a PDF's text to `.zotero-ft-cache` page by page, each text block a line (Zotero 7's
PDF worker: a paragraph a line, its words hyphenated at a line's end joined already; pdftotext,
before it: each printed line, hyphens kept), so every page starts with the journal's running header
and ends with its page number, each a line of its own; once the chunker joins lines, a quote
reads "J Med 2020;12:34 We detect a strong ...", and BM25 counts the journal's name once per
page. What is furniture is learnt per document:

- A line near the top or bottom of a page (the first or last `EDGE_LINES` lines with text) whose
  normalised form (case folded, numbers and roman numerals as "#", spaces collapsed: "Smith et al.
  127" and "Smith et al. 128" are one line) recurs at the edges of enough of the document's
  pages, counted over all pages or over the odd or even pages alone (books and journals alternate
  left and right headers). See `REPEAT_SHARE` and the two minimum counts below.
- A line that is only a page number ("12", "- 12 -", "Page 3 of 12", "xii") at a page's edge when
  the document corroborates it: the same offset between the number and the page's index on
  another page (journal page numbers start anywhere), or the number is the page's own index, or
  it says "page" or "of N".
- A word split at a line's end ("regu-\\nlation") is joined, see `dehyphenate`.

Page boundaries are never moved: the result has exactly the form feeds of the input, so a page's
number (and the label pdflabels.py finds for it) stays the same; a page that was only furniture
becomes empty. Only PDF text goes through here: abstracts, notes and annotations are the user's
or the publisher's prose, not printed pages.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from math import ceil

from zocratesd.library.fulltext import PAGE_BREAK

# Lines counted as a page's edge, from the top and from the bottom: a journal header is one or
# two lines (journal and volume, then authors), a footer a page number and a DOI or copyright
# line; a third line leaves room for a stray line extracted above the header.
EDGE_LINES = 3
# Page numbers sit on the outermost lines; a number deeper in is more likely a table's cell.
PAGE_NUMBER_LINES = 2
# A line recurring at the edges of at least this share of its pages is furniture: a running
# header is on every page, or every other page when odd and even pages alternate, less the title
# page and full-page figures; a sentence that happens to recur at a page's edge is on far fewer.
REPEAT_SHARE = 0.5
# Fewest pages a line must recur on. A short line that does not end a sentence ("J Med 2020",
# "Smith et al.") looks like furniture, and twice (a 2-page letter's header) is enough; any other
# line needs three pages, so a sentence quoted twice is never taken for a header.
MIN_REPEATS_SHORT = 2
MIN_REPEATS = 3
# "Short" above: at most this many words. Running headers are a title, a journal or author names.
SHORT_LINE_WORDS = 12
# A longer line is prose or a table row, never furniture.
MAX_FURNITURE_CHARS = 160
# Documents with fewer pages than this are compared line for line (only case and spaces folded,
# numbers kept): with two pages, "Table 1" and "Table 2" atop each would otherwise match.
MIN_PAGES_FOR_NUMBER_FOLDING = 3
# Fragments that, before a line-break hyphen, begin a hyphenated compound far more often than a
# syllable-split word ("self-\nreported", "long-\nterm"), when the document itself has neither form.
COMPOUND_PREFIXES = frozenset(
    "self well long short cross half full large small state dose time non anti multi".split()
)

_NUMBER_RE = re.compile(r"\d+")
_ROMAN_RE = re.compile(r"m{0,4}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})")
_ROMAN_WORD_RE = re.compile(r"\b[mdclxvi]+\b")
_SPACES_RE = re.compile(r"\s+")
# A line that is only a page number: "12", "- 12 -", "[12]", "Page 12", "p. 12", "12 of 30", "12/30", "xii".
_PAGE_NUMBER_RE = re.compile(
    r"[\s\-\u2013\u2014|\[(]*(?P<word>(?:page|p\.|pg\.?|seite|pagina)\s*)?"
    r"(?P<n>\d{1,4}|[ivxlcdm]{1,8})(?P<of>\s*(?:of|/|von|de)\s*\d{1,4})?[\s\-\u2013\u2014|\])]*",
    re.IGNORECASE,
)
# Dashes or a bar around a number make it a page number ("- 12 -"); parentheses do not ("(3)" is
# an equation's number).
_DECORATED_RE = re.compile(r"[\-\u2013\u2014|]")
# A sentence's end: a word of three or more lower-case letters, then its stop ("et al." and
# "J. Med." are a header's abbreviations).
_SENTENCE_END_RE = re.compile(r"[^\W\d_A-Z]{3}[.!?]['\")\]]?\s*$")
# A word cut at a line's end: the hyphen (U+00AD is a soft hyphen some PDFs write for exactly
# this), the line break, the rest of the word. Found from the hyphen (fast: a hyphen before a line
# break is rare), the word before it is read backwards over letters, digits and `_WORD_JOINERS`.
_BREAK_RE = re.compile(r"([\-\u2010\u00ad])[ \t]*\n[ \t]*(\w+)")
_WORD_JOINERS = "-_\u2010"
_HYPHEN_RE = re.compile(r"[\-\u2010]")
# A hyphen between two word characters: a compound written on one line ("long-term"). The hyphen
# comes first and the character before it is checked behind it: a pattern that starts with a
# lookbehind is tried at every position of the text, one that starts with a character class is
# found by scanning for it (3x faster over a document; bench/PROFILE.md, section 17).
_INNER_HYPHEN_RE = re.compile(r"[\-\u2010](?<=\w.)(?=\w)")
_ROMAN_VALUES = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100, "d": 500, "m": 1000}


def strip_furniture(text: str) -> str:
    """The PDF text without its running headers, footers and page numbers, hyphenated line breaks
    joined; exactly as many form feeds as `text` (see the module doc)."""
    raw = text.split(PAGE_BREAK)
    # Pages with text only: a file of form feeds alone must not cost a list per page.
    pages = {i: page.split("\n") for i, page in enumerate(raw) if page.strip()}
    edges = {i: _edge_lines(lines, EDGE_LINES) for i, lines in pages.items()}
    keys = _edge_keys(pages, edges, fold_numbers=len(pages) >= MIN_PAGES_FOR_NUMBER_FOLDING)
    furniture = _repeated(keys, list(pages))
    numbers = _page_numbers(pages)
    vocabulary = _LazyVocabulary(text)
    out: list[str] = []
    for index, page in enumerate(raw):
        lines = pages.get(index)
        if lines is None:
            out.append(page)
            continue
        drop = {i for i in edges[index] if keys.get((index, i), ("",))[0] in furniture} | numbers.get(index, set())
        kept = "\n".join(line for i, line in enumerate(lines) if i not in drop) if drop else page
        out.append(dehyphenate(kept, vocabulary))
    return PAGE_BREAK.join(out)


class _LazyVocabulary:
    """What a document says about a word split at a line's end, read the first time a line-break
    hyphen asks: how often it writes the two parts with a hyphen between them within a line, and
    how often joined (case-folded; inside a longer word too: "regulation" in "deregulation" is as
    good a witness)."""

    def __init__(self, text: str):
        self.text = text
        self.folded: str | None = None
        self.pairs: Counter[str] = Counter()

    def _fold(self) -> str:
        if self.folded is None:
            folded = self.folded = self.text.casefold()
            # Hyphens inside a line are few: each is read with the word parts either side of it.
            for m in _INNER_HYPHEN_RE.finditer(folded):
                a = b = m.start()
                while a > 0 and folded[a - 1].isalnum():
                    a -= 1
                while b + 1 < len(folded) and folded[b + 1].isalnum():
                    b += 1
                self.pairs[folded[a:b + 1]] += 1
        return self.folded

    def hyphenated(self, left: str, right: str) -> int:
        self._fold()
        return self.pairs[f"{left}-{right}".casefold()]

    def joined(self, word: str) -> int:
        return self._fold().count(word.casefold())


def dehyphenate(text: str, vocabulary: _LazyVocabulary | None = None) -> str:
    """Words split at a line's end joined. "regu-\\nlation" becomes "regulation"; the hyphen stays
    (the line break goes) when it belongs to the word: a letter other than a lower-case one on
    either side ("COVID-\\n19", "mTORC2-\\ndependent", "Hodgkin-\\nHuxley"), a compound already
    ("state-of-the-\\nart"), the hyphenated form more frequent than the joined one in the document
    (`vocabulary`; `text` itself without one), or, with neither in it, a fragment that usually
    starts a compound ("long-\\nterm", COMPOUND_PREFIXES). A soft hyphen always joins."""
    if "\n" not in text:
        return text
    words = vocabulary if vocabulary is not None else _LazyVocabulary(text)
    out: list[str] = []
    done = 0
    for m in _BREAK_RE.finditer(text):
        start = m.start()
        left_start = start
        while left_start > 0 and (text[left_start - 1].isalnum() or text[left_start - 1] in _WORD_JOINERS):
            left_start -= 1
        left, hyphen, right = text[left_start:start], m.group(1), m.group(2)
        if not left or not left[-1].isalnum() or left_start < done:
            continue  # no word before the hyphen ("results -"), or one this loop has joined already
        if hyphen == "\u00ad":
            keep = False
        else:
            fragment = _HYPHEN_RE.split(left)[-1]
            keep = fragment != left or not (fragment[-1].isalpha() and fragment[-1].islower() and right[0].isalpha()
                                            and right[0].islower())
            if not keep:
                prefix = fragment.casefold() in COMPOUND_PREFIXES
                hyphenated = words.hyphenated(fragment, right)
                # Joined unless the document writes it hyphenated more often, or as often (never,
                # say) and the fragment usually starts a compound: a text written without the
                # hyphenated form needs no count of the joined one.
                if hyphenated or prefix:
                    joined = words.joined(fragment + right)
                    keep = hyphenated > joined or (hyphenated == joined and prefix)
        out.append(text[done:start])
        out.append(f"-{right}" if keep else right)
        done = m.end()
    out.append(text[done:])
    return "".join(out)


def _edge_lines(lines: list[str], n: int) -> list[int]:
    """Indexes of the first and last `n` lines with text (each once; a short page's overlap)."""
    found: list[int] = []
    for order in (range(len(lines)), range(len(lines) - 1, -1, -1)):
        taken = 0
        for i in order:
            if taken == n:
                break
            if lines[i].strip():
                found.append(i)
                taken += 1
    return sorted(set(found))


def _key(line: str, fold_numbers: bool) -> str:
    key = _SPACES_RE.sub(" ", line.casefold()).strip()
    if fold_numbers:
        key = _ROMAN_WORD_RE.sub(lambda m: "#" if _ROMAN_RE.fullmatch(m.group()) else m.group(), _NUMBER_RE.sub("#", key))
    return key


def _looks_like_furniture(line: str) -> bool:
    """Short, and not the end of a sentence (a header is a title, a journal, names)."""
    return len(line.split()) <= SHORT_LINE_WORDS and not _SENTENCE_END_RE.search(line.rstrip()[-8:])


def _edge_keys(pages: dict[int, list[str]], edges: dict[int, list[int]], fold_numbers: bool) -> dict[tuple[int, int], tuple[str, bool]]:
    """{(page index, line index): (normalised line, whether it looks like furniture)} for the
    edge lines that could be furniture (not too long, with a letter or digit)."""
    out: dict[tuple[int, int], tuple[str, bool]] = {}
    for index, lines in pages.items():
        for i in edges[index]:
            line = lines[i].strip()
            if len(line) > MAX_FURNITURE_CHARS:
                continue
            key = _key(line, fold_numbers)
            if any(c.isalnum() for c in key):
                out[(index, i)] = (key, _looks_like_furniture(line))
    return out


def _repeated(keys: dict[tuple[int, int], tuple[str, bool]], with_text: list[int]) -> set[str]:
    """Normalised lines that recur at the edges of enough pages (REPEAT_SHARE, MIN_REPEATS*)."""
    where: defaultdict[str, set[int]] = defaultdict(set)
    looks: dict[str, bool] = {}
    for (index, _), (key, furniture_like) in keys.items():
        where[key].add(index)
        looks[key] = looks.get(key, False) or furniture_like
    found: set[str] = set()
    for key, on in where.items():
        if len(on) < (MIN_REPEATS_SHORT if looks[key] else MIN_REPEATS):
            continue
        # The pages it could have been on: those with text, or those of its parity when it is
        # only ever on odd (or even) pages; with MIN_REPEATS pages or more, only those from its
        # first page to its last (a book chapter's running title, a table's repeated heading).
        parities = {i % 2 for i in on}
        lo, hi = (min(on), max(on)) if len(on) >= MIN_REPEATS else (with_text[0], with_text[-1])
        candidates = sum(1 for i in with_text if lo <= i <= hi and (len(parities) == 2 or i % 2 in parities))
        if len(on) >= ceil(REPEAT_SHARE * candidates):
            found.add(key)
    return found


def _number_value(token: str, said_page: bool) -> int | None:
    if token.isdigit():
        return int(token)
    # An upper-case "I" or "IV" alone is a section's number more often than a page's ("Page IV" is a page's).
    if not (token.islower() or said_page) or not _ROMAN_RE.fullmatch(token.lower()):
        return None
    values = [_ROMAN_VALUES[c] for c in token.lower()]
    return sum(-v if i + 1 < len(values) and values[i + 1] > v else v for i, v in enumerate(values))


def _page_numbers(pages: dict[int, list[str]]) -> dict[int, set[int]]:
    """{page index: indexes of its lines that are its page number} (see the module doc)."""
    found: list[tuple[int, int, int, bool]] = []  # (page index, line index, number - page number, explicit)
    for index, lines in pages.items():
        for i in _edge_lines(lines, PAGE_NUMBER_LINES):
            m = _PAGE_NUMBER_RE.fullmatch(lines[i])
            value = _number_value(m.group("n"), bool(m.group("word"))) if m else None
            if m is None or value is None:
                continue
            explicit = bool(m.group("word") or m.group("of") or _DECORATED_RE.search(lines[i]))
            found.append((index, i, value - (index + 1), explicit))
    offsets = Counter(offset for _, offset in {(index, offset) for index, _, offset, _ in found})
    out: defaultdict[int, set[int]] = defaultdict(set)
    for index, i, offset, explicit in found:
        if explicit or offset == 0 or offsets[offset] >= 2:
            out[index].add(i)
    return out
