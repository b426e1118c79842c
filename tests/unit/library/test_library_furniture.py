"""Page furniture found from the document itself (library/furniture.py): running headers and
footers, page numbers and line-break hyphens leave a PDF's text; its prose and its pages stay."""

from __future__ import annotations

import pytest

from zocratesd.library.fulltext import chunks, pages
from zocratesd.library.furniture import dehyphenate, strip_furniture

# Distinct prose, a few lines per page, as the PDF worker extracts a printed page's body.
PROSE = [
    "Circulating inflammatory biomarkers were measured at baseline in all participants",
    "and the cohort was followed for a median of seven years for cardiovascular events.",
    "Outcome adjudication used standardised criteria agreed before the first analysis.",
    "Higher interleukin concentrations predicted incident heart failure after adjustment",
    "for age, sex, smoking, diabetes and the estimated glomerular filtration rate.",
    "Sensitivity analyses excluding prevalent disease at baseline gave similar estimates.",
    "The association was stronger in women than in men, although the interaction term",
    "did not reach conventional significance in the fully adjusted proportional model.",
    "Statin use modified the relation only slightly and residual confounding is likely.",
    "Repeated measurements in a subsample showed moderate within-person stability.",
    "These findings support further trials of anti-inflammatory therapy in older adults",
    "whose biomarker profile suggests a high residual risk despite standard treatment.",
    "Limitations include the observational design and a single ethnic background.",
    "Data sharing is possible on request to the steering committee of the cohort study.",
    "We thank the participants and the staff of the recruiting general practices.",
    "Funding came from a national research council and had no role in the analysis.",
    "Blood samples were stored at minus eighty degrees and thawed once before assays.",
    "Missing covariates were imputed with chained equations over twenty data sets.",
]


def body(n: int, lines: int = 3) -> list[str]:
    return [PROSE[(n * lines + i) % len(PROSE)] for i in range(lines)]


def doc(page_lines: list[list[str]]) -> str:
    """Pages as Zotero's PDF worker writes them to the cache: lines, a blank line, a form feed."""
    return "\f".join("\n".join(lines) + "\n\n" for lines in page_lines).strip()


def lines_of(text: str) -> list[list[str]]:
    return [[line for line in page.split("\n") if line.strip()] for page in text.split("\f")]


def test_a_running_header_and_page_number_footers_leave_every_page() -> None:
    src = [["J Med Res 2020;12:34-45", *body(n), str(34 + n)] for n in range(5)]
    out = strip_furniture(doc(src))
    assert lines_of(out) == [body(n) for n in range(5)]
    assert out.count("\f") == 4  # the pages stay where they were


def test_alternating_headers_that_carry_the_page_number_and_a_title_page_without_one() -> None:
    src = []
    for n in range(6):
        printed = 127 + n
        header = [] if n == 0 else [f"Journal of Cell Biology · Vol. 12 · {printed}" if n % 2 == 0 else f"{printed}  Smith et al."]
        src.append([*header, *body(n), f"— {printed} —"])
    out = strip_furniture(doc(src))
    assert lines_of(out) == [body(n) for n in range(6)]


def test_page_n_of_m_footers_two_line_headers_and_roman_front_matter() -> None:
    src = [["Annual Review of Immunology", f"Volume {40 + 0} · 2022", *body(n), f"Page {n + 1} of 4"] for n in range(4)]
    assert lines_of(strip_furniture(doc(src))) == [body(n) for n in range(4)]
    front = [["Preface", *body(n), ["ix", "x", "xi", "xii"][n]] for n in range(4)]
    assert lines_of(strip_furniture(doc(front))) == [body(n) for n in range(4)]
    said = doc([[*body(0), "Page IV"], [*body(1), "Page V"]])  # upper-case roman only when it says "page"
    assert lines_of(strip_furniture(said)) == [body(0), body(1)]
    section = doc([["IV", *body(0)], ["V", *body(1)]])
    assert lines_of(strip_furniture(section)) == lines_of(section)


def test_page_numbers_are_removed_when_the_document_corroborates_them() -> None:
    # Two pages numbered as a journal numbers them (from 211): the same offset on both.
    two = doc([[*body(0), "211"], ["212", *body(1)]])
    assert lines_of(strip_furniture(two)) == [body(0), body(1)]
    # A number at a page's edge that is not its page number stays (a table's last cell, a year).
    table = doc([[*body(0), "Total", "2019"], [*body(1), "Cases", "17"], [*body(2), "Controls", "45"]])
    assert lines_of(strip_furniture(table)) == lines_of(table)


def test_a_one_page_document_loses_nothing_but_its_line_break_hyphens() -> None:
    one = "A brief letter on the regu-\nlation of cystine uptake.\nTable 2\nDose 12 mg\n12\n\n"
    assert strip_furniture(one) == "A brief letter on the regulation of cystine uptake.\nTable 2\nDose 12 mg\n12\n\n"
    abstract = "We detect a strong association between biomarkers and outcomes in 1,204 adults."
    assert strip_furniture(abstract) == abstract  # an abstract on one line (SciFact's layout) is untouched


