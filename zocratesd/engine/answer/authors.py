"""Questions that name authors: "What did Strohle and Kuhn find?", "Müller et al.", "Lewis 2020".

A word of a part is an author's name when it is a word of the name of a retrieved passage's
creator and no retrieved title has it ("Bloom filters" stays a topic when a paper's title says it).
Names meet as a reader types them: folded as the index folds them ("Strohle" meets "Ströhle") and
German transliterations undone on both sides ("Stroehle", "Kuehn", "Mueller" meet "Ströhle",
"Kühn", "Müller"); a hyphenated name is its words ("Garcia-Marquez").

Such a part asks about those authors' papers: its evidence is the passages of the items whose
creators carry the most of the named authors (both of "Strohle and Kuhn" when a paper has both,
either one's papers when none has), and of the year the question names, when one does
("Lewis 2020"). What the part says besides the names is its topic, matched as any part's; a part
that is only names ("What did Strohle and Kuhn find?") quotes what the papers report
(evidence.py `findings`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from zocratesd.engine.answer.question import Part, stem
from zocratesd.textnorm import fold, untransliterate

_NAME_WORD = re.compile(r"[^\W\d_]+")
# Title stems are passed marked with this prefix beside the text's (a title word is a topic even
# in the author's own paper: "Bloom filters" by Bloom).
TITLE_MARK = "title:"
# A year a question names: four digits from 1800 to 2099.
_YEAR = re.compile(r"^(?:18|19|20)\d\d$")


def name_key(word: str) -> str:
    """A name's word as it is compared: folded, transliteration undone, stemmed as terms are."""
    return stem(untransliterate(fold(word)))


def name_keys(creators: Iterable[object]) -> frozenset[str]:
    return frozenset(name_key(w) for c in creators for w in _NAME_WORD.findall(str(c)) if len(w) > 1)


@dataclass(frozen=True)
class AuthorFocus:
    """A part with its author names and year taken out, and what they select."""

    part: Part  # the topic: the part's other terms (none for "What did Strohle and Kuhn find?")
    names: frozenset[str]  # the named authors' keys
    year: int | None


def author_focus(part: Part, creators: Sequence[Iterable[object]], texts: Sequence[frozenset[str]]) -> AuthorFocus | None:
    """The part's authors, given the creators and the title and text stems of the retrieved
    passages; None when the part names no author of them. A word is a name only when no title has
    it, when it is capitalised inside the question or no text of someone else's has it ("How do
    young mice ..." is about mice, whoever Young is), and when it is not a word that frames a claim
    ("long", "new": GENERIC_WORDS)."""
    keys_of = [name_keys(c) for c in creators]
    known = frozenset().union(*keys_of) if keys_of else frozenset()
    names: dict[str, str] = {}
    for t in part.terms:
        key = name_key(t.surface)
        if t.surface.isdigit() or t.weight < 1.0 or key not in known:
            continue
        # A capitalised word inside the question ("What did Young find?") is a name even where
        # others' texts use the word; one written in lower case or first is only when they do not.
        if any(_in_title(t.stem, text) or (not t.anchor and t.stem in text and key not in mine)
               for mine, text in zip(keys_of, texts, strict=True)):
            continue
        names[t.stem] = key
    if not names:
        return None
    years = [int(t.surface) for t in part.terms if _YEAR.match(t.surface)]
    topic = tuple(t for t in part.terms if t.stem not in names and not _YEAR.match(t.surface))
    dropped = set(names) | {t.stem for t in part.terms if _YEAR.match(t.surface)}
    keys = frozenset(names.values())
    rest = replace(part, terms=topic, required=frozenset(part.required - dropped), authors=keys)
    return AuthorFocus(rest, keys, years[0] if len(years) == 1 else None)


def _in_title(stem: str, text: frozenset[str]) -> bool:
    return (TITLE_MARK + stem) in text


def by_authors(focus: AuthorFocus, creators: Sequence[Iterable[object]], years: Sequence[object]) -> list[int]:
    """The indexes of the passages `focus` selects: the most named authors, then the year."""
    counts = [len(focus.names & name_keys(c)) for c in creators]
    best = max(counts, default=0)
    if not best:
        return []
    chosen = [i for i, n in enumerate(counts) if n == best]
    if focus.year is not None:  # "Lewis 2020": that year's papers only (none: nothing answers)
        chosen = [i for i in chosen if years[i] == focus.year]
    return chosen
