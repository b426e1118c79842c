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
    assert [(tuple(r.number for r in c.refs), c.refs[0].page, c.text) for c in found] == [
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


STYLE_PASSAGES = [
    {"n": 1, "item_key": "OTHER001", "library": "user", "page": 1, "citation_key": "gao2022precise", "creators": ["Luyu Gao"],
     "year": 2022, "title": "Another paper"},
    {"n": 2, "item_key": "ITEM0001", "library": "user", "page": 4, "page_label": "128", "citation_key": "lewis2020rag",
     "creators": ["Patrick Lewis", "Ethan Perez", "Aleksandra Piktus"], "year": 2020, "title": "RAG"},
]


def test_pandoc_and_author_year_markers_name_their_items() -> None:
    answer = ('Lewis writes that "the first results were strong" [see @lewis2020rag, p. 127]. '
              'Elsewhere "the retriever improves factual accuracy" (Lewis et al., 2020, p. 127). '
              '"Hypothetical documents are embedded to find real ones" [@gao2022precise; @nobody2000]. '
              'It grew (since 2018) and "monthly refreshes never happen" (Lewis, Perez & Piktus, 2020).')
    checked = check_answer(answer, STYLE_PASSAGES, text_of)
    (gao, lewis) = checked.citations
    # No list: each item is checked under the number of its first passage.
    assert (gao.n, gao.item_key, gao.verified, gao.label) == (1, "OTHER001", True, "[@gao2022precise]")
    assert (lewis.n, lewis.item_key, lewis.verified, lewis.label) == (2, "ITEM0001", False, "[@lewis2020rag]")
    assert [(x.status, x.page, x.cited_page, x.page_corrected) for x in lewis.checks] == [
        ("found", "127", "127", False), ("found", "128", "127", True), ("not_found", None, None, False)]
    # The parenthesis that names no item is text: the last quote is the claim of the last marker.
    assert lewis.checks[2].text == "monthly refreshes never happen"
    assert "[@lewis2020rag] “the retriever improves factual accuracy”: on p. 128, not p. 127." in checked.note
    assert "“monthly refreshes never happen”: not found in the cited source." in checked.note


def test_author_year_and_pandoc_markers_name_the_listed_entry() -> None:
    listed_ = ("\n\n# Cited Sources\n[1] [@gao2022precise] Luyu Gao (2022). Another paper. (zotero://select/library/items/OTHER001)"
               "\n[2] Patrick Lewis, Ethan Perez & Aleksandra Piktus (2020). RAG. p. 128. (zotero://select/library/items/ITEM0001)")
    # The entries alone say who and when: no passage is needed to resolve a marker.
    answer = '"The retriever improves factual accuracy" (Lewis et al., 2020). "Embedded to find real ones" [@gao2022precise].'
    lewis_only = check_answer(answer + listed_, [], text_of)
    assert [(c.n, c.item_key, c.verified) for c in lewis_only.citations] == [(1, "OTHER001", True), (2, "ITEM0001", True)]
    assert lewis_only.citations[1].checks[0].cited_page == "128"  # the entry's page
    wrong_year = check_answer('"The retriever improves factual accuracy" (Lewis et al., 2021).' + listed_, [], text_of)
    assert wrong_year.citations == []


def test_find_quote_over_passages_ranks_exact_first() -> None:
    passages = [Passage("ITEM0001", "RAG", p.text, page=p.page, page_label=p.label, attachment_key="ATTACH01") for p in PAGES]
    passages.append(Passage("COPY0001", "A review", "As Lewis wrote, the retriever improved factual accuracy on open domain "
                                                    "questions by a large margin.", page=2, attachment_key="ATTACH03"))
    exact, near = find_in_passages(passages, "the retriever improved factual accuracy on open domain questions by a large margin", None, 5)
    assert (exact.item_key, exact.exact, exact.page, exact.link) == ("COPY0001", True, 2, "zotero://open-pdf/library/items/ATTACH03?page=2")
    assert (near.item_key, near.exact, near.page_label) == ("ITEM0001", False, "128") and 0.8 <= near.score < 1
    assert find_in_passages(passages, "sea ice extent declined sharply in the arctic", None, 5) == []


def test_narrative_author_year_citations_name_their_items() -> None:
    answer = ('Lewis et al. (2020, p. 128) show that "the first results were strong". '
              'However, Lewis and Perez (2020) found that "the retriever improves factual accuracy". '
              'Gao (2022) writes: "Hypothetical documents are embedded to find fake ones". '
              'The Kyoto Protocol (1997) set targets and Lewis (2019) wrote "monthly refreshes never happen". '
              'Dense indexes of Wikipedia are refreshed every month, as Lewis et al. (2020) note.')
    checked = check_answer(answer, STYLE_PASSAGES, text_of)
    (gao, lewis) = checked.citations
    assert (gao.item_key, gao.verified, gao.label, gao.checks[0].status) == ("OTHER001", False, "Gao (2022)", "misquoted")
    assert (lewis.item_key, lewis.verified, lewis.label) == ("ITEM0001", True, "Lewis et al. (2020)")
    # The sentence each one opens, after its reporting verb; one that ends its sentence cites what is before it.
    assert [(x.kind, x.status, x.text, x.page, x.cited_page, x.page_corrected) for x in lewis.checks] == [
        ("quote", "found", "the first results were strong", "127", "128", True),
        ("quote", "found", "the retriever improves factual accuracy", "128", None, False),
        ("claim", "found", "Dense indexes of Wikipedia are refreshed every month", "129", None, False)]
    # A name and a year naming no item of the answer's are text: nothing flagged.
    assert "monthly refreshes" not in checked.note and "Protocol" not in checked.note
    assert "- Lewis et al. (2020) “the first results were strong”: on p. 127, not p. 128." in checked.note
