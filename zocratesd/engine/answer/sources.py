"""Citation numbers and the `# Cited Sources` list.

Numbers go to items, not passages, in the order the answer first cites them, so "[2]" means the
same paper everywhere in the text. An item cited on several pages is listed once with all of
them; in the text its quotes then name their page ("[2, p. 4]"), otherwise the list says it.
An entry reads like CSL's author-date styles: "Author, Author & Author (Year). Title. p. 4."
then the item's zotero link.

In the text, a citation is written in the session's citation style (`citation_style`): "[2]"
(numbered), "(Lewis et al., 2020, p. 4)" (author-year: family names are the last word of the names
as Zotero keeps them), or "[@lewis2020retrieval, p. 4]" (Pandoc, with the item's citation key:
citations/keys.py; the list then starts each entry with it). The last two name the page at every
citation that has one: their list is no place to look a page up by number.

A page is cited as the reader shows it and a researcher cites it: the page label ("127" on the
PDF's third page, "xi" in a preface: the annotation's `pageLabel`, or the label the index knows for
a page of full text), the page number only where there is no label. The passage keeps its link to
the PDF's page (`page`, `link`), which is where a client opens it. Zotero gives us names as written ("Patrick Lewis", or one field for
an institution), so names are kept whole rather than guessed into "Lewis, P.".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zocratesd.library.retrieval import ONLINE_KIND, PassageJson
from zocratesd.limits import CITATION_STYLES

CITED_HEADER = "# Cited Sources"
# Authors named in an entry before "et al." (APA names up to 20 in a reference list; a sidebar
# line has room for three).
MAX_AUTHORS = 3


@dataclass
class Cited:
    n: int
    item_key: str
    meta: PassageJson  # title, creators, year: from the first passage of the item that has them
    pages: list[str] = field(default_factory=list)  # as cited: labels, else page numbers
    order: dict[str, int] = field(default_factory=dict)  # a cited page's place in the PDF (its page number)


class Citations:
    def __init__(self, style: str = "numbered") -> None:
        self.items: dict[str, Cited] = {}
        self.style = style if style in CITATION_STYLES else "numbered"

    def cite(self, passage: PassageJson) -> Cited:
        key = str(passage.get("item_key") or "")
        c = self.items.get(key)
        if c is None:
            c = self.items[key] = Cited(len(self.items) + 1, key, passage.copy())
        elif not c.meta.get("creators") and passage.get("creators"):
            c.meta = passage.copy()  # a focal snippet knows only its key; a search hit knows the rest
        page = cited_page(passage)
        if page is not None and page not in c.pages:
            c.pages.append(page)
            c.order[page] = int(passage.get("page") or 0)
        return c

    def marker(self, passage: PassageJson) -> str:
        """"[n]", or "[n, p. X]" when the item is cited on more than one page; in the other styles
        "(Author, Year, p. X)" or "[@key, p. X]"."""
        c = self.items[str(passage.get("item_key") or "")]
        page = cited_page(passage)
        at = f", p. {page}" if page is not None else ""
        if self.style == "pandoc":
            return f"[@{citation_key(c)}{at}]"
        if self.style == "author-year":
            return f"({short_authors(list(c.meta.get('creators') or [])) or short_title(c.meta)}, {c.meta.get('year') or 'n.d.'}{at})"
        if len(c.pages) > 1 and page is not None:
            return f"[{c.n}, p. {page}]"
        return f"[{c.n}]"

    def lines(self) -> list[str]:
        lead = (lambda c: f"[@{citation_key(c)}] ") if self.style == "pandoc" else (lambda c: "")
        return [f"[{c.n}] {lead(c)}{entry(c.meta, sorted(c.pages, key=lambda p: c.order.get(p, 0)))}{_where(c)}"
                for c in self.items.values()]


# How an answer marks a source found beyond the library (engine/online_tool.py's passages).
ONLINE_MARK = "Online, not in your library; its abstract was read"


def _where(c: Cited) -> str:
    """The entry's link: the item's zotero:// link; for an online source, its DOI (or URL) and the mark."""
    if c.meta.get("kind") == ONLINE_KIND:
        link = c.meta.get("link")
        return f" {ONLINE_MARK}" + (f" ({link})" if link else ".")
    return f" ({select_link(c.item_key, c.meta.get('library'))})"


def citation_key(c: Cited) -> str:
    return str(c.meta.get("citation_key") or c.item_key)


def short_authors(creators: list[str]) -> str:
    """"Lewis", "Lewis & Kiela", "Lewis et al." from names as Zotero keeps them ("Patrick Lewis")."""
    family = [str(n).split()[-1] for n in creators if str(n).strip()]
    if len(family) > 2:
        return f"{family[0]} et al."
    return " & ".join(family)


def short_title(meta: PassageJson) -> str:
    words = str(meta.get("title") or meta.get("item_key") or "").split()
    return " ".join(words[:4]) + ("…" if len(words) > 4 else "")


# A page label as shown in a citation: Zotero's are short ("127", "xi", "A-3"); longer ones are
# not labels a reader cites.
MAX_LABEL_CHARS = 16


def cited_page(passage: PassageJson) -> str | None:
    """The page a citation names: the passage's page label, else its page number; None for text
    with no page (an abstract, a note)."""
    page = passage.get("page")
    if not isinstance(page, int) or isinstance(page, bool):
        return None
    label = passage.get("page_label")
    if isinstance(label, str) and (label := " ".join(label.split())) and len(label) <= MAX_LABEL_CHARS:
        return label
    return str(page)


def select_link(item_key: str, library: object = None) -> str:
    """The item's zotero:// link; `library` "groups/<id>" for an item of a group library."""
    where = library if isinstance(library, str) and library.startswith("groups/") else "library"
    return f"zotero://select/{where}/items/{item_key}"


def authors(creators: list[str]) -> str:
    names = [str(n) for n in creators if str(n).strip()]
    if not names:
        return ""
    if len(names) > MAX_AUTHORS:
        return f"{names[0]} et al."
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " & " + names[-1]


def _sentence(text: str) -> str:
    text = text.strip()
    return text if not text or text[-1] in ".?!" else text + "."


def entry(meta: PassageJson, pages: list[str] | list[int]) -> str:
    """"Author (Year). Title. pp. 2, 5." (no author: "Title (Year).")"""
    who = authors(list(meta.get("creators") or []))
    year = meta.get("year")
    when = f"({year})" if year else "(n.d.)"
    title = _sentence(str(meta.get("title") or meta.get("item_key") or "(untitled)"))
    head = f"{who} {when}. {title}" if who else f"{title[:-1] if title.endswith('.') else title} {when}."
    if pages:
        # Page numbers sort by value; labels come in the order given (the PDF's: see `lines`).
        ps = sorted(pages) if all(isinstance(p, int) for p in pages) else [str(p) for p in pages]
        head += f" p. {ps[0]}." if len(ps) == 1 else f" pp. {', '.join(str(p) for p in ps)}."
    return head
