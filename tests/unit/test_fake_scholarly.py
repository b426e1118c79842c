"""Pins the scholarly stand-ins (tests/fake_scholarly.py) to what OpenAlex, arXiv and Crossref document, so a daemon
test that passes against them can be trusted against the services. Each assertion names its source; the facts are
gathered, with what is a guess, in /work/notes/scholarly-facts.md.
OA = https://docs.openalex.org (source: github.com/ourresearch/openalex-docs), AX = https://info.arxiv.org/help/api/user-manual.html,
CR = https://github.com/CrossRef/rest-api-doc (README.md, api_format.md), REC = the recorded arXiv answer of 2025-08-20
(github.com/autobib/rsxiv src/response/tests/)."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import httpx
import pytest
from fake_scholarly import (
    ATTENTION,
    GRAPH_ATTENTION,
    RAG,
    REFERENCE_MANAGERS,
    SAMPLE_WORKS,
    FakeArxiv,
    FakeCrossref,
    FakeOpenAlex,
    parse_query,
    refused_port,
    valid_arxiv_id,
    words,
)
from zoterofixture import sample_library

NS = {"a": "http://www.w3.org/2005/Atom", "arxiv": "http://arxiv.org/schemas/atom", "os": "http://a9.com/-/spec/opensearch/1.1/"}

CORPUS = SAMPLE_WORKS


@pytest.fixture
def oa() -> Iterator[FakeOpenAlex]:
    with FakeOpenAlex(CORPUS) as s:
        yield s


@pytest.fixture
def ax() -> Iterator[FakeArxiv]:
    with FakeArxiv(CORPUS) as s:
        yield s


@pytest.fixture
def cr() -> Iterator[FakeCrossref]:
    with FakeCrossref(CORPUS) as s:
        yield s


def feed(r: httpx.Response) -> ET.Element:
    return ET.fromstring(r.content)


def entries(r: httpx.Response) -> list[ET.Element]:
    return feed(r).findall("a:entry", NS)


def arxiv_ids(r: httpx.Response) -> list[str]:
    return [e.findtext("a:id", namespaces=NS).rsplit("/abs/", 1)[1] for e in entries(r)]


def total(r: httpx.Response) -> int:
    return int(feed(r).findtext("os:totalResults", namespaces=NS).strip())


def rebuild(index: dict[str, list[int]]) -> str:
    return " ".join(w for _, w in sorted((p, w) for w, ps in index.items() for p in ps))


# ---- OpenAlex ----------------------------------------------------------------------------------------------------

def test_openalex_list_envelope(oa: FakeOpenAlex) -> None:
    body = httpx.get(oa.base_url + "/works", params={"search": "attention"}).json()
    assert set(body) == {"meta", "results", "group_by"}  # OA api-entities/works/get-lists-of-works.md
    assert body["meta"]["count"] == 2 and body["meta"]["page"] == 1 and body["meta"]["per_page"] == 25  # same page; paging.md: default 25


def test_openalex_per_page_limits_the_results(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"search": "attention", "per-page": "1"})
    assert len(r.json()["results"]) == 1 and r.json()["meta"]["count"] == 2  # OA paging.md "per-page"


def test_openalex_per_page_over_200_is_a_403_query_error(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"search": "attention", "per-page": "201"})
    assert r.status_code == 403  # OA paging.md: 1..200; 403 for bad parameters: ropensci/openalexR#202, pyalex api.py
    assert r.json()["error"] == "Invalid query parameters error." and r.json()["message"]


def test_openalex_search_looks_in_title_and_abstract(oa: FakeOpenAlex) -> None:
    titles = [w["title"] for w in httpx.get(oa.base_url + "/works", params={"search": "recurrent"}).json()["results"]]
    assert titles == [ATTENTION.title]  # OA api-entities/works/search-works.md: titles, abstracts, fulltext ("recurrent" is in the abstract only)


def test_openalex_search_matches_whole_words_only(oa: FakeOpenAlex) -> None:
    assert httpx.get(oa.base_url + "/works", params={"search": "atten"}).json()["meta"]["count"] == 0  # OA search-entities.md: "lun" does not match "lunar"


def test_openalex_search_results_carry_a_descending_relevance_score(oa: FakeOpenAlex) -> None:
    results = httpx.get(oa.base_url + "/works", params={"search": "attention"}).json()["results"]
    scores = [w["relevance_score"] for w in results]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)  # OA search-entities.md "Relevance score"


def test_openalex_boolean_search(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"search": "(attention OR retrieval) NOT graph"})
    assert {w["title"] for w in r.json()["results"]} == {ATTENTION.title, RAG.title}  # OA search-entities.md "Boolean searches"


def test_openalex_abstract_is_an_inverted_index(oa: FakeOpenAlex) -> None:
    work = httpx.get(oa.base_url + "/works", params={"search": "transformer"}).json()["results"][0]
    assert rebuild(work["abstract_inverted_index"]) == ATTENTION.abstract  # OA work-object/README.md abstract_inverted_index


def test_openalex_abstract_may_be_null(oa: FakeOpenAlex) -> None:
    work = httpx.get(oa.base_url + "/works", params={"search": "graph"}).json()["results"][0]
    assert work["abstract_inverted_index"] is None  # OA work-object/README.md "Abstract inverted index coverage"


def test_openalex_work_fields_the_daemon_reads(oa: FakeOpenAlex) -> None:
    w = httpx.get(oa.base_url + "/works", params={"search": "retrieval"}).json()["results"][0]
    assert w["doi"] == "https://doi.org/10.5555/3495724.3496517"  # OA work-object "doi": a full URL
    assert w["id"].startswith("https://openalex.org/W") and w["ids"]["openalex"] == w["id"]  # "id", "ids"
    assert w["title"] == w["display_name"] == RAG.title and w["publication_year"] == 2020  # "title", "publication_year"
    assert [a["author"]["display_name"] for a in w["authorships"]] == ["Patrick Lewis", "Ethan Perez"]  # authorship-object.md
    assert w["authorships"][0]["author_position"] == "first"  # authorship-object.md author_position
    assert w["primary_location"]["source"]["display_name"] == RAG.venue  # "primary_location", location-object.md
    assert w["best_oa_location"]["pdf_url"] == RAG.oa_url and w["open_access"]["is_oa"] is True  # "best_oa_location", "open_access"


def test_openalex_year_range_filter(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"search": "attention", "filter": "publication_year:2019-2022"})
    assert [w["title"] for w in r.json()["results"]] == [GRAPH_ATTENTION.title]  # OA api-guide-for-llms.md "Range"


def test_openalex_publication_date_filters_are_inclusive(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"filter": "from_publication_date:2020-05-22,to_publication_date:2021-09-01"})
    assert {w["title"] for w in r.json()["results"]} == {RAG.title, REFERENCE_MANAGERS.title}  # OA filter-works.md from_/to_publication_date


def test_openalex_unknown_filter_is_a_403(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"filter": "colour:blue"})
    assert r.status_code == 403 and "is not a valid field" in r.json()["message"]  # ropensci/openalexR#202


def test_openalex_select_returns_only_those_root_fields(oa: FakeOpenAlex) -> None:
    w = httpx.get(oa.base_url + "/works", params={"search": "retrieval", "select": "id,doi,display_name"}).json()["results"][0]
    assert set(w) == {"id", "doi", "display_name"}  # OA select-fields.md


def test_openalex_select_of_a_nested_field_is_an_error(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"select": "open_access.is_oa"})
    assert r.status_code == 403  # OA select-fields.md "Limitations": only root-level fields


def test_openalex_single_work_by_doi(oa: FakeOpenAlex) -> None:
    assert httpx.get(oa.base_url + "/works/https://doi.org/10.1108/JD-01-2021-0001").json()["title"] == REFERENCE_MANAGERS.title  # OA get-a-single-work.md
    assert httpx.get(oa.base_url + "/works/doi:10.1108/jd-01-2021-0001").json()["title"] == REFERENCE_MANAGERS.title
    assert httpx.get(oa.base_url + "/works/doi:10.1/none").status_code == 404  # api-guide-for-llms.md "404 Not Found"


def test_openalex_cursor_paging(oa: FakeOpenAlex) -> None:
    url, seen, cursor = oa.base_url + "/works", [], "*"
    while True:  # OA paging.md "Cursor paging": until next_cursor is null and results are empty
        body = httpx.get(url, params={"filter": "publication_year:2017-2022", "per-page": "2", "cursor": cursor}).json()
        seen += [w["title"] for w in body["results"]]
        assert body["meta"]["page"] is None
        if body["meta"]["next_cursor"] is None:
            break
        cursor = body["meta"]["next_cursor"]
    assert body["results"] == [] and len(seen) == len(set(seen)) == 5


def test_openalex_rate_limit_headers(oa: FakeOpenAlex) -> None:
    r = httpx.get(oa.base_url + "/works", params={"search": "x"})
    assert r.headers["X-RateLimit-Limit"] == "100000" and r.headers["X-RateLimit-Remaining"] == "99990"  # OA rate-limits-and-authentication.md: 10 credits a list
    assert r.headers["X-RateLimit-Credits-Used"] == "10" and int(r.headers["X-RateLimit-Reset"]) <= 86400


def test_openalex_sees_the_polite_pool_mailto(oa: FakeOpenAlex) -> None:
    httpx.get(oa.base_url + "/works", params={"search": "x", "mailto": "me@example.org"}, headers={"User-Agent": "zocrates (mailto:me@example.org)"})
    got = oa.received[0]
    assert got.param("mailto") == "me@example.org" and "mailto:me@example.org" in got.headers["user-agent"]  # OA rate-limits-and-authentication.md "The polite pool"


# ---- arXiv -------------------------------------------------------------------------------------------------------

def test_arxiv_answers_an_atom_feed_with_opensearch_counts(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "all:attention", "max_results": "1"})
    assert r.headers["content-type"].startswith("application/atom+xml")  # AX 3.2: everything is Atom 1.0
    f = feed(r)
    assert f.tag == "{http://www.w3.org/2005/Atom}feed" and total(r) == 1  # AX 3.3.1.2 opensearch:totalResults
    assert f.findtext("os:startIndex", namespaces=NS) == "0" and f.findtext("os:itemsPerPage", namespaces=NS) == "1"
    assert f.findtext("a:title", namespaces=NS).startswith("ArXiv Query: search_query=all:attention")  # AX 3.3.1.1


def test_arxiv_feed_children_come_in_the_recorded_order(ax: FakeArxiv) -> None:
    f = feed(httpx.get(ax.base_url + "/api/query", params={"search_query": "ti:attention OR ti:retrieval"}))
    tags = [c.tag.split("}")[1] for c in f]
    assert tags == ["link", "title", "id", "updated", "totalResults", "startIndex", "itemsPerPage", "entry", "entry"]  # REC query.xml
    assert f.find("a:link", NS).get("rel") == "self"  # the feed's own link comes before any entry


def test_arxiv_submitted_date_takes_the_manuals_plus_signs(ax: FakeArxiv) -> None:
    url = ax.base_url + "/api/query?search_query=all:generation+AND+submittedDate:[202001010000%2BTO%2B202012312359]"
    assert arxiv_ids(httpx.get(url)) == ["2005.11401v1"]  # AX 5.1 writes [YYYYMMDDTTTT+TO+YYYYMMDDTTTT]


def test_arxiv_entry_elements(ax: FakeArxiv) -> None:
    e = entries(httpx.get(ax.base_url + "/api/query", params={"id_list": "1706.03762"}))[0]
    assert e.findtext("a:id", namespaces=NS) == "http://arxiv.org/abs/1706.03762v7"  # AX 3.3.2.1 <id>
    assert " ".join(e.findtext("a:title", namespaces=NS).split()) == ATTENTION.title  # <title>
    assert " ".join(e.findtext("a:summary", namespaces=NS).split()) == ATTENTION.abstract  # AX 3.3.2.2 <summary>
    assert [a.findtext("a:name", namespaces=NS) for a in e.findall("a:author", NS)] == ["Ashish Vaswani", "Noam Shazeer", "Niki Parmar"]
    assert e.findtext("a:published", namespaces=NS) == "2017-06-12T12:00:00Z"  # AX 3.3.2.1 <published>: v1 submission
    assert e.findtext("arxiv:doi", namespaces=NS) == ATTENTION.doi  # AX 3.3.2.4 <arxiv:doi>
    assert e.findtext("arxiv:journal_ref", namespaces=NS) == ATTENTION.venue  # <arxiv:journal_ref>
    assert e.find("arxiv:primary_category", NS).get("term") == "cs.CL"  # <arxiv:primary_category>
    links = {(link.get("rel"), link.get("title")): link.get("href") for link in e.findall("a:link", NS)}
    assert links[("alternate", None)] == "http://arxiv.org/abs/1706.03762v7"  # AX 3.3.2.3: abstract page, always
    assert links[("related", "pdf")] == "http://arxiv.org/pdf/1706.03762v7"  # pdf, always
    assert links[("related", "doi")] == "http://dx.doi.org/" + ATTENTION.doi  # doi, when there is one


def test_arxiv_titles_and_summaries_are_hard_wrapped(ax: FakeArxiv) -> None:
    e = entries(httpx.get(ax.base_url + "/api/query", params={"id_list": "2005.11401"}))[0]
    summary = e.findtext("a:summary", namespaces=NS)
    assert summary.startswith("  ") and summary.endswith("\n") and "\n" in summary.strip()  # REC query.xml


def test_arxiv_feed_holds_only_arxiv_works(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "all:zotero"})
    assert total(r) == 0 and entries(r) == []  # REFERENCE_MANAGERS has no arXiv id


def test_arxiv_boolean_query(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "all:attention AND all:recurrent"})
    assert arxiv_ids(r) == ["1706.03762v7"]  # AX 5.1 Boolean AND
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "ti:attention OR ti:retrieval"})
    assert sorted(arxiv_ids(r)) == ["1706.03762v7", "2005.11401v1"]  # OR
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "abs:networks ANDNOT (au:vaswani OR ti:graph)"})
    assert arxiv_ids(r) == []  # ANDNOT and ( ), AX 5.1


def test_arxiv_field_prefixes_and_phrases(ax: FakeArxiv) -> None:
    assert arxiv_ids(httpx.get(ax.base_url + "/api/query", params={"search_query": "au:lewis"})) == ["2005.11401v1"]  # AX 5.1 prefix au
    assert arxiv_ids(httpx.get(ax.base_url + "/api/query", params={"search_query": "ti:recurrent"})) == []  # ti: is the title only
    assert arxiv_ids(httpx.get(ax.base_url + "/api/query", params={"search_query": 'abs:"attention mechanisms"'})) == ["1706.03762v7"]  # phrase in %22
    assert arxiv_ids(httpx.get(ax.base_url + "/api/query", params={"search_query": "cat:cs.LG"})) == ["1706.03762v7"]  # cat


def test_arxiv_submitted_date_filter(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "all:attention AND submittedDate:[201901010000 TO 202212312359]"})
    assert arxiv_ids(r) == []  # AX 5.1: submittedDate:[YYYYMMDDTTTT+TO+YYYYMMDDTTTT]
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "all:generation AND submittedDate:[202001010000 TO 202012312359]"})
    assert arxiv_ids(r) == ["2005.11401v1"]


def test_arxiv_start_and_max_results_page(ax: FakeArxiv) -> None:
    q = {"search_query": "ti:attention OR ti:retrieval", "sortBy": "submittedDate", "sortOrder": "ascending"}
    first = httpx.get(ax.base_url + "/api/query", params={**q, "start": "0", "max_results": "1"})
    second = httpx.get(ax.base_url + "/api/query", params={**q, "start": "1", "max_results": "1"})
    assert arxiv_ids(first) == ["1706.03762v7"] and arxiv_ids(second) == ["2005.11401v1"]  # AX 3.1.1.2 paging, 3.1.1.3 sort
    assert total(first) == 2


def test_arxiv_max_results_defaults_to_10(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"search_query": "all:attention"})
    assert feed(r).findtext("os:itemsPerPage", namespaces=NS) == "10"  # AX 3.1.1 default max_results 10


def test_arxiv_id_list_keeps_its_order_and_takes_versions(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"id_list": "2005.11401,1706.03762v7"})
    assert arxiv_ids(r) == ["2005.11401v1", "1706.03762v7"]  # AX 3.1.1.1 id_list; 5.1.1 versions


def test_arxiv_id_list_and_query_filter_each_other(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"id_list": "2005.11401,1706.03762", "search_query": "all:retrieval"})
    assert arxiv_ids(r) == ["2005.11401v1"]  # AX 3.1.1.1: articles in id_list that also match


def test_arxiv_missing_well_formed_id_says_one_result_and_has_none(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"id_list": "1201.56789"})
    assert r.status_code == 200 and total(r) == 1 and entries(r) == []  # REC query_empty.xml


def test_arxiv_error_is_a_feed_with_one_entry_titled_error(ax: FakeArxiv) -> None:
    r = httpx.get(ax.base_url + "/api/query", params={"id_list": "1234.12345"})
    assert r.status_code == 400  # arXiv/arxiv-search#257: the classic API's 400
    (e,) = entries(r)
    assert e.findtext("a:title", namespaces=NS) == "Error"  # AX 3.4
    assert e.findtext("a:summary", namespaces=NS) == "incorrect id format for 1234.12345"
    assert e.findtext("a:id", namespaces=NS) == "http://arxiv.org/api/errors#incorrect_id_format_for_1234.12345"
    assert e.findtext("a:author/a:name", namespaces=NS) == "arXiv api core"


def test_arxiv_error_status_can_be_200() -> None:
    with FakeArxiv(CORPUS, error_status=200) as ax:
        r = httpx.get(ax.base_url + "/api/query", params={"start": "-1"})
        assert r.status_code == 200 and entries(r)[0].findtext("a:summary", namespaces=NS) == "start must be >= 0"  # AX 3.4 table


@pytest.mark.parametrize(("params", "message"), [
    ({"start": "x"}, "start must be an integer"), ({"max_results": "x"}, "max_results must be an integer"),
    ({"max_results": "-1"}, "max_results must be >= 0"), ({"id_list": "cond—mat/0709123"}, "incorrect id format for cond—mat/0709123"),
])
def test_arxiv_documented_errors(ax: FakeArxiv, params: dict[str, str], message: str) -> None:
    assert entries(httpx.get(ax.base_url + "/api/query", params=params))[0].findtext("a:summary", namespaces=NS) == message  # AX 3.4 table


def test_arxiv_more_than_30000_results_is_a_400(ax: FakeArxiv) -> None:
    assert httpx.get(ax.base_url + "/api/query", params={"search_query": "all:x", "max_results": "30001"}).status_code == 400  # AX 3.1.1.2


def test_arxiv_identifier_forms() -> None:
    assert valid_arxiv_id("1706.03762") and valid_arxiv_id("0704.0001") and valid_arxiv_id("hep-ph/9411242v1")  # arxiv_identifier
    assert not valid_arxiv_id("1234.1234") and not valid_arxiv_id("1234.12345")  # AX 3.4 table: malformed (month 34)
    assert valid_arxiv_id("1201.56789")  # REC query_empty.xml: no error for it


# ---- Crossref ----------------------------------------------------------------------------------------------------

def test_crossref_work_list_envelope(cr: FakeCrossref) -> None:
    body = httpx.get(cr.base_url + "/works", params={"query": "attention"}).json()
    assert body["status"] == "ok" and body["message-type"] == "work-list"  # CR README "Lists"
    assert body["message"]["total-results"] == 1 and len(body["message"]["items"]) == 1 and body["message"]["items-per-page"] == 20  # README "Rows": 20


def test_crossref_rows_limits_the_items(cr: FakeCrossref) -> None:
    m = httpx.get(cr.base_url + "/works", params={"query": "neural reference", "rows": "1"}).json()["message"]
    assert len(m["items"]) == 1 and m["total-results"] == 3  # CR README "Rows"


def test_crossref_rows_zero_gives_the_summary_only(cr: FakeCrossref) -> None:
    m = httpx.get(cr.base_url + "/works", params={"query": "neural", "rows": "0"}).json()["message"]
    assert m["items"] == [] and m["total-results"] == 2  # CR README "Rows": rows=0


def test_crossref_more_than_1000_rows_is_a_validation_failure(cr: FakeCrossref) -> None:
    r = httpx.get(cr.base_url + "/works", params={"query": "x", "rows": "1001"})
    assert r.status_code == 400 and r.json()["message-type"] == "validation-failure"  # CR README "Rows": max 1000 (body: guess)


def test_crossref_query_matches_any_token_and_ranks_by_score(cr: FakeCrossref) -> None:
    items = httpx.get(cr.base_url + "/works", params={"query": "retrieval generation humanities"}).json()["message"]["items"]
    assert [i["title"][0] for i in items] == [RAG.title, REFERENCE_MANAGERS.title]  # CR README "Field queries": "richard or feynman (or both)", sort by score
    assert items[0]["score"] > items[1]["score"]


def test_crossref_query_does_not_search_abstracts(cr: FakeCrossref) -> None:
    assert httpx.get(cr.base_url + "/works", params={"query": "historians"}).json()["message"]["total-results"] == 0  # rcrossref docs: titles, authors, not abstracts


def test_crossref_field_queries(cr: FakeCrossref) -> None:
    m = httpx.get(cr.base_url + "/works", params={"query.author": "lovelace"}).json()["message"]
    assert [i["DOI"] for i in m["items"]] == ["10.1108/jd-01-2021-0001"]  # CR README "Field queries" query.author
    m = httpx.get(cr.base_url + "/works", params={"query.bibliographic": "reference managers 2021"}).json()["message"]
    assert m["items"][0]["DOI"] == "10.1108/jd-01-2021-0001"  # query.bibliographic: titles, authors, years


def test_crossref_pub_date_filter_is_inclusive_of_whole_years(cr: FakeCrossref) -> None:
    m = httpx.get(cr.base_url + "/works", params={"filter": "from-pub-date:2021,until-pub-date:2022"}).json()["message"]
    assert {i["DOI"] for i in m["items"]} == {"10.1108/jd-01-2021-0001", "10.1162/neco.2022.1"}  # CR README filters, "Notes on dates"


def test_crossref_unknown_filter_is_a_validation_failure(cr: FakeCrossref) -> None:
    r = httpx.get(cr.base_url + "/works", params={"filter": "colour:blue"})
    assert r.status_code == 400 and r.json()["message"][0]["type"] == "filter-not-available"  # shape: guess (facts file)


def test_crossref_cursor_paging(cr: FakeCrossref) -> None:
    m = httpx.get(cr.base_url + "/works", params={"rows": "3", "cursor": "*"}).json()["message"]
    assert len(m["items"]) == 3 and m["next-cursor"]  # CR README "Deep paging with cursors"
    m2 = httpx.get(cr.base_url + "/works", params={"rows": "3", "cursor": m["next-cursor"]}).json()["message"]
    assert len(m2["items"]) == 1  # fewer than rows: the end
    m3 = httpx.get(cr.base_url + "/works", params={"rows": "3", "cursor": m2["next-cursor"]}).json()["message"]
    assert m3["items"] == []  # "Using next-cursor beyond this point will result in responses with an empty items list"


def test_crossref_select(cr: FakeCrossref) -> None:
    items = httpx.get(cr.base_url + "/works", params={"query": "zotero reference", "select": "DOI,title"}).json()["message"]["items"]
    assert set(items[0]) == {"DOI", "title"}  # CR README "Selecting which elements to return"


def test_crossref_work_fields_the_daemon_reads(cr: FakeCrossref) -> None:
    w = httpx.get(cr.base_url + "/works/10.5555/3495724.3496517").json()["message"]
    assert w["DOI"] == "10.5555/3495724.3496517" and w["URL"] == "https://doi.org/10.5555/3495724.3496517"  # CR api_format.md DOI, URL
    assert w["title"] == [RAG.title] and w["container-title"] == [RAG.venue]  # title, container-title: lists
    assert [(a["given"], a["family"]) for a in w["author"]] == [("Patrick", "Lewis"), ("Ethan", "Perez")]  # Contributor given/family
    assert w["issued"]["date-parts"] == [[2020, 5, 22]]  # Partial Date: nested list
    assert w["abstract"].startswith("<jats:") and "<jats:p>Large pre-trained" in w["abstract"]  # abstract: a JATS XML snippet
    assert w["link"][0]["URL"] == RAG.oa_url and w["link"][0]["intended-application"] == "text-mining"  # Resource Link


def test_crossref_singleton_envelope(cr: FakeCrossref) -> None:
    body = httpx.get(cr.base_url + "/works/10.1108/JD-01-2021-0001").json()
    assert body["status"] == "ok" and body["message-type"] == "work" and body["message"]["DOI"] == "10.1108/jd-01-2021-0001"  # CR README "Singletons"


def test_crossref_unknown_doi_is_404_resource_not_found(cr: FakeCrossref) -> None:
    r = httpx.get(cr.base_url + "/works/10.9999/none")
    assert r.status_code == 404 and r.text == "Resource not found." and r.headers["content-type"].startswith("text/plain")  # CrossRef/rest-api-doc#486


def test_crossref_does_not_hold_arxivs_datacite_dois(cr: FakeCrossref) -> None:
    assert httpx.get(cr.base_url + "/works/10.48550/arXiv.1706.03762").status_code == 404  # CR README: non-Crossref DOIs are 404


def test_crossref_rate_limit_headers(cr: FakeCrossref) -> None:
    r = httpx.get(cr.base_url + "/works", params={"query": "x"})
    assert r.headers["X-Rate-Limit-Limit"] == "50" and r.headers["X-Rate-Limit-Interval"] == "1s"  # CR README "Rate limits"


# ---- the sample corpus ---------------------------------------------------------------------------------------------

def test_sample_rag_is_the_test_librarys_lewis202_but_for_the_doi() -> None:
    lewis = next(i for i in sample_library()[0] if i.key == "LEWIS202")
    assert (lewis.title, lewis.date) == (RAG.title, str(RAG.year)) and RAG.arxiv_id in (lewis.url or "")
    assert (lewis.doi or "").lower() != (RAG.doi or "").lower()


# ---- the query language -------------------------------------------------------------------------------------------

def test_query_parser_precedence_and_adjacent_terms() -> None:
    assert parse_query("a b OR c", fields=False, not_op="NOT") == (
        "or", ("and", ("term", ("word", "all", "a")), ("term", ("word", "all", "b"))), ("term", ("word", "all", "c")))
    assert parse_query('ti:"x y" ANDNOT au:z', fields=True, not_op="ANDNOT") == (
        "andnot", ("term", ("phrase", "ti", "x y")), ("term", ("word", "au", "z")))
    assert words("The Networks of a Class") == ["network", "class"]


# ---- hostile modes, every service ---------------------------------------------------------------------------------

SERVICES = {
    "openalex": (FakeOpenAlex, "/works", {"search": "attention"}),
    "arxiv": (FakeArxiv, "/api/query", {"search_query": "all:attention"}),
    "crossref": (FakeCrossref, "/works", {"query": "attention"}),
}


@pytest.fixture(params=sorted(SERVICES))
def svc(request: pytest.FixtureRequest) -> Iterator[tuple[FakeOpenAlex | FakeArxiv | FakeCrossref, str, dict[str, str]]]:
    cls, path, params = SERVICES[request.param]
    with cls(CORPUS) as s:
        yield s, s.base_url + path, params


def parses(service: object, body: bytes) -> bool:
    try:
        ET.fromstring(body) if isinstance(service, FakeArxiv) else json.loads(body)
    except (ET.ParseError, ValueError):
        return False
    return True


def test_rate_limit_n_times_then_normal(svc: tuple) -> None:
    s, url, params = svc
    s.rate_limit(times=2, retry_after="3")
    first, second, third = (httpx.get(url, params=params) for _ in range(3))
    assert first.status_code == second.status_code == 429 and first.headers["Retry-After"] == "3"
    assert third.status_code == 200 and parses(s, third.content)


def test_rate_limit_without_retry_after(svc: tuple) -> None:
    s, url, params = svc
    s.rate_limit(retry_after=None)
    r = httpx.get(url, params=params)
    assert r.status_code == 429 and "retry-after" not in r.headers


def test_server_error_once(svc: tuple) -> None:
    s, url, params = svc
    s.server_error()
    assert httpx.get(url, params=params).status_code == 500
    assert httpx.get(url, params=params).status_code == 200


def test_malformed_body_does_not_parse(svc: tuple) -> None:
    s, url, params = svc
    s.malformed()
    r = httpx.get(url, params=params)
    assert r.status_code == 200 and r.headers["content-type"] == s.content_type and not parses(s, r.content)


def test_huge_body_is_exactly_nbytes_and_well_formed(svc: tuple) -> None:
    s, url, params = svc
    s.huge(nbytes=10 * 1024 * 1024)
    with httpx.stream("GET", url, params=params) as r:
        assert r.headers["content-length"] == str(10 * 1024 * 1024)
        body = b"".join(r.iter_bytes())
    assert len(body) == 10 * 1024 * 1024 and parses(s, body)


def test_huge_body_stops_when_the_client_hangs_up(svc: tuple) -> None:
    s, url, params = svc
    s.huge(nbytes=64 * 1024 * 1024)
    with httpx.stream("GET", url, params=params) as r:
        got = 0
        for chunk in r.iter_bytes():
            got += len(chunk)
            if got >= 1024 * 1024:
                break
    s.wait_for_finished(1)
    assert s.bytes_sent < 64 * 1024 * 1024  # generated as sent, never all of it


def test_huge_body_without_length_ends_at_close(svc: tuple) -> None:
    s, url, params = svc
    s.huge(nbytes=2 * 1024 * 1024, content_length=False)
    with httpx.stream("GET", url, params=params) as r:
        assert "content-length" not in r.headers and r.headers["connection"] == "close"
        assert sum(len(c) for c in r.iter_bytes()) == 2 * 1024 * 1024


def test_hang_never_answers_until_close(svc: tuple) -> None:
    s, url, params = svc
    s.hang()
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(url, params=params, timeout=httpx.Timeout(30, read=0.5))
    s.wait_for_hanging(1)
    t0 = time.monotonic()
    s.close()
    assert time.monotonic() - t0 < 10  # close() does not wait for the parked request
    s.wait_for_finished(1)


def test_close_cuts_kept_alive_connections_and_refuses_new_ones(svc: tuple) -> None:
    s, url, params = svc
    with httpx.Client() as client:
        assert client.get(url, params=params).status_code == 200
        s.close()
        with pytest.raises(httpx.TransportError):
            client.get(url, params=params)


def test_requests_are_recorded_with_path_query_and_headers(svc: tuple) -> None:
    s, url, params = svc
    httpx.get(url, params={**params, "mailto": "me@example.org"}, headers={"User-Agent": "zocrates/1 (mailto:me@example.org)"})
    (got,) = s.wait_for_requests(1)
    assert url.endswith(got.path) and got.param("mailto") == "me@example.org" and got.headers["user-agent"].startswith("zocrates/1")


def test_answers_are_deterministic(svc: tuple) -> None:
    s, url, params = svc
    assert httpx.get(url, params=params).content == httpx.get(url, params=params).content


def test_refused_port_refuses_at_once() -> None:
    with refused_port() as port:
        t0 = time.monotonic()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/works", timeout=30)
        assert time.monotonic() - t0 < 5
