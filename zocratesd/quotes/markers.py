"""An answer's citation markers, in every citation style the daemon asks answers for
(engine/answer/sources.py, engine/agent.py), and the item each one names.

- numbered: "[2]", "[2, p. 4]", "[1; 3]", "[1, 2]";
- author-year: "(Lewis et al., 2020, p. 4)", "(Lewis & Perez, 2020; Karpukhin, 2020)", and the
  narrative form a model writes as often: "Lewis et al. (2020) show ...", "Lewis and Perez (2020,
  p. 128) found ...";
- Pandoc: "[@lewis2020rag]", "[@lewis2020rag, p. 4]", "[see @a, pp. 4-5; @b]".

What a marker names:
- a number: the answer's `# Cited Sources` entry n ("[n] ... (zotero://select/.../KEY)"), else
  the n-th passage of the turn's last search (what `search_library` tells the model to cite by);
- a Pandoc key: the list's entry that starts with it ("[n] [@key] ..."), else the item whose
  passages carry that citation key (the model is shown each passage's `citation_key`);
- an author-year marker: the item whose first author's family name and year are the marker's
  (family names are the last word of the names as Zotero keeps them, as the answerer writes them;
  known from the passages' creators and year, else from the list entry's "Author & Author (Year).");
  an item with no author goes by the first words of its title, as the answerer writes it.

A key or an author-year marker names an item, not a passage: it is checked as the item's list
entry n when the list has it, else under the number of the item's first passage of the search,
and a marker with no page claims none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from zocratesd.limits import ITEM_URI
from zocratesd.quotes.text import words

_CITED_HEADER_RE: Final = re.compile(r"^#+\s*Cited Sources\s*$", re.M | re.I)
_ENTRY_RE: Final = re.compile(r"^\s*\[(\d+)\]\s+(.*)$", re.M)
_ENTRY_LINK_RE: Final = re.compile(rf"\(({ITEM_URI})\)")
_ENTRY_PAGES_RE: Final = re.compile(r"\bpp?\.\s*([^()]+?)\.?\s*(?:\(|$)")
# A Pandoc-style entry's key ("[1] [@key] Author (2020). ..."), and an entry's "Author & Author (2020)."
_ENTRY_KEY_RE: Final = re.compile(r"^\[@([^\]\s]+)\]\s*")
_ENTRY_WHO_RE: Final = re.compile(r"^(.*?)\s*\((\d{4})[a-z]?|^(.*?)\s*\(n\.\s?d\.\)")

# "[1]", "[1, 2]", "[2, p. 4]", "[2, pp. 4-5]", "[1; 3]"
_NUMBERED: Final = r"\[(?P<numbers>\d{1,3}(?:\s*[,;]\s*\d{1,3})*)(?:\s*,\s*pp?\.\s*(?P<page>[^\]\n]{1,20}))?\]"
# "[@key]", "[see @key, p. 4; -@other]": Pandoc's bracketed citations.
_PANDOC: Final = r"\[(?P<pandoc>[^\[\]\n]{0,200}?@[^\[\]\n]{1,400})\]"
# "(Lewis et al., 2020, p. 4)": a parenthesis, a citation when a part of it reads "Names, Year".
_PAREN: Final = r"\((?P<paren>[^()\n]{4,400})\)"
# "Lewis et al. (2020)", "Lewis and Perez (2020, p. 4)", "Lewis, Perez & Piktus (n.d.)": capitalised
# names, then a parenthesis that starts with the year. A leading capitalised word that is no name
# ("However, Lewis (2020)") is dropped when the names do not resolve (narrative_refs).
_NAME: Final = r"[A-Z\u00c0-\u00de][\w'\u2019-]+"
_NARRATIVE: Final = (rf"\b(?P<narr>{_NAME}(?:(?:\s*,\s*(?:(?:and|&)\s+)?|\s+(?:and|&)\s+){_NAME})*(?:\s+et\s+al\b\.?)?)"
                     r"\s+\((?:(?P<narr_year>(?:1[5-9]|20)\d\d)[a-z]?|n\.\s?d\.)(?:\s*,\s*pp?\.\s*(?P<narr_page>[^()\n]{1,20}?))?\)")
MARKER_RE: Final = re.compile(f"{_NUMBERED}|{_PANDOC}|{_NARRATIVE}|{_PAREN}")
# A Pandoc citation key: Pandoc's own rule (a letter, digit or _, then those and internal punctuation).
_PANDOC_CITE_RE: Final = re.compile(r"-?@\{?(?P<key>\w(?:\w|[:.#$%&+?<>~/-](?=\w))*)\}?(?P<rest>.*)$", re.S)
# A locator after a key: ", p. 4", ", pp. 4-5", ", 4".
_LOCATOR_RE: Final = re.compile(r"^\s*,\s*(?:(?:pp?\.|pages?)\s*(?P<page>[^;]{1,20}?)|(?P<bare>\d[\w\u2013-]{0,19}))\s*\.?\s*$")
_AUTHOR_YEAR_RE: Final = re.compile(
    r"^(?P<names>.*?\w.*?),?\s+(?P<year>(?:1[5-9]|20)\d\d)[a-z]?(?:\s*,\s*pp?\.\s*(?P<page>[^;]{1,20}?))?\s*\.?$"
    r"|^(?P<nd_names>.*?\w.*?),?\s+n\.\s?d\.(?:\s*,\s*pp?\.\s*(?P<nd_page>[^;]{1,20}?))?\s*\.?$", re.S)
_ET_AL_RE: Final = re.compile(r"\bet\s+al\b\.?", re.I)
_NAME_SEP_RE: Final = re.compile(r"\s*(?:&|\band\b|,)\s*")


@dataclass(frozen=True, slots=True)
class Cited:
    """What a citation names: an item, and the pages the answer gives for it."""

    n: int
    item_key: str
    library: str = "user"
    pages: tuple[str, ...] = ()  # as cited: labels, else page numbers


@dataclass(frozen=True, slots=True)
class Ref:
    """One citation of a marker: a number, a Pandoc key, or author-year names and a year; the page
    it gives; and how the answer wrote it (`label`, without the page) when not by number."""

    number: int | None = None
    key: str | None = None
    names: str | None = None
    year: str | None = None  # None with `names`: "n.d."
    page: str | None = None
    label: str | None = None


def _page(spec: str | None) -> str | None:
    return spec.strip().rstrip(".").strip() or None if spec else None


def pages_of(spec: str) -> tuple[str, ...]:
    return tuple(p.strip().rstrip(".") for p in re.split(r",|;|\band\b", spec) if p.strip().rstrip("."))


def _pandoc(inside: str) -> tuple[Ref, ...]:
    refs = []
    for part in inside.split(";"):
        m = _PANDOC_CITE_RE.search(part)
        if m is None:
            continue
        loc = _LOCATOR_RE.match(m.group("rest"))
        page = _page(loc.group("page") or loc.group("bare")) if loc else None
        refs.append(Ref(key=m.group("key"), page=page, label=f"[@{m.group('key')}]"))
    return tuple(refs)


def _author_year(inside: str) -> tuple[Ref, ...]:
    refs = []
    for part in inside.split(";"):
        m = _AUTHOR_YEAR_RE.match(part.strip())
        if m is None:
            continue
        names = (m.group("names") or m.group("nd_names")).strip()
        year = m.group("year")
        page = _page(m.group("page") or m.group("nd_page"))
        refs.append(Ref(names=names, year=year, page=page, label=f"({names}, {year or 'n.d.'})"))
    return tuple(refs)


def narrative_refs(m: re.Match[str]) -> tuple[Ref, ...]:
    """The readings of a narrative marker: its names, then its names but the first ("However, Lewis
    (2020)": the capitalised word that opens a sentence is no name; one word only, so that "Lewis
    and Perez (2020)" never falls back to a paper of Perez's)."""
    names, year, page = m.group("narr"), m.group("narr_year"), _page(m.group("narr_page"))
    cuts = [0] + [sep.end() for sep in _NAME_SEP_RE.finditer(names) if sep.end() < len(names)][:1]
    out = []
    for at in cuts:
        part = names[at:].strip()
        if part and not part.lower().startswith(("and ", "et al")):
            out.append(Ref(names=part, year=year, page=page, label=f"{part} ({year or 'n.d.'})"))
    return tuple(out)


def is_narrative(m: re.Match[str]) -> bool:
    return m.group("narr") is not None


def refs_of(m: re.Match[str]) -> tuple[Ref, ...]:
    """The citations of a MARKER_RE match; () for brackets or parentheses that cite nothing. A
    narrative marker cites one item: its first reading here (the caller picks the one that resolves)."""
    if m.group("narr") is not None:
        return narrative_refs(m)[:1]
    if m.group("numbers") is not None:
        page = _page(m.group("page"))
        return tuple(Ref(number=int(x), page=page) for x in re.split(r"\s*[,;]\s*", m.group("numbers")))
    if m.group("pandoc") is not None:
        return _pandoc(m.group("pandoc"))
    return _author_year(m.group("paren"))


def split_answer(answer: str) -> tuple[str, str]:
    """The answer's body, and its `# Cited Sources` list ("" when it has none)."""
    head = _CITED_HEADER_RE.search(answer)
    return (answer[: head.start()], answer[head.end():]) if head else (answer, "")


def _families(names: str) -> tuple[str, ...]:
    """"Lewis & Perez" -> ("lewis", "perez"); "see Lewis et al." -> ("lewis",): each name's last word."""
    pieces = (words(p) for p in _NAME_SEP_RE.split(_ET_AL_RE.sub("", names)))
    return tuple(ws[-1] for ws in pieces if ws)


@dataclass(frozen=True, slots=True)
class _Meta:
    families: tuple[str, ...]
    title: tuple[str, ...]  # folded words
    year: str | None


class Sources:
    """What each citation of one answer names, from its `# Cited Sources` list and the turn's passages."""

    def __init__(self, listed: str, passages: Sequence[Mapping[str, Any]]) -> None:
        self.by_n: dict[int, Cited] = {}
        self._by_item: dict[tuple[str, str], Cited] = {}
        self._keys: dict[str, tuple[str, str]] = {}
        self._meta: dict[tuple[str, str], _Meta] = {}
        self._entries(listed)
        from_list = bool(self.by_n)
        for p in passages:
            n, key = p.get("n"), p.get("item_key")
            if not isinstance(key, str):
                continue
            item = (key, str(p.get("library") or "user"))
            if isinstance(p.get("citation_key"), str):
                self._keys.setdefault(p["citation_key"], item)
            creators = [str(c) for c in p.get("creators") or [] if str(c).strip()]
            if item not in self._meta or (creators and not self._meta[item].families):
                year = p.get("year")
                self._meta[item] = _Meta(tuple(words(c)[-1] for c in creators if words(c)), tuple(words(str(p.get("title") or ""))),
                                         str(year) if isinstance(year, int) else None)
            if from_list or not isinstance(n, int):
                continue
            label = p.get("page_label") or (str(p["page"]) if isinstance(p.get("page"), int) else None)
            self.by_n[n] = Cited(n, key, item[1], (label,) if label else ())
            self._by_item.setdefault(item, Cited(n, key, item[1]))

    def _entries(self, listed: str) -> None:
        for m in _ENTRY_RE.finditer(listed):
            rest = m.group(2)
            link = _ENTRY_LINK_RE.search(rest)
            if link is None:
                continue
            pages = _ENTRY_PAGES_RE.search(rest[: link.start()])
            library = "user" if link.group(2) == "library" else link.group(2)
            c = Cited(int(m.group(1)), link.group(3), library, pages_of(pages.group(1)) if pages else ())
            self.by_n[c.n] = c
            item = (c.item_key, library)
            self._by_item.setdefault(item, c)
            lead = _ENTRY_KEY_RE.match(rest)
            if lead:
                self._keys[lead.group(1)] = item
                rest = rest[lead.end():]
            who = _ENTRY_WHO_RE.match(rest)
            if who is not None:
                names = who.group(1) if who.group(1) is not None else who.group(3)
                self._meta.setdefault(item, _Meta(_families(names), tuple(words(names)), who.group(2)))

    def items(self) -> list[tuple[str, str]]:
        """Every item the answer may cite: its list's, then the passages'."""
        return list(dict.fromkeys([(c.item_key, c.library) for c in self.by_n.values()] + list(self._meta)))

    def key_of(self, c: Cited) -> str | None:
        """The citation key the list or the passages give the item `c` names."""
        return next((k for k, item in self._keys.items() if item == (c.item_key, c.library)), None)

    def _item(self, item: tuple[str, str]) -> Cited:
        c = self._by_item.get(item)
        if c is None:  # an item the list leaves out: the next number the answer does not use
            c = self._by_item[item] = Cited(max([0, *self.by_n, *(x.n for x in self._by_item.values())]) + 1, *item)
        return c

    def _author_year(self, names: str, year: str | None) -> tuple[str, str] | None:
        fams, said = _families(names), tuple(w for w in words(names) if w)
        best: tuple[int, tuple[str, str]] | None = None
        for item, meta in self._meta.items():
            if meta.year != year:
                continue
            if meta.families and fams and fams[0] == meta.families[0]:
                score = 1 + sum(a == b for a, b in zip(fams[1:], meta.families[1:], strict=False))
            elif said and meta.title[: len(said)] == said:  # no author: the title's first words
                score = 1
            else:
                continue
            if best is None or score > best[0]:
                best = (score, item)
        return best[1] if best else None

    def resolve(self, ref: Ref) -> Cited | None:
        if ref.number is not None:
            return self.by_n.get(ref.number)
        item = self._keys.get(ref.key) if ref.key is not None else self._author_year(ref.names or "", ref.year)
        return self._item(item) if item is not None else None
