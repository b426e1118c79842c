"""Where a quote that is not word for word sits in a page: its words aligned with the page's.

A quote as a person or a model writes it from memory differs from the page in a few words
("shows" for "showed", a word left out, a ligature or hyphen the PDF kept). The best place is
found around the longest run of words both share, then scored there alone as difflib's ratio
(2 x matched words / both lengths): 1.0 is word for word, NEAR_RATIO and up is the same sentence
with a few words changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Final

# A quote whose words align this well with a place in the page is that place, misquoted a
# little: two words changed in a twenty-word sentence score 0.9, a different sentence that
# shares its topic's words rarely passes 0.6.
NEAR_RATIO: Final = 0.8
# A page shares at least this share of a near quote's distinct words (a quote with a fifth of its
# words changed shares four fifths): pages below it are not aligned at all.
CANDIDATE_SHARE: Final = 0.6
# Words searched on either side of the longest shared run: the rest of the quote lies there.
SLACK: Final = 1.5


@dataclass(frozen=True, slots=True)
class Aligned:
    ratio: float
    start: int  # the matched span in the page's words
    end: int


def align(quote: list[str], page: list[str]) -> Aligned | None:
    """The place in `page` most like `quote` (word lists, as text.words gives), None when they
    share no word."""
    if not quote or not page:
        return None
    sm = SequenceMatcher(None, quote, page, autojunk=False)
    longest = sm.find_longest_match(0, len(quote), 0, len(page))
    if longest.size == 0:
        return None
    reach = int(len(quote) * SLACK) + 1
    lo = max(0, longest.b - longest.a - reach)
    hi = min(len(page), longest.b + (len(quote) - longest.a) + reach)
    local = SequenceMatcher(None, quote, page[lo:hi], autojunk=False)
    blocks = [b for b in local.get_matching_blocks() if b.size]
    if not blocks:
        return None
    start, end = blocks[0].b, blocks[-1].b + blocks[-1].size
    matched = sum(b.size for b in blocks)
    return Aligned(2 * matched / (len(quote) + (end - start)), lo + start, lo + end)
