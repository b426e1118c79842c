"""The three scholarly APIs that need no key, sans-IO: for each, the request of a keyword search
(`Search`: path and query parameters) and the reading of its answer into `OnlineWork`s. What a
provider answers is untrusted: every field is checked for its type and cut to a bound, and an
answer of the wrong shape is a `BadAnswer`, never a crash.

- OpenAlex (https://docs.openalex.org): `GET /works?search=&per-page=&filter=publication_year:A-B
  &select=...&mailto=`; abstracts come as an inverted index (word -> positions), rebuilt here.
- arXiv (https://info.arxiv.org/help/api/user-manual.html): `GET /api/query?search_query=all:w1 AND
  all:w2 AND submittedDate:[...]&max_results=`; an Atom feed; errors are an entry titled "Error".
- Crossref (https://api.crossref.org): `GET /works?query.bibliographic=&rows=&filter=from-pub-date:A,
  until-pub-date:B&select=...&mailto=`; abstracts in JATS XML, reduced to text here.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Final, NamedTuple
from urllib.parse import quote

from zocratesd.online.works import OnlineWork, Provider, bare_doi

MAX_TITLE_CHARS: Final = 1000
MAX_ABSTRACT_CHARS: Final = 10_000
MAX_AUTHORS: Final = 50
MAX_FIELD_CHARS: Final = 500
# Words of a query sent to arXiv (its query is all words ANDed): more and nothing matches.
ARXIV_MAX_TERMS: Final = 8
OPENALEX_FIELDS: Final = ("id,doi,display_name,publication_year,authorships,primary_location,open_access,"
                          "abstract_inverted_index,best_oa_location")
CROSSREF_FIELDS: Final = "DOI,title,author,issued,container-title,abstract,URL,link,published"
_ATOM: Final = "{http://www.w3.org/2005/Atom}"
_ARXIV: Final = "{http://arxiv.org/schemas/atom}"
_TAGS_RE: Final = re.compile(r"<[^>]+>")
_JATS_TITLE_RE: Final = re.compile(r"<jats:title>.*?</jats:title>", re.DOTALL)
_WORD_RE: Final = re.compile(r"[\w-]+")


class BadAnswer(Exception):
    """A provider's answer that is not what its documentation says it sends."""


class Search(NamedTuple):
    path: str
    params: dict[str, str]


def _text(value: object, limit: int = MAX_FIELD_CHARS) -> str | None:
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())
    return text[:limit] or None


