"""Bibliographies of cited items: CSL-JSON, BibTeX, BibLaTeX, and text formatted in a CSL style.

The items come from the library index (`items.fields`, `items.names`, `items.citation_key`:
library/index.py), never from Zotero's database at export time. CSL-JSON follows Zotero's own
mapping (schema.json's `csl` section, identical in Zotero 7, 9 and 10; tests/unit/citations
compare the tables below with the schema files): each CSL variable from the first of its Zotero
fields that has a value, the item type's primary creator as `author`. BibTeX and BibLaTeX are
made from the CSL-JSON, so the three agree.

Text: citeproc-py with a CSL style the user's Zotero has installed (`<data dir>/styles/*.csl`,
named by file name or title), else the APA style shipped in this package
(zocratesd/citations/styles/apa.csl, the Citation Style Language project's, CC BY-SA 3.0).
"""

from __future__ import annotations

import json
import re
import sqlite3
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from zocratesd import deferred
from zocratesd.errors import InvalidInput
from zocratesd.zotero_schema import TYPE_CREATOR_TYPES

# A CSL-JSON item (https://github.com/citation-style-language/schema, csl-data.json): variables by
# their CSL names, dates as {"date-parts": ...}, names as lists of {family, given} or {literal}.
CslItem = dict[str, Any]
FORMATS: Final = ("bibtex", "biblatex", "csl-json", "text")
DEFAULT_STYLE: Final = "apa"
SHIPPED_STYLES: Final = Path(__file__).with_name("styles")
# Style files read from the user's styles folder (Zotero's own is a few hundred KB at most; a
# dependent style is a few KB). Larger files are not styles a user installed through Zotero.
MAX_STYLE_BYTES: Final = 2 * 1024 * 1024

# --- Zotero -> CSL (schema.json `csl`) ----------------------------------------------------------
CSL_TYPES: Final[dict[str, str]] = {
    "preprint": "article", "journalArticle": "article-journal", "magazineArticle": "article-magazine",
    "newspaperArticle": "article-newspaper", "bill": "bill", "book": "book", "podcast": "broadcast",
    "tvBroadcast": "broadcast", "radioBroadcast": "broadcast", "bookSection": "chapter", "dataset": "dataset",
    "document": "document", "attachment": "document", "note": "document", "dictionaryEntry": "entry-dictionary",
    "encyclopediaArticle": "entry-encyclopedia", "artwork": "graphic", "hearing": "hearing", "interview": "interview",
    "case": "legal_case", "statute": "legislation", "manuscript": "manuscript", "map": "map", "film": "motion_picture",
    "videoRecording": "motion_picture", "conferencePaper": "paper-conference", "patent": "patent",
    "letter": "personal_communication", "email": "personal_communication", "instantMessage": "personal_communication",
    "forumPost": "post", "blogPost": "post-weblog", "report": "report", "computerProgram": "software",
    "audioRecording": "song", "presentation": "speech", "standard": "standard", "thesis": "thesis", "webpage": "webpage",
}
CSL_TEXT: Final[dict[str, tuple[str, ...]]] = {
    "abstract": ("abstractNote",), "archive": ("archive",), "archive_location": ("archiveLocation",),
    "authority": ("authority",), "call-number": ("callNumber", "applicationNumber"), "chapter-number": ("session",),
    "citation-key": ("citationKey",), "collection-number": ("seriesNumber",), "collection-title": ("seriesTitle", "series"),
    "container-title": ("publicationTitle", "reporter", "code"), "dimensions": ("artworkSize", "runningTime"),
    "DOI": ("DOI",), "edition": ("edition",), "event-place": ("eventPlace",), "event-title": ("meetingName", "conferenceName"),
    "genre": ("type", "programmingLanguage"), "ISBN": ("ISBN",), "ISSN": ("ISSN",), "issue": ("issue", "priorityNumbers"),
    "journalAbbreviation": ("journalAbbreviation",), "language": ("language",), "license": ("rights",),
    "medium": ("medium", "system"), "note": ("extra",), "number": ("number",), "number-of-pages": ("numPages",),
    "number-of-volumes": ("numberOfVolumes",), "original-publisher": ("originalPublisher",),
    "original-publisher-place": ("originalPlace",), "part-number": ("partNumber",), "part-title": ("partTitle",),
    "page": ("pages",), "PMID": ("PMID",), "PMCID": ("PMCID",), "publisher": ("publisher",), "publisher-place": ("place",),
    "references": ("history", "references"), "scale": ("scale",), "section": ("section", "committee"),
    "shortTitle": ("shortTitle",), "source": ("libraryCatalog",), "status": ("status",), "title": ("title",),
    "title-short": ("shortTitle",), "URL": ("url",), "version": ("versionNumber",), "volume": ("volume", "codeNumber"),
}
CSL_DATES: Final[dict[str, str]] = {"accessed": "accessDate", "issued": "date", "submitted": "filingDate",
                                    "original-date": "originalDate"}
