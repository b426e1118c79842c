"""What `search_library` retrieves from: passages of the user's library, within a scope.

`Retriever` is the interface the search pipeline (engine/research.py, engine/tools.py) calls.
`Library` (library/service.py: Zotero's data + a full-text index) is the real one;
`InMemoryRetriever` is a complete BM25 retriever over passages held in memory, used by tests and by
a daemon that has no library index yet. The types live here, where passages are made: the library
knows nothing of the engine (or ADK), and the engine imports them from here.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final, Literal, Protocol, TypedDict, cast

import msgspec

from zocratesd.textnorm import fold, name_variants

Mode = Literal["papers", "collection", "library"]

# BM25 constants as in Robertson & Zaragoza (2009), the defaults of Lucene and SQLite FTS5.
BM25_K1 = 1.2
BM25_B = 0.75
# How many passages one search returns to the coordinator: enough to cite several papers, few
# enough that the tool result stays well inside a small local model's context.
DEFAULT_TOP_K = 6

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
_NAME_RE = re.compile(r"[^\W\d_]+")
# Words that carry no topic; dropping them keeps "what is X" from matching every passage with "is".
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i in is it its me my of on or our "
    "that the their them there these this those to was what when where which who why will with you your "
    "about into than then they we tell explain describe".split()
)


def tokens(text: str) -> list[str]:
    """The words of `text` a search matches: folded as the library index folds them (case and
    diacritics: "Lübeck" is "lubeck"), stop words left out."""
    return [t for t in (fold(m.group(0)) for m in _TOKEN_RE.finditer(text)) if t not in STOPWORDS]


# A `metadata` passage's text is a header (creators, year, tags: searchable, not prose), this
# marker, then the abstract: the answerer quotes only what follows it (engine/answer/evidence.py).
# A paragraph break, so any text tool sees the two apart; the header itself has none.
METADATA_BREAK = "\n\n"


# The `kind` (and `library`) of a passage that is a work found beyond the library (OpenAlex, arXiv,
# Crossref: engine/online_tool.py): its text is its abstract, its link its DOI.
ONLINE_KIND: Final = "online"


class Passage(msgspec.Struct, frozen=True):
    """A piece of an item's text, with the provenance an answer cites."""

    item_key: str
    title: str
    text: str
    creators: tuple[str, ...] = ()
    year: int | None = None
    attachment_key: str | None = None
    page: int | None = None
    collections: tuple[str, ...] = ()
    # Where the text is (library index): "metadata" | "fulltext" | "note" | "annotation"; the
    # note's or annotation's own key; the page label a reader sees (else the page number); the
    # library ("user" or "groups/<groupID>"); a zotero:// link that opens it.
    kind: str = "fulltext"
    source_key: str | None = None
    page_label: str | None = None
    library: str = "user"
    link: str | None = None
    citation_key: str | None = None  # the item's key for LaTeX and Markdown (citations/keys.py)

    def citation(self) -> str:
        """'Lewis et al. (2020). Title, p. 3'"""
        who = ""
        if self.creators:
            who = self.creators[0] + (" et al." if len(self.creators) > 1 else "")
        when = f" ({self.year})" if self.year else ""
        shown = self.page_label or (str(self.page) if self.page else "")
        page = f", p. {shown}" if shown else ""
        lead = f"{who}{when}. " if who or when else ""
        return f"{lead}{self.title}{page}"


class Scope(msgspec.Struct, frozen=True):
    """Where to search (spec 2.3 `active_mode`): selected items, one collection, or everything."""

    mode: Mode = "library"
    item_keys: tuple[str, ...] = ()
    collection: str | None = None
    library: str | None = None  # "user" or "groups/<groupID>": only that library; None: every library

    def admits(self, p: Passage) -> bool:
        if self.library is not None and p.library != self.library:
            return False
        if self.mode == "papers":
            return p.item_key in self.item_keys
        if self.mode == "collection":
            return self.collection is not None and self.collection in p.collections
        return True


