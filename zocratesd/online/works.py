"""A scholarly work found online, as every provider's answer is read into it, and how the answers
of several providers become one list: the same work (same DOI; else the same title and year) is
kept once, with each field taken from the provider that has it."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Literal

import msgspec

Provider = Literal["openalex", "arxiv", "crossref"]
# Where a field is missing in one answer, the first provider in this order that has it fills it.
PROVIDER_ORDER: tuple[Provider, ...] = ("openalex", "crossref", "arxiv")
_DOI_RE = re.compile(r"10\.\d{4,9}/\S+", re.IGNORECASE)


class OnlineWork(msgspec.Struct, frozen=True):
    provider: Provider
    title: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    venue: str | None = None
    abstract: str | None = None
    doi: str | None = None  # bare and lower-case: 10.1234/abc
    url: str | None = None  # the work's landing page
    oa_url: str | None = None  # a free full text (open access), when one is known
    arxiv_id: str | None = None
    providers: tuple[Provider, ...] = ()  # every provider that returned it, once merged


def bare_doi(value: object) -> str | None:
    """`https://doi.org/10.1/X`, `doi:10.1/X` or `10.1/X` as `10.1/x`; None for anything else."""
    if not isinstance(value, str):
        return None
    m = _DOI_RE.search(value)
    return m.group(0).rstrip(".,;)").lower() if m else None


def title_key(title: str) -> str:
    """A title as compared across providers: letters and digits only, accents and case folded."""
    folded = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode().casefold()
    return re.sub(r"[^a-z0-9]+", "", folded)


def _same(a: OnlineWork, b: OnlineWork) -> bool:
    if a.doi and b.doi:
        return a.doi == b.doi
    if a.arxiv_id and b.arxiv_id:
        return a.arxiv_id == b.arxiv_id
    close_years = a.year is None or b.year is None or abs(a.year - b.year) <= 1  # a preprint a year before
    return close_years and title_key(a.title) == title_key(b.title)


def _fill(kept: OnlineWork, other: OnlineWork) -> OnlineWork:
    """`kept` with what it lacks taken from `other`."""
    return msgspec.structs.replace(
        kept, authors=kept.authors or other.authors, year=kept.year or other.year, venue=kept.venue or other.venue,
        abstract=kept.abstract or other.abstract, doi=kept.doi or other.doi, url=kept.url or other.url, oa_url=kept.oa_url or other.oa_url,
        arxiv_id=kept.arxiv_id or other.arxiv_id, providers=tuple(dict.fromkeys([*kept.providers, other.provider])),
    )


def merge(answers: Iterable[list[OnlineWork]]) -> list[OnlineWork]:
    """The works of several providers' answers, each once, in the order they first came (answers
    given in PROVIDER_ORDER, each ranked by its provider)."""
    merged: list[OnlineWork] = []
    for works in answers:
        for work in works:
            work = msgspec.structs.replace(work, providers=(work.provider,))
            for i, kept in enumerate(merged):
                if _same(kept, work):
                    merged[i] = _fill(kept, work)
                    break
            else:
                merged.append(work)
    return merged