CSL_NAMES: Final[dict[str, str]] = {
    "author": "author", "bookAuthor": "container-author", "chair": "chair", "castMember": "performer",
    "composer": "composer", "contributor": "contributor", "creator": "author", "director": "director", "editor": "editor",
    "executiveProducer": "executive-producer", "guest": "guest", "host": "host", "interviewer": "interviewer",
    "narrator": "narrator", "originalCreator": "original-author", "organizer": "organizer", "podcaster": "host",
    "producer": "producer", "recipient": "recipient", "reviewedAuthor": "reviewed-author", "seriesCreator": "series-creator",
    "seriesEditor": "collection-editor", "scriptwriter": "script-writer", "translator": "translator",
}
# Variables schema.json maps that the CSL data schema (citation-style-language/schema, csl-data.json)
# does not admit: Zotero's own `shortTitle` (beside the standard `title-short`), and `license` and
# `part-number`, newer than the schema. Left out, so the CSL-JSON validates as every CSL tool reads it.
NOT_CSL: Final = frozenset({"shortTitle", "license", "part-number"})


@dataclass(frozen=True)
class CiteItem:
    """An item as a bibliography needs it (from the library index)."""

    item_key: str
    library: str
    item_type: str
    title: str
    fields: Mapping[str, str]
    names: tuple[Mapping[str, Any], ...]
    citation_key: str


def load(conn: sqlite3.Connection, refs: Sequence[tuple[str, str]]) -> tuple[list[CiteItem], list[tuple[str, str]]]:
    """The index's items for `refs` ((library, item key), in order, each once), and the refs it
    does not hold (removed from the library since, or not indexed yet)."""
    wanted = list(dict.fromkeys(refs))
    uids = [key if lib == "user" else f"{lib}/{key}" for lib, key in wanted]
    found: dict[str, CiteItem] = {}
    for uid, key, lib, item_type, title, fields, names, citation_key in conn.execute(
        "SELECT uid, item_key, library, item_type, title, fields, names, citation_key FROM items "
        "WHERE uid IN (SELECT value FROM json_each(?))", (json.dumps(uids),),
    ):
        found[uid] = CiteItem(key, lib, str(item_type or "document"), str(title or ""), _json_obj(fields, dict),
                              tuple(n for n in _json_obj(names, list) if isinstance(n, dict)), str(citation_key or key))
    items = [found[u] for u in uids if u in found]
    return items, [r for r, u in zip(wanted, uids, strict=True) if u not in found]


def _json_obj(text: object, kind: type) -> Any:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        value = None
    return value if isinstance(value, kind) else kind()


# --- CSL-JSON ----------------------------------------------------------------------------------
_MULTIPART_RE: Final = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?: |$)")
_SQL_DATE_RE: Final = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T]\d{2}:\d{2}")
_YEAR_RE: Final = re.compile(r"(?<!\d)(\d{4})(?!\d)")


def csl_date(value: str) -> CslItem | None:
    """A Zotero date as CSL's `{"date-parts": [[y, m, d]]}` (stored "2017-03-00 March 2017", an
    access date "2024-05-01 10:00:00", or as typed: its year, with the text as `raw`)."""
    m = _MULTIPART_RE.match(value) or _SQL_DATE_RE.match(value)
    if m and m.group(1) != "0000":
        parts = [int(m.group(1))]
        for p in (m.group(2), m.group(3)):
            if int(p) == 0:
                break
            parts.append(int(p))
        return {"date-parts": [parts]}
    y = _YEAR_RE.search(value)
    if y:
        return {"date-parts": [[int(y.group(1))]], "raw": value}
    return {"raw": value} if value.strip() else None