def _object(parent: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = parent.get(key)
    return value if isinstance(value, Mapping) else {}


def _year(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 1000 < value < 3000 else None


def _url(value: object) -> str | None:
    text = _text(value)
    return text if text and text.startswith(("https://", "http://")) else None


# --- OpenAlex -----------------------------------------------------------------------------------------


def openalex_search(query: str, limit: int, years: tuple[int, int] | None, mailto: str | None) -> Search:
    params = {"search": query, "per-page": str(limit), "select": OPENALEX_FIELDS}
    if years:
        params["filter"] = f"publication_year:{years[0]}-{years[1]}"
    if mailto:
        params["mailto"] = mailto
    return Search("/works", params)


def abstract_from_index(index: object) -> str | None:
    """OpenAlex's `abstract_inverted_index` (word -> positions) as the abstract's text."""
    if not isinstance(index, Mapping):
        return None
    placed: dict[int, str] = {}
    for word, positions in index.items():
        if isinstance(word, str) and isinstance(positions, list):
            for p in positions:
                if isinstance(p, int) and 0 <= p < MAX_ABSTRACT_CHARS:
                    placed[p] = word
    return _text(" ".join(placed[p] for p in sorted(placed)), MAX_ABSTRACT_CHARS) if placed else None


def openalex_works(payload: object) -> list[OnlineWork]:
    results = payload.get("results") if isinstance(payload, Mapping) else None
    if not isinstance(results, list):
        raise BadAnswer("OpenAlex's answer has no list of results")
    out = []
    for r in results:
        if not isinstance(r, Mapping) or not (title := _text(r.get("display_name") or r.get("title"), MAX_TITLE_CHARS)):
            continue
        authors = tuple(name for a in (r.get("authorships") or [])[:MAX_AUTHORS] if isinstance(a, Mapping)
                        and isinstance(a.get("author"), Mapping) and (name := _text(a["author"].get("display_name"))))
        location, oa, best = _object(r, "primary_location"), _object(r, "open_access"), _object(r, "best_oa_location")
        source = _object(location, "source")
        doi = bare_doi(r.get("doi"))
        out.append(OnlineWork(
            "openalex", title, authors, _year(r.get("publication_year")), _text(source.get("display_name")),
            abstract_from_index(r.get("abstract_inverted_index")), doi,
            _url(location.get("landing_page_url")) or (f"https://doi.org/{doi}" if doi else _url(r.get("id"))),
            _url(best.get("pdf_url")) or _url(oa.get("oa_url")),
        ))
    return out


# --- arXiv --------------------------------------------------------------------------------------------


def arxiv_search(query: str, limit: int, years: tuple[int, int] | None) -> Search:
    words = [w for w in _WORD_RE.findall(query) if len(w) > 2][:ARXIV_MAX_TERMS] or [query.strip()]
    terms = " AND ".join(f"all:{w}" for w in words)
    if years:  # the submission date, GMT, to the minute (user manual section 5.1)
        terms += f" AND submittedDate:[{years[0]}01010000 TO {years[1]}12312359]"
    return Search("/api/query", {"search_query": terms, "start": "0", "max_results": str(limit),
                                 "sortBy": "relevance", "sortOrder": "descending"})


def arxiv_works(body: bytes, years: tuple[int, int] | None) -> list[OnlineWork]:
    try:
        feed = ET.fromstring(body)  # noqa: S314 - the stdlib parser expands no external entities
    except ET.ParseError as exc:
        raise BadAnswer(f"arXiv's answer is not an Atom feed ({exc})") from None
    if feed.tag != f"{_ATOM}feed":
        raise BadAnswer("arXiv's answer is not an Atom feed")
    out = []
    for entry in feed.iter(f"{_ATOM}entry"):
        title = _text(entry.findtext(f"{_ATOM}title"), MAX_TITLE_CHARS)
        abs_url = _url(entry.findtext(f"{_ATOM}id"))
        if title == "Error":  # arXiv reports a refused query as an entry titled Error (user manual 3.4)
            raise BadAnswer(f"arXiv refused the query: {_text(entry.findtext(f'{_ATOM}summary')) or 'no reason given'}")
        if not title or not abs_url:
            continue
        published = entry.findtext(f"{_ATOM}published") or ""
        year = int(published[:4]) if published[:4].isdigit() else None
        if years and year and not years[0] <= year <= years[1]:
            continue
        pdf = next((link.get("href") for link in entry.iter(f"{_ATOM}link") if link.get("title") == "pdf"), None)
        out.append(OnlineWork(
            "arxiv", title,
            tuple(n for a in list(entry.iter(f"{_ATOM}author"))[:MAX_AUTHORS] if (n := _text(a.findtext(f"{_ATOM}name")))),
            year, _text(entry.findtext(f"{_ARXIV}journal_ref")), _text(entry.findtext(f"{_ATOM}summary"), MAX_ABSTRACT_CHARS),
            bare_doi(entry.findtext(f"{_ARXIV}doi")), abs_url, _url(pdf),
            abs_url.rsplit("/abs/", 1)[-1].rsplit("v", 1)[0] if "/abs/" in abs_url else None,
        ))
    return out


# --- Crossref -----------------------------------------------------------------------------------------


def crossref_search(query: str, limit: int, years: tuple[int, int] | None, mailto: str | None) -> Search:
    params = {"query.bibliographic": query, "rows": str(limit), "select": CROSSREF_FIELDS}
    if years:
        params["filter"] = f"from-pub-date:{years[0]},until-pub-date:{years[1]}"
    if mailto:
        params["mailto"] = mailto
    return Search("/works", params)


def _jats(value: object) -> str | None:
    """A JATS abstract as text: its heading ("Abstract") dropped, the markup removed."""
    if not isinstance(value, str):
        return None
    return _text(_TAGS_RE.sub(" ", _JATS_TITLE_RE.sub(" ", value)), MAX_ABSTRACT_CHARS)


def _first(value: object) -> str | None:
    return _text(value[0], MAX_TITLE_CHARS) if isinstance(value, list) and value else None


def crossref_work(doi: str, mailto: str | None) -> Search:
    """One work by its DOI (`/works/{doi}`): what adding an item from a DOI reads."""
    return Search("/works/" + quote(doi, safe="/:;()"), {"mailto": mailto} if mailto else {})


def _crossref_item(it: object) -> OnlineWork | None:
    if not isinstance(it, Mapping) or not (title := _first(it.get("title"))):
        return None
    authors = tuple(" ".join(p for p in (_text(a.get("given")), _text(a.get("family"))) if p) or (_text(a.get("name")) or "")
                    for a in (it.get("author") or [])[:MAX_AUTHORS] if isinstance(a, Mapping))
    parts = _object(it, "issued").get("date-parts")
    parts = parts if isinstance(parts, list) else []
    year = _year(parts[0][0]) if parts and isinstance(parts[0], list) and parts[0] else None
    doi = bare_doi(it.get("DOI"))
    # Crossref's `link`s are publishers' text-mining links, often behind a paywall: no open-access URL.
    return OnlineWork("crossref", title, tuple(a for a in authors if a), year, _first(it.get("container-title")),
                      _jats(it.get("abstract")), doi, _url(it.get("URL")) or (f"https://doi.org/{doi}" if doi else None))


def crossref_works(payload: object) -> list[OnlineWork]:
    message = payload.get("message") if isinstance(payload, Mapping) else None
    items = message.get("items") if isinstance(message, Mapping) else None
    if not isinstance(items, list):
        raise BadAnswer("Crossref's answer has no list of items")
    return [w for it in items if (w := _crossref_item(it)) is not None]


def crossref_single(payload: object) -> OnlineWork:
    """`/works/{doi}`'s answer: `{"message-type": "work", "message": {...}}`."""
    message = payload.get("message") if isinstance(payload, Mapping) else None
    work = _crossref_item(message)
    if work is None:
        raise BadAnswer("Crossref's answer has no work with a title")
    return work


PROVIDERS: Final[tuple[Provider, ...]] = ("openalex", "arxiv", "crossref")
