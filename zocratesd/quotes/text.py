"""An item's text as a quote is checked against it: its pages in order, and the same text as
bare words, so that a quote matches however the PDF's extraction or the model wrote it.

A quote and a page are compared as folded words (textnorm.fold: case, accents, ligatures "ﬁ" ->
"fi", full-width forms) with every mark between them dropped: whitespace and line breaks,
curly or straight quotes, dashes, and a word hyphenated at a line's end ("retrie-\\nval" and
"retrieval" are the same letters). `letters` is that text with no separators at all, for the
exact test; `words` keeps the word boundaries, for aligning a quote that differs in a few words.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Final

from zocratesd.textnorm import fold

# A word as compared: letters and digits of any script (after folding).
_WORD_RE: Final = re.compile(r"\w+")
# A word broken at a line's end by a hyphen ("retrie-\nval", or pasted as "retrie- val"): joined.
_LINE_HYPHEN_RE: Final = re.compile(r"(?<=[a-z])[-\u00ad\u2010]\s*\n\s*(?=[a-z])|(?<=[a-z])[-\u2010] (?=[a-z]{2})|\u00ad")


def words(text: str) -> list[str]:
    """`text`'s words, folded, a word hyphenated at a line's end joined."""
    return _WORD_RE.findall(fold(_LINE_HYPHEN_RE.sub("", text)).replace("_", " "))


def letters(text: str) -> str:
    return "".join(words(text))


@dataclass(frozen=True, slots=True)
class Page:
    """One page of an item's text (or its abstract, a note, an annotation: `page` None)."""

    text: str
    page: int | None  # the PDF's page number (1-based), None for text with no page
    label: str | None  # the label a reader sees ("127", "xi"), else None
    attachment_key: str | None
    kind: str = "fulltext"  # fulltext | metadata | note | annotation

    @property
    def cited(self) -> str | None:
        """The page as a citation names it: its label, else its number."""
        return self.label or (str(self.page) if self.page is not None else None)


@dataclass
class ItemText:
    """All the text the library holds of one item, with what is missing from it."""

    item_key: str
    library: str
    title: str
    pages: list[Page]
    # Why the text is partial ("only the abstract", "pages 11-442 missing"), None when it is whole.
    partial: str | None = None
    citation_key: str | None = None  # the item's key for LaTeX and Markdown (citations/keys.py)
    _letters: str | None = field(default=None, repr=False)
    _starts: list[int] = field(default_factory=list, repr=False)
    _page_words: list[list[str]] | None = field(default=None, repr=False)
    _page_sets: list[frozenset[str]] | None = field(default=None, repr=False)

    def _build(self) -> str:
        if self._letters is None:
            parts, starts, at = [], [], 0
            for p in self.pages:
                s = letters(p.text)
                starts.append(at)
                parts.append(s)
                at += len(s)
            self._letters, self._starts = "".join(parts), starts
        return self._letters

    def find(self, quote: str) -> Page | None:
        """The page where `quote` starts, when the item's text has its letters exactly."""
        found = self.find_from(quote, 0)
        return found[0] if found is not None else None

    def find_from(self, quote: str, start: int) -> tuple[Page, int] | None:
        """The page where `quote` is first found at or after `start` (a place in the item's
        letters), and the place just after it."""
        want = letters(quote)
        if not want:
            return None
        at = self._build().find(want, start)
        if at < 0:
            return None
        return self.pages[bisect.bisect_right(self._starts, at) - 1], at + len(want)

    def page_words(self) -> list[list[str]]:
        if self._page_words is None:
            self._page_words = [words(p.text) for p in self.pages]
        return self._page_words

    def candidates(self, want: list[str], share: float) -> list[tuple[Page, list[str]]]:
        """The pages (with their words) that have at least `share` of the distinct words of
        `want`: where aligning `want` can succeed at all (a book has hundreds of pages)."""
        if self._page_sets is None:
            self._page_sets = [frozenset(ws) for ws in self.page_words()]
        distinct = set(want)
        need = share * len(distinct)
        return [(page, ws) for page, ws, have in zip(self.pages, self.page_words(), self._page_sets, strict=True)
                if len(distinct & have) >= need]

    @property
    def has_fulltext(self) -> bool:
        return any(p.kind == "fulltext" for p in self.pages)