def primary_role(item_type: str) -> str | None:
    """The item type's primary creator type (schema.json lists it first)."""

    roles = TYPE_CREATOR_TYPES.get(item_type) or ()
    return roles[0] if roles else None


def csl_name(n: Mapping[str, Any]) -> dict[str, str]:
    last, first = str(n.get("last") or ""), str(n.get("first") or "")
    if n.get("single") or not first:
        return {"literal": last or first}
    return {"family": last, "given": first}


def to_csl(item: CiteItem) -> CslItem:
    """The item as CSL-JSON, its `id` its citation key."""
    out: CslItem = {"id": item.citation_key, "type": CSL_TYPES.get(item.item_type, "document")}
    fields = item.fields
    for var, names in CSL_TEXT.items():
        if var in NOT_CSL:
            continue
        value = next((fields[n] for n in names if fields.get(n)), None)
        if value:
            out[var] = value
    if not out.get("title") and item.title:
        out["title"] = item.title
    out["citation-key"] = item.citation_key
    for var, name in CSL_DATES.items():
        if fields.get(name) and (d := csl_date(fields[name])):
            out[var] = d
    primary = primary_role(item.item_type)
    for n in item.names:
        role = "author" if n.get("type") == primary else CSL_NAMES.get(str(n.get("type")))
        if role:
            out.setdefault(role, []).append(csl_name(n))
    return out


# --- BibTeX and BibLaTeX ----------------------------------------------------------------------
# CSL type -> (BibTeX type, BibLaTeX type).
BIB_TYPES: Final[dict[str, tuple[str, str]]] = {
    "article-journal": ("article", "article"), "article-magazine": ("article", "article"),
    "article-newspaper": ("article", "article"), "book": ("book", "book"), "chapter": ("incollection", "incollection"),
    "paper-conference": ("inproceedings", "inproceedings"), "thesis": ("phdthesis", "thesis"),
    "report": ("techreport", "report"), "manuscript": ("unpublished", "unpublished"), "article": ("misc", "online"),
    "webpage": ("misc", "online"), "post-weblog": ("misc", "online"), "post": ("misc", "online"),
    "dataset": ("misc", "dataset"), "software": ("misc", "software"), "patent": ("misc", "patent"),
    "entry-dictionary": ("incollection", "inreference"), "entry-encyclopedia": ("incollection", "inreference"),
    "standard": ("techreport", "standard"), "speech": ("misc", "misc"), "legislation": ("misc", "legislation"),
    "legal_case": ("misc", "jurisdiction"),
}
# Where a CSL container title goes, by BibTeX type.
_CONTAINER: Final = {"article": ("journal", "journaltitle"), "incollection": ("booktitle", "booktitle"),
                     "inproceedings": ("booktitle", "booktitle"), "inreference": ("booktitle", "booktitle")}