def test_a_two_page_document_keeps_numbered_captions_that_only_look_alike() -> None:
    two = doc([["Table 1", *body(0)], ["Table 2", *body(1)]])
    assert lines_of(strip_furniture(two)) == lines_of(two)
    letterhead = doc([["Department of Medicine, University Hospital", *body(0)],
                      ["Department of Medicine, University Hospital", *body(1)]])
    assert lines_of(strip_furniture(letterhead)) == [body(0), body(1)]


def test_a_real_sentence_that_recurs_once_at_page_edges_stays() -> None:
    repeated = "The primary outcome was unchanged after adjustment for baseline risk."
    src = [body(n) for n in range(6)]
    src[1] = [repeated, *src[1]]  # atop two pages of one parity: what alternating headers look like
    src[3] = [*src[3], repeated]
    out = strip_furniture(doc(src))
    assert lines_of(out) == lines_of(doc(src))
    assert out.count(repeated) == 2
    short = [body(n) for n in range(4)]
    short[0] = [repeated, *short[0]]
    short[2] = [repeated, *short[2]]
    assert lines_of(strip_furniture(doc(short))) == lines_of(doc(short))


def test_a_line_in_the_middle_of_a_page_is_never_furniture() -> None:
    src = [[*body(n, 4), "Methods", *body(n + 7, 4)] for n in range(4)]  # a word that recurs mid-page
    assert lines_of(strip_furniture(doc(src))) == lines_of(doc(src))


@pytest.mark.parametrize(("text", "want"), [
    ("the regu-\nlation of", "the regulation of"),
    ("a long-\nterm outcome", "a long-term outcome"),
    ("patients with COVID-\n19 were", "patients with COVID-19 were"),
    ("an mTORC2-\ndependent step", "an mTORC2-dependent step"),
    ("the Hodgkin-\nHuxley model", "the Hodgkin-Huxley model"),
    ("the state-of-the-\nart method", "the state-of-the-art method"),
    ("self-\nreported", "self-reported"),
    ("a soft\u00ad\nhyphen", "a softhyphen"),
    ("ends with a dash -\nthen text", "ends with a dash -\nthen text"),
])
def test_line_break_hyphens(text: str, want: str) -> None:
    assert dehyphenate(text) == want


def test_the_document_decides_between_a_compound_and_a_split_word() -> None:
    text = "cross-linking was measured.\nWe saw cross-\nlinking and pro-\ntein loss; protein levels fell."
    assert dehyphenate(text) == "cross-linking was measured.\nWe saw cross-linking and protein loss; protein levels fell."
    assert dehyphenate("dose-\nresponse") == "dose-response"
    assert dehyphenate("doseresponse curves.\ndose-\nresponse") == "doseresponse curves.\ndoseresponse"


def test_chunks_of_a_printed_paper_keep_their_pages_and_quote_no_furniture() -> None:
    src = [["J Med Res 2020;12:34-45", *body(n), str(34 + n)] for n in range(5)]
    src[2] = [*src[2][:-2], src[2][-2][:40] + "regu-", "lation of the pathway.", src[2][-1]]
    text = doc(src)
    before, after = chunks(text), chunks(strip_furniture(text))
    assert [p for p, _ in after] == [p for p, _ in before] == [1, 2, 3, 4, 5]
    assert [n for n, _ in pages(strip_furniture(text))] == [n for n, _ in pages(text)]
    assert all("J Med Res" not in c and not c.rstrip().endswith(str(34 + i)) for i, (_, c) in enumerate(after))
    assert "regulation of the pathway." in after[2][1]


def test_a_paragraph_a_line_as_zotero_7_writes_it() -> None:
    """Zotero 7's PDF worker writes each block as a line: header, whole paragraphs, page number."""
    paragraphs = [" ".join(body(n, 4)) for n in range(3)]
    src = [["Nature Medicine | Volume 26 | March 2020 | 345–352", p, f"{345 + n}"] for n, p in enumerate(paragraphs)]
    assert lines_of(strip_furniture(doc(src))) == [[p] for p in paragraphs]


def test_a_chapter_running_title_on_a_run_of_pages_of_a_book() -> None:
    """A chapter's title atop its odd pages (pages 5-11 of 20) is furniture there, though on
    fewer than half of the book's odd pages; the book's title atop its even pages too."""
    src = []
    for n in range(20):
        top = ["Handbook of Clinical Trials"] if n % 2 else (["4 Adaptive Designs"] if 4 <= n <= 10 else [])
        src.append([*top, *body(n)])
    assert lines_of(strip_furniture(doc(src))) == [body(n) for n in range(20)]
