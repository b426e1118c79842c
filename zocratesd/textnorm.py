"""Words as the library index sees them, for everything that matches words outside SQLite.

The index (library/index.py) lets FTS5 fold case and diacritics (`unicode61 remove_diacritics 2`:
"Lübeck" finds "Lubeck") and indexes Chinese, Japanese and Korean text as character bigrams
(FTS5's word tokenizer sees a run of CJK characters as one word; Zotero 10 indexes CJK with
bigrams too). The offline answerer (engine/answer/) must match a question's words to a passage's
the same way, or it finds nothing in the passages the index retrieved: both take these helpers
from here, so the two cannot drift apart.

Section headings ("Introduction", "2.1 Training Details") are known to both the same way: the
index keeps a heading line apart from the text it heads (library/fulltext.py), and the answerer
never quotes one (engine/answer/segment.py), nor one that PDF extraction glued to the sentence
after it ("Results Symbiont shuffling increased ...": `glued_heading`).

The patterns are compiled when first used, not at import: this module is imported before the
daemon's first reply (core.context -> library.retrieval), and compiling them all there was a
visible share of it (the CJK classes and the section names' alternations, case-folded, are the
costly ones; bench/PROFILE.md section 16).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable


def _lazy(pattern: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """A pattern compiled at its first use (then kept)."""
    return functools.cache(lambda: re.compile(pattern, flags))

# CJK text: Han (with extension A and compatibility ideographs), kana, Hangul syllables and jamo,
# bopomofo. A character class body, for building patterns.
CJK_CHARS = "\u3040-\u30ff\u3100-\u312f\u3131-\u318e\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
cjk_run_re = _lazy(f"[{CJK_CHARS}]+")  # a run of CJK characters
_NON_ASCII = _lazy(f"[^\\x00-\\x7f{CJK_CHARS}]")


def cjk_grams(run: str) -> list[str]:
    """One run of CJK characters as character bigrams ("机器学习" -> 机器, 器学, 学习); a lone
    character stays itself."""
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def cjk_bigrams(text: str) -> str:
    """The CJK runs of `text` as space-separated character bigrams ("" when there are none)."""
    if text.isascii():  # most of a library's text: no scan needed
        return ""
    return " ".join(g for run in cjk_run_re().findall(text) for g in cjk_grams(run))


@functools.lru_cache(maxsize=4096)
def _fold_char(ch: str) -> str:
    # Compatibility decomposition ("ﬁ" -> "fi", full-width "Ａ" -> "A"), marks dropped ("ü" -> "u").
    # CJK characters never get here: NFKD would split a Hangul syllable into its jamo.
    base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
    return base or ch


def fold(text: str) -> str:
    """`text` case- and accent-folded, as FTS5's `unicode61 remove_diacritics 2` compares words
    ("Lübeck" -> "lubeck", "Ångström" -> "angstrom"); CJK text is left as it is. For matching
    only: the result may differ in length from `text`, so never use it for display or offsets."""
    if not text.isascii():
        text = _NON_ASCII().sub(lambda m: _fold_char(m.group(0)), text)
    return text.casefold()


# German names are typed either way: "Ströhle" or "Stroehle", "Kühn" or "Kuehn". "ae", "oe",
# "ue" inside a word stand for ä, ö, ü; at a word's end they are English ("Blue", "Poe").
_UMLAUT_PAIR = _lazy(r"(?<=[a-z])([aou])e(?=[a-z])")
_UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue", "Ä": "Ae", "Ö": "Oe", "Ü": "Ue"})


def untransliterate(folded: str) -> str:
    """A folded word with German transliterations undone ("stroehle" -> "strohle"), so "Stroehle"
    and "Ströhle" (folded "strohle") compare equal; for names, where a false meeting is rare."""
    return _UMLAUT_PAIR().sub(r"\1", folded)


def name_variants(word: str) -> list[str]:
    """The other spellings of a word of a person's name, folded: "Ströhle" -> ["stroehle"],
    "Stroehle" -> ["strohle"]. The index adds them to an item's searchable header (FTS5 folds "ö"
    to "o", never to "oe"), so a name is found however it was typed, there or in the question."""
    out = []
    if word != (tr := word.translate(_UMLAUTS)):
        out.append(tr.casefold())
    if (un := untransliterate(fold(word))) != fold(word):
        out.append(un)
    return out


# The section names papers use, and a section number before one ("2.", "2.1", "III.", "A.").
SECTION_NAMES = (
    "abstract|introduction|background|related work|related works|prior work|preliminaries|method|methods|methodology|"
    "materials and methods|methods and materials|approach|model|models|data|dataset|datasets|experiments|experiment|"
    "experimental setup|experimental results|setup|evaluation|results|results and discussion|discussion|analysis|"
    "conclusion|conclusions|conclusions and future work|summary|limitations|future work|acknowledgements|"
    "acknowledgments|references|bibliography|appendix|supplementary material|keywords|highlights|significance"
)
_NUMBER = r"(?:(?:\d{1,2}(?:\.\d{1,2})*|[IVX]{1,5}|[A-H])\.?\s+)"
_SECTION_NUMBER = r"(?:\d{1,2}(?:\.\d{1,2})*|[IVX]{1,5})\.?"
# A sentence that is only a heading: "Introduction.", "2 Methods:", "RESULTS"; or only a section's
# number, which sentence splitting cut from a heading glued to its text ("2." | "Methods We ...").
_HEADING_SENTENCE = _lazy(rf"^(?:{_NUMBER}?(?:{SECTION_NAMES})\s*[.:]?|{_SECTION_NUMBER})$", re.I)
# A line that is only a heading: a section name, or a numbered short line in title case ("2.1
# Training Details"); never a line that ends a sentence or goes on in lower case.
_HEADING_LINE = _lazy(rf"^\s*(?:{_NUMBER}?(?:{SECTION_NAMES})\s*[.:]?|{_NUMBER}[A-Z][\w-]*(?:\s+[\w-]+){{0,6}})\s*$", re.I)
# A numbered title-case line must be title case: its long words capitalised (else it is a wrapped
# sentence that starts with a number: "3 of the 12 patients\nrelapsed").
_LONG_LOWER_WORD = _lazy(r"(?<![\w-])[a-z][a-z]{3,}")
# A section name (numbered or not) glued to the sentence it heads, as Zotero's PDF worker extracts
# a heading that shares a line with its text: "Results Symbiont shuffling ...", "2. Methods We
# ...". What follows must start a sentence (a capital and a lower-case letter, or "A"/"I" alone),
# so a sentence that starts with such a word stays whole ("Results were mixed.", "Methods for X
# differ", "Discussion of ..."); only the heading part ignores case ("RESULTS The ...").
# Unnumbered, only the names a paper's own sections have, not words that also begin names in
# prose ("Model United Nations", "Data Science Institute researchers found ...").
GLUED_NAMES = (
    "abstract|introduction|background|related work|related works|preliminaries|methods|methodology|materials and methods|"
    "methods and materials|experimental setup|experimental results|results|results and discussion|discussion|"
    "conclusion|conclusions|conclusions and future work|limitations|future work|acknowledgements|acknowledgments|"
    "keywords|highlights|significance"
)
_GLUED_HEADING = _lazy(rf"(?i:{_NUMBER}(?:{SECTION_NAMES})|(?:{GLUED_NAMES}))[.:]?\s+(?=[A-Z][a-z]|[AI]\s)")
# Structured abstracts glue several: "Abstract Background Corals ...".
MAX_GLUED_HEADINGS = 3


# A heading line is short: longer lines are prose, and are not matched at all (the indexer asks
# about every line of every page).
MAX_HEADING_CHARS = 72


def is_heading_line(line: str) -> bool:
    if len(line) > MAX_HEADING_CHARS:
        return False
    first = next((c for c in line if c.isalpha()), "")
    if not first.isupper():  # "model" alone on a line is a wrapped sentence's word
        return False
    if _HEADING_LINE().match(line) is None:
        return False
    if _HEADING_SENTENCE().match(line.strip()):
        return True
    return not _LONG_LOWER_WORD().search(line)


def is_heading(sentence: str) -> bool:
    """A section heading ("Introduction.", "2.1 Training Details"), not a sentence of prose."""
    return bool(_HEADING_SENTENCE().match(sentence)) or ("." not in sentence[-1:] and is_heading_line(sentence))


def glued_heading(sentence: str) -> int:
    """The length of the section heading(s) glued before `sentence`'s text ("Results Symbiont
    shuffling ..." -> 8, "2. Methods We ..." -> 11), 0 when it starts with its own words."""
    cut = 0
    for _ in range(MAX_GLUED_HEADINGS):
        if not sentence[cut : cut + 1].isupper() and not sentence[cut : cut + 1].isdigit():
            break  # a heading is capitalised ("results Symbiont" is not one)
        m = _GLUED_HEADING().match(sentence, cut)
        if m is None:
            break
        cut = m.end()
    return cut
