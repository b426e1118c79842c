"""Facts from Zotero's `schema.json`: item types and their fields, creator types, base-field mappings,
and the ids a new database gives them. They are identical in the schema files of Zotero 7.0.32,
9.0.6 and 10.0.0 (a test compares them with those files).

Zotero numbers item types, fields and creator types in the order it first meets them while walking
`schema.json` (`Zotero.Schema._updateGlobalSchema`), so `author` is creator type 10 and `title` is
field 1. Readers of a library use the mappings (the local API names a case's title `caseName`; a
bibliography's creator roles come from the type's creator types); the demo writer builds a database
with these ids.
"""

from __future__ import annotations

from typing import Final

# Item types in schema order, each with its fields in order (a type-specific field stands where it
# is; BASE_FIELDS says which base field it maps to).
TYPE_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "annotation": (),
    "artwork": ("title", "abstractNote", "artworkMedium", "artworkSize", "date", "eventPlace", "DOI", "citationKey", "url",
        "accessDate", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber", "rights",
        "extra"),
    "attachment": ("title", "accessDate", "url"),
    "audioRecording": ("title", "abstractNote", "audioRecordingFormat", "seriesTitle", "volume", "numberOfVolumes", "label",
        "place", "date", "runningTime", "ISBN", "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation",
        "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "bill": ("title", "abstractNote", "billNumber", "code", "codeVolume", "section", "codePages", "legislativeBody",
        "session", "history", "date", "DOI", "citationKey", "url", "accessDate", "shortTitle", "language", "rights",
        "extra"),
    "blogPost": ("title", "abstractNote", "blogTitle", "websiteType", "date", "DOI", "citationKey", "url", "accessDate",
        "ISSN", "shortTitle", "language", "rights", "extra"),
    "book": ("title", "abstractNote", "series", "seriesNumber", "volume", "numberOfVolumes", "edition", "date", "publisher",
        "place", "originalDate", "originalPublisher", "originalPlace", "format", "numPages", "ISBN", "DOI", "citationKey",
        "url", "accessDate", "ISSN", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber",
        "rights", "extra"),
    "bookSection": ("title", "abstractNote", "bookTitle", "series", "seriesNumber", "volume", "numberOfVolumes", "edition",
        "date", "publisher", "place", "originalDate", "originalPublisher", "originalPlace", "format", "pages", "ISBN",
        "DOI", "citationKey", "url", "accessDate", "ISSN", "archive", "archiveLocation", "shortTitle", "language",
        "libraryCatalog", "callNumber", "rights", "extra"),
    "case": ("caseName", "abstractNote", "court", "dateDecided", "docketNumber", "reporter", "reporterVolume", "firstPage",
        "history", "DOI", "citationKey", "url", "accessDate", "shortTitle", "language", "rights", "extra"),
    "computerProgram": ("title", "abstractNote", "seriesTitle", "versionNumber", "date", "system", "company", "place",
        "programmingLanguage", "rights", "citationKey", "url", "accessDate", "DOI", "ISBN", "archive", "archiveLocation",
        "libraryCatalog", "callNumber", "shortTitle", "extra"),
    "conferencePaper": ("title", "abstractNote", "proceedingsTitle", "conferenceName", "publisher", "place", "date",
        "eventPlace", "volume", "issue", "numberOfVolumes", "pages", "series", "seriesNumber", "DOI", "ISBN", "citationKey",
        "url", "accessDate", "ISSN", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber",
        "rights", "extra"),
    "dataset": ("title", "abstractNote", "identifier", "type", "versionNumber", "date", "repository", "repositoryLocation",
        "format", "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle", "language",
        "libraryCatalog", "callNumber", "rights", "extra"),
    "dictionaryEntry": ("title", "abstractNote", "dictionaryTitle", "series", "seriesNumber", "volume", "numberOfVolumes",
        "edition", "date", "publisher", "place", "pages", "ISBN", "DOI", "citationKey", "url", "accessDate", "archive",
        "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "document": ("title", "abstractNote", "type", "date", "publisher", "place", "DOI", "citationKey", "url", "accessDate",
        "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "email": ("subject", "abstractNote", "date", "DOI", "citationKey", "url", "accessDate", "shortTitle", "language",
        "rights", "extra"),
    "encyclopediaArticle": ("title", "abstractNote", "encyclopediaTitle", "series", "seriesNumber", "volume",
        "numberOfVolumes", "edition", "date", "publisher", "place", "pages", "ISBN", "DOI", "citationKey", "url",
        "accessDate", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber", "rights",
        "extra"),
    "film": ("title", "abstractNote", "distributor", "place", "date", "genre", "videoRecordingFormat", "runningTime", "DOI",
        "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog",
        "callNumber", "rights", "extra"),
    "forumPost": ("title", "abstractNote", "forumTitle", "postType", "date", "DOI", "citationKey", "url", "accessDate",
        "shortTitle", "language", "rights", "extra"),
    "hearing": ("title", "abstractNote", "committee", "publisher", "numberOfVolumes", "documentNumber", "pages",
        "legislativeBody", "session", "history", "date", "place", "DOI", "citationKey", "url", "accessDate", "shortTitle",
        "language", "rights", "extra"),
    "instantMessage": ("title", "abstractNote", "date", "DOI", "citationKey", "url", "accessDate", "shortTitle", "language",
        "rights", "extra"),
    "interview": ("title", "abstractNote", "interviewMedium", "date", "publisher", "place", "DOI", "citationKey", "url",
        "accessDate", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber", "rights",
        "extra"),
    "journalArticle": ("title", "abstractNote", "publicationTitle", "publisher", "place", "date", "volume", "issue",
        "section", "partNumber", "partTitle", "pages", "series", "seriesTitle", "seriesText", "journalAbbreviation", "DOI",
        "citationKey", "url", "accessDate", "PMID", "PMCID", "ISSN", "archive", "archiveLocation", "shortTitle", "language",
        "libraryCatalog", "callNumber", "rights", "extra"),
    "letter": ("title", "abstractNote", "letterType", "date", "eventPlace", "DOI", "citationKey", "url", "accessDate",
        "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "magazineArticle": ("title", "abstractNote", "publicationTitle", "publisher", "place", "date", "volume", "issue",
        "pages", "ISSN", "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle", "language",
        "libraryCatalog", "callNumber", "rights", "extra"),
    "manuscript": ("title", "abstractNote", "manuscriptType", "institution", "place", "date", "numPages", "number", "DOI",
        "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog",
        "callNumber", "rights", "extra"),
    "map": ("title", "abstractNote", "mapType", "scale", "seriesTitle", "edition", "publisher", "place", "date", "DOI",
        "ISBN", "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle", "language",
        "libraryCatalog", "callNumber", "rights", "extra"),
    "newspaperArticle": ("title", "abstractNote", "publicationTitle", "publisher", "place", "date", "volume", "issue",
        "edition", "section", "pages", "ISSN", "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation",
        "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "note": (),
    "patent": ("title", "abstractNote", "place", "country", "assignee", "issuingAuthority", "patentNumber", "filingDate",
        "pages", "applicationNumber", "priorityNumbers", "issueDate", "priorityDate", "references", "legalStatus", "DOI",
        "citationKey", "url", "accessDate", "shortTitle", "language", "rights", "extra"),
    "podcast": ("title", "abstractNote", "seriesTitle", "episodeNumber", "audioFileType", "date", "publisher", "place",
        "runningTime", "DOI", "citationKey", "url", "accessDate", "shortTitle", "language", "rights", "extra"),
    "preprint": ("title", "abstractNote", "genre", "repository", "archiveID", "place", "date", "series", "seriesNumber",
        "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle", "language", "libraryCatalog",
        "callNumber", "rights", "extra"),
    "presentation": ("title", "abstractNote", "presentationType", "date", "meetingName", "place", "series", "sessionTitle",
        "DOI", "citationKey", "url", "accessDate", "shortTitle", "language", "rights", "extra"),
    "radioBroadcast": ("title", "abstractNote", "programTitle", "episodeNumber", "audioRecordingFormat", "network", "place",
        "date", "runningTime", "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle",
        "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "report": ("title", "abstractNote", "reportNumber", "reportType", "institution", "place", "date", "seriesTitle",
        "seriesNumber", "pages", "DOI", "ISBN", "citationKey", "url", "accessDate", "ISSN", "archive", "archiveLocation",
        "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "standard": ("title", "abstractNote", "organization", "committee", "type", "number", "versionNumber", "edition",
        "status", "date", "publisher", "place", "partNumber", "partTitle", "ISBN", "DOI", "citationKey", "url",
        "accessDate", "archive", "archiveLocation", "shortTitle", "numPages", "language", "libraryCatalog", "callNumber",
        "rights", "extra"),
    "statute": ("nameOfAct", "abstractNote", "code", "codeNumber", "publicLawNumber", "dateEnacted", "pages", "section",
        "session", "history", "DOI", "citationKey", "url", "accessDate", "shortTitle", "language", "rights", "extra"),
    "thesis": ("title", "abstractNote", "thesisType", "university", "place", "date", "series", "seriesNumber", "numPages",
        "DOI", "ISBN", "citationKey", "url", "accessDate", "ISSN", "archive", "archiveLocation", "shortTitle", "language",
        "libraryCatalog", "callNumber", "rights", "extra"),
    "tvBroadcast": ("title", "abstractNote", "programTitle", "episodeNumber", "videoRecordingFormat", "network", "place",
        "date", "runningTime", "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation", "shortTitle",
        "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "videoRecording": ("title", "abstractNote", "videoRecordingFormat", "seriesTitle", "volume", "numberOfVolumes",
        "studio", "place", "date", "runningTime", "ISBN", "DOI", "citationKey", "url", "accessDate", "archive",
        "archiveLocation", "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra"),
    "webpage": ("title", "abstractNote", "websiteTitle", "websiteType", "date", "publisher", "place", "DOI", "citationKey",
        "url", "accessDate", "shortTitle", "language", "rights", "extra"),
}
# Each item type's creator types in order, the primary one first.
TYPE_CREATOR_TYPES: Final[dict[str, tuple[str, ...]]] = {
    "annotation": (),
    "artwork": ("artist", "contributor"),
    "attachment": (),
    "audioRecording": ("performer", "originalCreator", "composer", "wordsBy", "translator", "contributor"),
    "bill": ("sponsor", "cosponsor", "contributor"),
    "blogPost": ("author", "translator", "commenter", "contributor"),
    "book": ("author", "contributor", "editor", "translator", "seriesEditor"),
    "bookSection": ("author", "contributor", "editor", "bookAuthor", "translator", "seriesEditor"),
    "case": ("author", "counsel", "contributor"),
    "computerProgram": ("programmer", "contributor"),
    "conferencePaper": ("author", "contributor", "editor", "translator", "seriesEditor"),
    "dataset": ("author", "contributor"),
    "dictionaryEntry": ("author", "contributor", "editor", "translator", "seriesEditor"),
    "document": ("author", "contributor", "editor", "translator", "reviewedAuthor"),
    "email": ("author", "translator", "contributor", "recipient"),
    "encyclopediaArticle": ("author", "contributor", "editor", "translator", "seriesEditor"),
    "film": ("director", "producer", "scriptwriter", "castMember", "host", "guest", "narrator", "translator",
        "contributor"),
    "forumPost": ("author", "contributor"),
    "hearing": ("contributor",),
    "instantMessage": ("author", "contributor", "recipient"),
    "interview": ("interviewee", "contributor", "interviewer", "translator"),
    "journalArticle": ("author", "contributor", "editor", "translator", "reviewedAuthor"),
    "letter": ("author", "recipient", "contributor", "translator"),
    "magazineArticle": ("author", "contributor", "translator", "reviewedAuthor"),
    "manuscript": ("author", "contributor", "translator"),
    "map": ("cartographer", "contributor", "seriesEditor"),
    "newspaperArticle": ("author", "contributor", "translator", "reviewedAuthor"),
    "note": (),
    "patent": ("inventor", "attorneyAgent", "contributor"),
    "podcast": ("podcaster", "guest", "producer", "executiveProducer", "seriesCreator", "director", "scriptwriter",
        "castMember", "translator", "contributor"),
    "preprint": ("author", "contributor", "editor", "translator", "reviewedAuthor"),
    "presentation": ("presenter", "chair", "organizer", "contributor", "translator"),
    "radioBroadcast": ("creator", "host", "guest", "producer", "executiveProducer", "seriesCreator", "director",
        "scriptwriter", "castMember", "translator", "contributor"),
    "report": ("author", "editor", "contributor", "translator", "seriesEditor"),
    "standard": ("author", "editor", "contributor"),
    "statute": ("author", "contributor"),
    "thesis": ("author", "contributor"),
    "tvBroadcast": ("director", "producer", "executiveProducer", "seriesCreator", "scriptwriter", "castMember", "host",
        "guest", "narrator", "translator", "contributor"),
    "videoRecording": ("creator", "director", "producer", "scriptwriter", "executiveProducer", "castMember", "host",
        "guest", "narrator", "translator", "contributor"),
    "webpage": ("author", "contributor", "translator"),
}
# Base field -> the (item type, type-specific field) pairs mapped to it (caseName is a case's title).
BASE_FIELDS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "medium": (("artwork", "artworkMedium"), ("audioRecording", "audioRecordingFormat"), ("book", "format"), ("bookSection",
        "format"), ("dataset", "format"), ("film", "videoRecordingFormat"), ("interview", "interviewMedium"), ("podcast",
        "audioFileType"), ("radioBroadcast", "audioRecordingFormat"), ("tvBroadcast", "videoRecordingFormat"),
        ("videoRecording", "videoRecordingFormat")),
    "publisher": (("audioRecording", "label"), ("computerProgram", "company"), ("dataset", "repository"), ("film",
        "distributor"), ("manuscript", "institution"), ("preprint", "repository"), ("radioBroadcast", "network"), ("report",
        "institution"), ("thesis", "university"), ("tvBroadcast", "network"), ("videoRecording", "studio")),
    "number": (("bill", "billNumber"), ("case", "docketNumber"), ("dataset", "identifier"), ("hearing", "documentNumber"),
        ("patent", "patentNumber"), ("podcast", "episodeNumber"), ("preprint", "archiveID"), ("radioBroadcast",
        "episodeNumber"), ("report", "reportNumber"), ("statute", "publicLawNumber"), ("tvBroadcast", "episodeNumber")),
    "volume": (("bill", "codeVolume"), ("case", "reporterVolume")),
    "pages": (("bill", "codePages"), ("case", "firstPage")),
    "authority": (("bill", "legislativeBody"), ("case", "court"), ("hearing", "legislativeBody"), ("patent",
        "issuingAuthority"), ("standard", "organization")),
    "publicationTitle": (("blogPost", "blogTitle"), ("bookSection", "bookTitle"), ("conferencePaper", "proceedingsTitle"),
        ("dictionaryEntry", "dictionaryTitle"), ("encyclopediaArticle", "encyclopediaTitle"), ("forumPost", "forumTitle"),
        ("presentation", "sessionTitle"), ("radioBroadcast", "programTitle"), ("tvBroadcast", "programTitle"), ("webpage",
        "websiteTitle")),
    "type": (("blogPost", "websiteType"), ("film", "genre"), ("forumPost", "postType"), ("letter", "letterType"),
        ("manuscript", "manuscriptType"), ("map", "mapType"), ("preprint", "genre"), ("presentation", "presentationType"),
        ("report", "reportType"), ("thesis", "thesisType"), ("webpage", "websiteType")),
    "title": (("case", "caseName"), ("email", "subject"), ("statute", "nameOfAct")),
    "date": (("case", "dateDecided"), ("patent", "issueDate"), ("statute", "dateEnacted")),
    "place": (("dataset", "repositoryLocation"),),
    "originalDate": (("patent", "priorityDate"),),
    "status": (("patent", "legalStatus"),),
}


