"""Words as the library index sees them, for everything that matches words outside SQLite.

The index (library/index.py) lets FTS5 fold case and diacritics (`unicode61 remove_diacritics 2`:
"Lübeck" finds "Lubeck") and indexes Chinese, Japanese and Korean text as character bigrams
(FTS5's word tokenizer sees a run of CJK characters as one word; Zotero 10 indexes CJK with
bigrams too). The offline answerer (engine/answer/) must match a question's words to a passage's
the same way, or it finds nothing in the passages the index retrieved: both take these helpers
from here, so the two cannot drift apart.
"""

from __future__ import annotations

import functools
import re
import unicodedata

# CJK text: Han (with extension A and compatibility ideographs), kana, Hangul syllables and jamo,
# bopomofo. A character class body, for building patterns.
CJK_CHARS = "\u3040-\u30ff\u3100-\u312f\u3131-\u318e\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
CJK_RUN_RE = re.compile(f"[{CJK_CHARS}]+")
_NON_ASCII = re.compile(f"[^\\x00-\\x7f{CJK_CHARS}]")


def cjk_grams(run: str) -> list[str]:
    """One run of CJK characters as character bigrams ("机器学习" -> 机器, 器学, 学习); a lone
    character stays itself."""
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def cjk_bigrams(text: str) -> str:
    """The CJK runs of `text` as space-separated character bigrams ("" when there are none)."""
    return " ".join(g for run in CJK_RUN_RE.findall(text) for g in cjk_grams(run))


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
        text = _NON_ASCII.sub(lambda m: _fold_char(m.group(0)), text)
    return text.casefold()
