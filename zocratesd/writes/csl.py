"""A new item's metadata from CSL-JSON (what Crossref, OpenAlex-derived tools and citation managers
give) in Zotero's item types and field names, as Zotero's own schema maps the two (`schema.json`'s
`csl` section, the same in Zotero 7, 9 and 10; tests/unit/writes check the tables below against it).

Only the common scholarly types are mapped; any other CSL type becomes a `document`. A CSL variable
with no field in the item's type goes into Extra as `Name: value`, Zotero's own convention for
data its fields cannot hold (it reads `DOI: ...` from Extra back into citations).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from zocratesd.errors import InvalidInput
from zocratesd.writes.operations import Creator, ItemFields

# CSL type -> Zotero item type (schema.json csl.types, its first choice for each).
TYPES: Final = {
    "article": "preprint", "article-journal": "journalArticle", "article-magazine": "magazineArticle",
    "article-newspaper": "newspaperArticle", "book": "book", "chapter": "bookSection", "dataset": "dataset",
    "manuscript": "manuscript", "paper-conference": "conferencePaper", "report": "report", "thesis": "thesis",
    "webpage": "webpage", "document": "document",
}
# CSL variable -> Zotero base field (schema.json csl.fields.text; dates from csl.fields.date).
FIELDS: Final = {
    "abstract": "abstractNote", "container-title": "publicationTitle", "DOI": "DOI", "ISBN": "ISBN", "ISSN": "ISSN",
    "issue": "issue", "page": "pages", "publisher": "publisher", "publisher-place": "place", "URL": "url",
    "volume": "volume", "language": "language", "number": "number", "genre": "type", "edition": "edition",
    "collection-title": "seriesTitle", "event-title": "conferenceName", "PMID": "PMID", "PMCID": "PMCID",
    "title-short": "shortTitle", "journalAbbreviation": "journalAbbreviation",
}
# Per item type, the type's own name for a base field where it has one (schema.json itemTypes' baseField).
TYPE_FIELDS: Final[dict[str, dict[str, str]]] = {
    "bookSection": {"publicationTitle": "bookTitle"},
    "conferencePaper": {"publicationTitle": "proceedingsTitle"},
    "preprint": {"type": "genre", "publisher": "repository", "number": "archiveID"},
    "report": {"number": "reportNumber", "type": "reportType", "publisher": "institution"},
    "thesis": {"type": "thesisType", "publisher": "university"},
    "webpage": {"publicationTitle": "websiteTitle", "type": "websiteType"},
    "manuscript": {"type": "manuscriptType", "publisher": "institution"},
    "dataset": {"number": "identifier", "publisher": "repository", "place": "repositoryLocation"},
}
# The fields each mapped type has (schema.json itemTypes, Zotero 7-10), so nothing is sent that
# Zotero would refuse for the type.
VALID: Final[dict[str, frozenset[str]]] = {t: frozenset(f.split()) for t, f in {
    "journalArticle": "abstractNote publicationTitle publisher place date volume issue pages journalAbbreviation DOI url "
                      "PMID PMCID ISSN shortTitle language extra seriesTitle",
    "magazineArticle": "abstractNote publicationTitle date volume issue pages DOI url ISSN shortTitle language extra",
    "newspaperArticle": "abstractNote publicationTitle place edition date pages DOI url ISSN shortTitle language extra",
    "book": "abstractNote seriesTitle volume edition date publisher place ISBN DOI url ISSN shortTitle language extra",
    "bookSection": "abstractNote bookTitle volume edition date publisher place pages ISBN DOI url ISSN shortTitle language extra",
    "conferencePaper": "abstractNote proceedingsTitle conferenceName publisher place date volume issue pages DOI ISBN url "
                       "ISSN shortTitle language extra",
    "preprint": "abstractNote genre repository archiveID place date DOI url shortTitle language extra",
    "report": "abstractNote reportNumber reportType institution place date pages DOI ISBN url ISSN shortTitle language extra",
    "thesis": "abstractNote thesisType university place date DOI ISBN url ISSN shortTitle language extra",
    "webpage": "abstractNote websiteTitle websiteType date publisher place DOI url shortTitle language extra",
    "manuscript": "abstractNote manuscriptType institution place date DOI url shortTitle language extra",
    "dataset": "abstractNote identifier repository repositoryLocation date DOI url shortTitle language extra",
    "document": "abstractNote publisher date DOI url shortTitle language extra",
}.items()}
# CSL name variables -> Zotero creator types (schema.json csl.names, inverted for the usual ones).
CREATORS: Final = {"author": "author", "editor": "editor", "translator": "translator", "container-author": "bookAuthor",
                   "collection-editor": "seriesEditor", "reviewed-author": "reviewedAuthor"}


def _date(value: object) -> str | None:
    if isinstance(value, dict):
        parts = value.get("date-parts")
        if isinstance(parts, list) and parts and isinstance(parts[0], list) and parts[0]:
            return "-".join(f"{int(p):02d}" if i else str(int(p)) for i, p in enumerate(parts[0][:3]) if str(p).strip())
        raw = value.get("raw") or value.get("literal")
        return str(raw) if raw else None
    return str(value) if isinstance(value, str | int) and str(value).strip() else None


def _creators(csl: Mapping[str, object]) -> tuple[Creator, ...]:
    out = []
    for variable, creator_type in CREATORS.items():
        names = csl.get(variable)
        if not isinstance(names, list):
            continue
        for name in names:
            if not isinstance(name, dict):
                continue
            if name.get("family"):
                out.append(Creator(creator_type, first_name=str(name.get("given", "")), last_name=str(name["family"])))
            elif name.get("literal"):
                out.append(Creator(creator_type, name=str(name["literal"])))
    return tuple(out)


def item_from_csl(csl: Mapping[str, object]) -> ItemFields:
    """Zotero's form of one CSL-JSON item; InvalidInput without a title."""
    title = csl.get("title")
    if not isinstance(title, str) or not title.strip():
        raise InvalidInput("the CSL-JSON item has no title")
    item_type = TYPES.get(str(csl.get("type", "")), "document")
    valid, own = VALID[item_type], TYPE_FIELDS.get(item_type, {})
    fields: dict[str, str] = {}
    extra: list[str] = []
    issued = _date(csl.get("issued"))
    if issued:
        fields["date"] = issued
    for variable, base in FIELDS.items():
        value = csl.get(variable)
        if value is None or not str(value).strip():
            continue
        field = own.get(base, base)
        if field in valid:
            fields[field] = str(value).strip()
        else:
            extra.append(f"{variable}: {str(value).strip()}")
    note = csl.get("note")
    if isinstance(note, str) and note.strip():
        extra.append(note.strip())
    if extra:
        fields["extra"] = "\n".join(extra)
    return ItemFields(item_type, title.strip(), _creators(csl), fields)