def _derive_orders() -> tuple[tuple[str, ...], tuple[str, ...], dict[tuple[str, str], str]]:
    """(fields, creator types) in the order Zotero numbers them, and (type, field) -> base field."""
    base_of = {pair: base for base, pairs in BASE_FIELDS.items() for pair in pairs}
    fields: dict[str, None] = {}
    creator_types: dict[str, None] = {}
    for item_type, names in TYPE_FIELDS.items():
        for name in names:
            fields.setdefault(name)
            base = base_of.get((item_type, name))
            if base:
                fields.setdefault(base)
        for ct in TYPE_CREATOR_TYPES[item_type]:
            creator_types.setdefault(ct)
    return tuple(fields), tuple(creator_types), base_of


ITEM_TYPES: Final = tuple(TYPE_FIELDS)
FIELDS, CREATOR_TYPES, BASE_OF = _derive_orders()
# The ids a new database gives them (1-based, in the orders above).
ITEM_TYPE_IDS: Final = {name: n for n, name in enumerate(ITEM_TYPES, start=1)}
FIELD_IDS: Final = {name: n for n, name in enumerate(FIELDS, start=1)}
CREATOR_TYPE_IDS: Final = {name: n for n, name in enumerate(CREATOR_TYPES, start=1)}
# Types that are not "regular" items: they have their own tables and no creators.
NON_REGULAR_TYPES: Final = ("annotation", "attachment", "note")
