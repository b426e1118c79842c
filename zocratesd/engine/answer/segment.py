"""Sentences of scientific prose.

A sentence ends at `.`, `!` or `?` (with any closing quotes or brackets, and a numeric reference
glued after the period, "shown.[12]" or "shown.12,13") that is followed by white space and a
sentence start (after "?" and "!" any word; after "." a capital, a digit, an opening quote or bracket before a capital, or a lower-case
word spelled like a gene or a molecule: "mRNA", "p53", "siRNA").

What looks like an end and is not:
- abbreviations: "et al.", "e.g.", "i.e.", "cf.", "vs.", "Fig. 2", "Eq. 3", "Ref. 12", "No. 5",
  "Dr.", "sp." (a closed list: they are the ones scientific prose uses before a capital or a number);
- initials and abbreviated genera: a single capital letter and a period ("J. Smith", "C. difficile",
  "E. coli") and dotted acronyms ("U.S.", "Ph.D.");
- decimals and versions ("2.5", "v1.2"): the period is not followed by white space.
When in doubt we do not split: a sentence too long is only a longer quote, a sentence cut at "C." is
a wrong one ("...after antibiotics allowed C. [5]").

Chinese and Japanese sentences end at "。", "！" or "？" (with any closing brackets), with or
without white space after: those scripts put none between sentences.

Section headings are not sentences: a line that is only a heading ("Introduction", "2.1 Training
details", "RESULTS", "III. METHODS") is a paragraph of its own, and a heading sentence ("Introduction."
before the text it heads, "Abstract:") is left out, so no quote starts with one; a heading that PDF
extraction glued to the sentence after it on one line ("Results Symbiont shuffling increased ...",
"2. Methods We ...") is cut from that sentence (textnorm.glued_heading).

A blank line (a paragraph break) always ends a sentence. Hyphens that PDF extraction left at line
ends ("diffi-\\ncile") are joined. Everything here is precompiled; segmenting a 1,200-character
passage takes tens of microseconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zocratesd.textnorm import glued_heading, is_heading, is_heading_line

# Abbreviations that never end a sentence when a capital or a number follows, as they are written
# (case matters: "No." is "number", "no." ends a sentence).
ABBREVIATIONS = frozenset(
    """
    al cf vs viz Fig Figs fig figs Eq Eqs eq eqs Ref Refs ref refs Tab Tabs tab No Nos
    Vol Vols vol pp p Ch Chap Sec Sect Suppl Dr Drs Prof Mr Mrs Ms St Mt Jr Sr Inc Ltd Co Corp Dept Univ
    approx ca resp sp spp subsp var cv Ed Eds ed eds Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec
    Nat Natl Proc Acad Sci Rev Lett Phys Chem Biol Med J
    """.split()
)

# A candidate end: the punctuation, then closing quotes/brackets or a glued reference, then space.
_END = re.compile(r"""(\.\.\.|…|[.!?])((?:["'”’)\]]|\[\d+(?:[,–-]\s?\d+)*\]|(?<=[a-z)\]]\.)\d+(?:[,–-]\d+)*)*)(\s+)""")
# What may start the next sentence.
_START = re.compile(r"""["'“‘(\[]?(?:[A-Z0-9]|[a-z]{1,3}[A-Z0-9])""")
# The word before the period (letters and inner periods: "e.g", "U.S", "al").
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*)$")
_DOTTED = re.compile(r"^(?:[A-Za-z]\.)+[A-Za-z]$")  # U.S, e.g, Ph.D (the last period is the end candidate)
_CJK_END = re.compile(r"[。！？]+[」』”’）】〕]*\s*")
_PARAGRAPH = re.compile(r"\n\s*\n")
_HYPHEN_BREAK = re.compile(r"(\w)-\n(\w)")

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Sentence:
    text: str
    start: int  # offsets in the normalised text (white space collapsed)
    end: int


def normalise(text: str) -> str:
    """White space collapsed, line-end hyphens joined; paragraph breaks kept as "\\n\\n"; a
    line that is only a section heading made a paragraph of its own."""
    text = _HYPHEN_BREAK.sub(r"\1\2", text)
    if "\n" in text:
        text = "\n".join(f"\n\n{line}\n\n" if is_heading_line(line) else line for line in text.split("\n"))
    paragraphs = [_SPACE.sub(" ", p).strip() for p in _PARAGRAPH.split(text)]
    return "\n\n".join(p for p in paragraphs if p)


def _is_abbreviation(before: str, punct: str) -> bool:
    if punct != ".":
        return False
    m = _WORD_BEFORE.search(before)
    if m is None:
        return False
    word = m.group(1)
    if len(word) == 1 and word.isupper():
        return True  # an initial or an abbreviated genus: "J. Smith", "C. difficile"
    if _DOTTED.match(word):
        return True  # "e.g.", "i.e.", "U.S.", "Ph.D."
    return word in ABBREVIATIONS or word.rsplit(".", 1)[-1] in ABBREVIATIONS


def _split_paragraph(p: str, offset: int) -> list[Sentence]:
    out: list[Sentence] = []
    start = 0
    for m in _CJK_END.finditer(p):
        out += _split_latin(p[start: m.end()], offset + start)
        start = m.end()
    return out + _split_latin(p[start:], offset + start) if start else _split_latin(p, offset)


def _split_latin(p: str, offset: int) -> list[Sentence]:
    out: list[Sentence] = []
    start = 0
    for m in _END.finditer(p):
        end = m.start(3)  # the sentence keeps its closing quotes and references
        after = m.end()
        if after >= len(p) or (m.group(1) not in "?!" and not _START.match(p, after)):
            continue  # after "?" or "!" any word starts a sentence ("what is rag? how does hyde work?")
        if _is_abbreviation(p[max(0, m.start(1) - 24): m.start(1)], m.group(1)):  # the word before, not the paragraph
            continue
        piece = p[start:end].strip()
        if piece:
            out.append(Sentence(piece, offset + start, offset + end))
        start = after
    piece = p[start:].strip()
    if piece:
        out.append(Sentence(piece, offset + start, offset + len(p)))
    return out


def sentences(text: str) -> list[Sentence]:
    """The sentences of `text` (normalised first: see `normalise`), in order; headings left out."""
    norm = normalise(text)
    out: list[Sentence] = []
    offset = 0
    for p in norm.split("\n\n"):
        out += [s for s in map(_without_heading, _split_paragraph(p, offset)) if not is_heading(s.text)]
        offset += len(p) + 2
    return out


def _without_heading(s: Sentence) -> Sentence:
    cut = glued_heading(s.text)
    return Sentence(s.text[cut:], s.start + cut, s.end) if cut else s


def split_sentences(text: str) -> list[str]:
    return [s.text for s in sentences(text)]


def first_sentence(text: str) -> str:
    """The first sentence of `text` ("" for empty text)."""
    found = sentences(text)
    return found[0].text if found else ""
