"""An answer's quotes and claims against an item's pages (zocratesd/quotes): what counts as the
same text, what as a misquote, a wrong page, a wrong paper; and a quote traced to its page."""

from __future__ import annotations

from zocratesd.library.retrieval import Passage
from zocratesd.quotes.align import align
from zocratesd.quotes.find import find_in_passages
from zocratesd.quotes.text import ItemText, Page, letters, words
from zocratesd.quotes.verify import check_answer, claims, quotes_in

PAGES = [
    Page("Retrieval-augmented generation com-\nbines a parametric memory with a non-parametric one. The ﬁrst results "
         "were strong.", 3, "127", "ATTACH01"),
    Page("We found that the retriever improves factual accuracy on open domain questions by a wide margin.", 4, "128", "ATTACH01"),
    Page("Dense indexes of Wikipedia are refreshed every month, which keeps the retriever current.", 5, "129", "ATTACH01"),
]
OTHER = ItemText("OTHER001", "user", "Another paper", [Page("Hypothetical documents are embedded to find real ones.", 1, None, "ATTACH02")])


def item() -> ItemText:
    return ItemText("ITEM0001", "user", "RAG", list(PAGES))


def text_of(key: str, library: str) -> ItemText | None:
    return {"ITEM0001": item(), "OTHER001": OTHER}.get(key)


def listed(*pages: str) -> str:
    return f"\n\n# Cited Sources\n[1] Lewis (2020). RAG. pp. {', '.join(pages)}. (zotero://select/library/items/ITEM0001)"


def test_the_same_text_however_it_was_extracted_or_typed() -> None:
    # A line-end hyphen, a ligature, curly quotes, case and spacing: the same letters.
    assert letters("“Retrieval-Augmented  Generation combines”") == letters("retrieval-augmented generation com-\nbines")
    assert words("The ﬁrst  results") == ["the", "first", "results"]
    assert item().find("the first results were strong") == PAGES[0]
    assert item().find("the first results were weak") is None
    # Across a page break, the page where the quote starts.
    assert item().find("were strong. We found that the retriever") == PAGES[0]


def test_a_near_quote_aligns_where_it_is() -> None:
    page = words(PAGES[1].text)
    got = align(words("the retriever improved factual accuracy on open-domain questions by a large margin"), page)
    assert got is not None and 0.8 <= got.ratio < 1 and page[got.start] == "the"
    unrelated = align(words("sea ice extent declined sharply in the arctic summer"), page)
    assert unrelated is None or unrelated.ratio < 0.5


def test_markers_cite_the_sentence_before_them_and_quotes_are_three_words_or_more() -> None:
    found = claims('Intro text. RAG "combines two memories" [1, p. 127]; retrievers help [2][4].\n- A bullet quote [3]')
    assert [(c.numbers, c.page, c.text) for c in found] == [
        ((1,), "127", 'RAG "combines two memories"'), ((2,), None, "retrievers help"), ((4,), None, "retrievers help"),
        ((3,), None, "A bullet quote")]
    assert quotes_in('the term "RAG" and «a quoted sentence here»') == ["a quoted sentence here"]


def test_quotes_found_misquoted_invented_on_another_page_or_in_another_paper() -> None:
    answer = ('It “combines a parametric memory with a non-parametric one” [1, p. 128]. '
              'They say "the first results were weak" [1]. "Embedded to find real ones ... hypothetical documents" [1]. '
              '"The retriever improves factual accuracy [...] by a wide margin" [1, p. 128].') + listed("127", "128")
    (c,) = check_answer(answer, [{"n": 1, "item_key": "OTHER001", "library": "user"}], text_of).citations
    found, misquoted, elsewhere, ellipsis = c.checks
    assert (found.status, found.page, found.cited_page, found.page_corrected) == ("found", "127", "128", True)
    assert found.link == "zotero://open-pdf/library/items/ATTACH01?page=3"
    assert (misquoted.status, misquoted.page, misquoted.source_reads) == ("misquoted", "127", "the first results were strong")
    # Its pieces in another order are not the source's sentence; they are in the other paper neither.
    assert elsewhere.status == "not_found" and elsewhere.found_in is None
    assert (ellipsis.status, ellipsis.page, ellipsis.page_corrected) == ("found", "128", False)
    assert c.verified is False


def test_a_real_quote_given_to_the_wrong_paper_names_the_paper_that_has_it() -> None:
    answer = '"Hypothetical documents are embedded to find real ones" [1].' + listed("127")
    checked = check_answer(answer, [{"n": 1, "item_key": "OTHER001", "library": "user", "text": "x"}], text_of)
    (check,) = checked.citations[0].checks
    assert check.status == "not_found" and check.found_in is not None and check.found_in["item_key"] == "OTHER001"
    assert "not found in the cited source; it is in “Another paper”, p. 1." in checked.note


def test_claims_are_found_supported_or_unsupported() -> None:
    answer = ("Dense indexes of Wikipedia are refreshed every month [1]. "
              "The retriever improves accuracy on open domain questions [1]. "
              "Quantum annealers factor large primes efficiently [1].") + listed("129")
    (c,) = check_answer(answer, [], text_of).citations
    assert [(x.status, x.page) for x in c.checks] == [("found", "129"), ("supported", "128"), ("unsupported", None)]
    assert c.verified is False
    # An unsupported paraphrase flags its citation; the answer only prints what is a fact.
    assert check_answer(answer, [], text_of).note == ""


def test_numbered_passages_name_the_item_when_the_answer_lists_no_sources() -> None:
    passages = [{"n": 1, "item_key": "OTHER001", "library": "user", "page": 1}, {"n": 2, "item_key": "ITEM0001", "library": "user",
                                                                                 "page": 4, "page_label": "128"}]
    checked = check_answer('"The first results were strong" [2].', passages, text_of)
    (c,) = checked.citations
    assert (c.n, c.item_key, c.verified) == (2, "ITEM0001", True)
    assert (c.checks[0].cited_page, c.checks[0].page, c.checks[0].page_corrected) == ("128", "127", True)
    assert checked.note.endswith("on p. 127, not p. 128.")


def test_find_quote_over_passages_ranks_exact_first() -> None:
    passages = [Passage("ITEM0001", "RAG", p.text, page=p.page, page_label=p.label, attachment_key="ATTACH01") for p in PAGES]
    passages.append(Passage("COPY0001", "A review", "As Lewis wrote, the retriever improved factual accuracy on open domain "
                                                    "questions by a large margin.", page=2, attachment_key="ATTACH03"))
    exact, near = find_in_passages(passages, "the retriever improved factual accuracy on open domain questions by a large margin", None, 5)
    assert (exact.item_key, exact.exact, exact.page, exact.link) == ("COPY0001", True, 2, "zotero://open-pdf/library/items/ATTACH03?page=2")
    assert (near.item_key, near.exact, near.page_label) == ("ITEM0001", False, "128") and 0.8 <= near.score < 1
    assert find_in_passages(passages, "sea ice extent declined sharply in the arctic", None, 5) == []