class PassageJson(TypedDict, total=False):
    """A passage as JSON: as `search_library` shows it to the model (numbered `n`, with its
    `citation`; `focal` for the user's selected text) and the answerer reads it back from the
    tool's response, or as `Hit.as_json` gives it (with `collections`)."""

    n: int
    item_key: str
    attachment_key: str | None
    title: str
    creators: list[str]
    year: int | None
    page: int | None
    page_label: str | None
    kind: str
    source_key: str | None
    library: str
    link: str | None
    citation_key: str | None
    collections: list[str]
    citation: str
    text: str
    score: float | None
    focal: bool


class Hit(msgspec.Struct, frozen=True):
    passage: Passage
    score: float

    def as_json(self) -> PassageJson:
        d = cast(PassageJson, msgspec.structs.asdict(self.passage))
        d["creators"] = list(self.passage.creators)
        d["collections"] = list(self.passage.collections)
        d["score"] = round(self.score, 4)
        return d


class Retriever(Protocol):
    async def search(self, query: str, scope: Scope, top_k: int = DEFAULT_TOP_K) -> list[Hit]:
        """Best passages for `query` within `scope`, best first; [] when nothing matches."""
        ...


def _header(p: Passage) -> str:
    """What the library index's metadata header makes searchable besides the text: the creators
    (a German name both ways: textnorm.name_variants) and the year, so "What did Kuehn find?" or
    "Lewis 2020" find a paper here too."""
    names = " ".join(p.creators)
    variants = " ".join(v for w in _NAME_RE.findall(names) for v in name_variants(w))
    return f"{names} {variants} {p.year or ''}"


class InMemoryRetriever:
    """BM25 over passages kept in memory. Scores with the corpus statistics of the whole library,
    then filters by scope, so a passage scores the same whatever the scope."""

    def __init__(self, passages: list[Passage] | None = None) -> None:
        self.passages = [] if passages is None else passages
        self._index()

    def add(self, passages: Iterable[Passage]) -> None:
        self.passages.extend(passages)
        self._index()

    def _index(self) -> None:
        self._tf = [Counter(tokens(f"{p.title} {p.text} {_header(p)}")) for p in self.passages]
        self._len = [sum(tf.values()) for tf in self._tf]
        self._avg = (sum(self._len) / len(self._len)) if self._len else 0.0
        df: Counter[str] = Counter()
        for tf in self._tf:
            df.update(tf.keys())
        n = len(self.passages)
        self._idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def status(self) -> dict[str, Any]:
        """The facts "found nothing" needs (engine/answer/causes.py), in the shape of the library's
        status: passages held in memory are a library that is always ready; none is no library."""
        items = len({p.item_key for p in self.passages})
        if not items:
            return {"state": "disabled", "items_indexed": 0, "percent": 0.0,
                    "message": "no Zotero library is configured for this daemon"}
        return {"state": "ready", "items_indexed": items, "percent": 100.0, "message": None}

    def scope_size(self, scope: Scope) -> int:
        """How many items the scope holds."""
        return len({p.item_key for p in self.passages if scope.admits(p)})

    async def search(self, query: str, scope: Scope, top_k: int = DEFAULT_TOP_K) -> list[Hit]:
        terms = set(tokens(query))
        hits: list[Hit] = []
        for p, tf, length in zip(self.passages, self._tf, self._len, strict=True):
            if not scope.admits(p):
                continue
            score = 0.0
            for t in terms:
                f = tf.get(t)
                if f:
                    norm = f * (BM25_K1 + 1) / (f + BM25_K1 * (1 - BM25_B + BM25_B * length / (self._avg or 1)))
                    score += self._idf.get(t, 0.0) * norm
            if score > 0:
                hits.append(Hit(p, score))
        hits.sort(key=lambda h: (-h.score, h.passage.item_key, h.passage.page or 0))
        return hits[:top_k]