_LATEX_SPECIALS: Final = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "%": r"\%", "&": r"\&", "$": r"\$",
                          "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_SPECIALS_RE: Final = re.compile(r"[\\{}%&$#_~^]")
_CAPS_WORD_RE: Final = re.compile(r"(?<![\w{])(\w*[A-Z]\w*[A-Z]\w*|\w+[A-Z]\w*)(?![\w}])")
_MONTHS: Final = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def latex_escape(text: str) -> str:
    """Text as a BibTeX field value: LaTeX's special characters escaped, whitespace as single
    spaces, non-ASCII kept as UTF-8 (BibLaTeX with biber reads it; LaTeX has read UTF-8 since 2018)."""
    return _SPECIALS_RE.sub(lambda m: _LATEX_SPECIALS[m.group(0)], " ".join(text.split()))


def _protect_caps(escaped: str) -> str:
    """Words with a capital after their first letter ("BERT", "iPhone") braced, so a style that
    lowercases titles keeps them (what Zotero's BibTeX export does)."""
    return _CAPS_WORD_RE.sub(lambda m: "{" + m.group(1) + "}", escaped)


def _bib_name(n: Mapping[str, Any]) -> str:
    if "literal" in n:
        return "{" + latex_escape(str(n["literal"])) + "}"  # an institution: one name, never split at "and"
    return f"{latex_escape(str(n.get('family') or ''))}, {latex_escape(str(n.get('given') or ''))}"


def to_bib(csl: Mapping[str, Any], flavour: Literal["bibtex", "biblatex"]) -> str:
    """One entry, from the item's CSL-JSON."""
    bibtex = flavour == "bibtex"
    entry_type = BIB_TYPES.get(str(csl.get("type")), ("misc", "misc"))[0 if bibtex else 1]
    fields: list[tuple[str, str]] = []

    def put(name: str, value: object, *, caps: bool = False) -> None:
        if value:
            text = latex_escape(str(value))
            fields.append((name, _protect_caps(text) if caps else text))

    put("title", csl.get("title"), caps=True)
    for role, field_name in (("author", "author"), ("editor", "editor"), ("translator", "translator")):
        if csl.get(role) and (role != "translator" or not bibtex):
            fields.append((field_name, " and ".join(_bib_name(n) for n in csl[role])))
    container = _CONTAINER.get(entry_type)
    if container:
        put(container[0 if bibtex else 1], csl.get("container-title"), caps=True)
    elif not bibtex and csl.get("container-title"):
        put("maintitle" if entry_type == "book" else "organization" if entry_type == "online" else "howpublished",
            csl.get("container-title"))
    issued = (csl.get("issued") or {}).get("date-parts") or [[]]
    parts = issued[0] if issued and isinstance(issued[0], list) else []
    if parts:
        if bibtex:
            put("year", parts[0])
            if len(parts) > 1 and 1 <= int(parts[1]) <= 12:
                fields.append(("month", _MONTHS[int(parts[1]) - 1]))  # BibTeX's month macro, written bare below
        else:
            put("date", "-".join(f"{int(p):02d}" if i else str(p) for i, p in enumerate(parts)))
    elif (csl.get("issued") or {}).get("raw"):
        put("year" if bibtex else "date", csl["issued"]["raw"])
    put("volume", csl.get("volume"))
    put("number", csl.get("issue") or csl.get("number"))
    if csl.get("page"):
        fields.append(("pages", latex_escape(re.sub(r"\s*[-–—]+\s*", "--", str(csl["page"])))))
    publisher = csl.get("publisher")
    if entry_type in ("phdthesis", "thesis"):
        put("school" if bibtex else "institution", publisher)
        put("type", csl.get("genre"))
    elif entry_type in ("techreport", "report"):
        put("institution", publisher)
        if not bibtex:
            put("type", csl.get("genre") or "techreport")
    else:
        put("publisher", publisher)
    put("address" if bibtex else "location", csl.get("publisher-place"))
    put("edition", csl.get("edition"))
    put("series", csl.get("collection-title"))
    put("isbn", csl.get("ISBN"))
    put("issn", csl.get("ISSN"))
    put("doi", csl.get("DOI"))
    put("url", csl.get("URL"))
    accessed = ((csl.get("accessed") or {}).get("date-parts") or [[]])[0]
    if accessed and not bibtex:
        put("urldate", "-".join(f"{int(p):02d}" if i else str(p) for i, p in enumerate(accessed)))
    put("langid" if not bibtex else "language", csl.get("language"))
    put("abstract", csl.get("abstract"))
    body = ",\n".join(f"  {name} = {value}" if name == "month" else f"  {name} = {{{value}}}" for name, value in fields)
    return f"@{entry_type}{{{csl['id']},\n{body}\n}}\n"


# --- formatted text ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Style:
    name: str  # the file's stem ("apa")
    title: str
    path: Path
    id: str | None = None  # the style's <id> ("http://www.zotero.org/styles/apa")


def styles(data_dir: Path | None) -> list[Style]:
    """The CSL styles the user's Zotero has installed, then the shipped ones it lacks."""
    found: dict[str, Style] = {}
    for folder in ([data_dir / "styles"] if data_dir is not None else []) + [SHIPPED_STYLES]:
        try:
            files = sorted(folder.glob("*.csl"))
        except OSError:
            continue
        for f in files:
            if f.stem not in found:
                title, style_id = _style_head(f)
                found[f.stem] = Style(f.stem, title or f.stem, f, style_id)
    return list(found.values())


_TITLE_RE: Final = re.compile(rb"<title>([^<]{1,300})</title>")
_ID_RE: Final = re.compile(rb"<id>([^<]{1,300})</id>")


def _style_head(path: Path) -> tuple[str | None, str | None]:
    """A style file's title and id, from its <info> at the top."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return None, None
    title, style_id = _TITLE_RE.search(head), _ID_RE.search(head)
    return (title.group(1).decode("utf-8", "replace").strip() if title else None,
            style_id.group(1).decode("utf-8", "replace").strip() if style_id else None)


def find_style(data_dir: Path | None, name: str | None, preferred: str | None = None) -> Style:
    """The style called `name` (file name, or title, case-insensitively); when None, the
    installed style whose id is `preferred` (Zotero's Quick Copy style), else APA. InvalidInput
    listing the installed styles when there is none of that name."""
    available = styles(data_dir)
    if name is None and preferred:
        chosen = [s for s in available if s.id == preferred]
        if chosen:
            return chosen[0]
    wanted = (name or DEFAULT_STYLE).strip()
    folded = wanted.casefold().removesuffix(".csl")
    for s in available:
        if folded in (s.name.casefold(), s.title.casefold()):
            return s
    shown = ", ".join(s.name for s in available[:40])
    raise InvalidInput(f"no CSL style called {wanted[:80]!r}; installed: {shown}", style=wanted[:80])


def format_text(items_csl: Sequence[Mapping[str, Any]], style: Style) -> str:
    """The bibliography as plain text in `style`, one entry a paragraph, in the style's order."""
    # citeproc-py (and lxml under it) is loaded by the first formatted bibliography, not by BibTeX
    # or CSL-JSON exports.
    citeproc = deferred.load("citeproc")
    source_json = deferred.load("citeproc.source.json")
    if style.path.stat().st_size > MAX_STYLE_BYTES:
        raise InvalidInput(f"the style file {style.path.name} is larger than {MAX_STYLE_BYTES // 1024} KiB", style=style.name)
    try:
        csl_style = citeproc.CitationStylesStyle(str(style.path), validate=False)
    except Exception as exc:  # noqa: BLE001 - a damaged or unsupported style file, whatever lxml or citeproc say
        raise InvalidInput(f"the style {style.name} cannot be read: {str(exc)[:200]}", style=style.name) from None
    # citeproc-py lowercases ids; ours are keys whose case matters elsewhere, so it gets its own.
    data = [{**{k: v for k, v in c.items() if k != "citation-key"}, "id": f"item{i}"} for i, c in enumerate(items_csl)]
    with warnings.catch_warnings():  # citeproc-py warns of CSL variables it does not use: not the user's concern
        warnings.simplefilter("ignore")
        bib = citeproc.CitationStylesBibliography(csl_style, source_json.CiteProcJSON(data), citeproc.formatter.plain)
        for i in range(len(items_csl)):
            bib.register(citeproc.Citation([citeproc.CitationItem(f"item{i}")]))
        entries = bib.bibliography()
    return "\n\n".join(" ".join(str(entry).split()) for entry in entries) + ("\n" if items_csl else "")


# --- the export --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Export:
    format: str
    text: str
    count: int
    keys: tuple[str, ...]
    missing: tuple[str, ...]  # item keys no longer in the library index
    style: str | None = None
    items: tuple[tuple[str, str], ...] = ()  # (library, item key) of each entry, in order

    def as_json(self) -> dict[str, object]:
        return {"format": self.format, "text": self.text, "count": self.count, "keys": list(self.keys),
                "missing": list(self.missing), "style": self.style,
                "sources": [{"item_key": k, "library": lib, "citation_key": ck}
                            for (lib, k), ck in zip(self.items, self.keys, strict=True)]}


def render(items: Iterable[CiteItem], fmt: str, *, data_dir: Path | None = None, style: str | None = None,
           preferred_style: str | None = None, missing: Sequence[tuple[str, str]] = ()) -> Export:
    if fmt not in FORMATS:
        raise InvalidInput(f"format is one of {', '.join(FORMATS)}", format=str(fmt)[:40])
    cite_items = list(items)
    csl = [to_csl(i) for i in cite_items]
    chosen: str | None = None
    if fmt == "csl-json":
        text = json.dumps(csl, ensure_ascii=False, indent=2) + "\n"
    elif fmt == "text":
        found = find_style(data_dir, style, preferred_style)
        chosen = found.name
        text = format_text(csl, found)
    else:
        text = "\n".join(to_bib(c, "bibtex" if fmt == "bibtex" else "biblatex") for c in csl)
    return Export(fmt, text, len(csl), tuple(i.citation_key for i in cite_items), tuple(k for _, k in missing), chosen,
                  tuple((i.library, i.item_key) for i in cite_items))
