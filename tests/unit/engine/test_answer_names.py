"""Questions that name authors, and answers that quote sentences, not headings (issue 31).

The library is written by the schema-true writer (zocratesd/demo/zotero_dir.py), indexed by the
daemon's indexer, searched by the `search_library` pipeline without ADK (engine/research.py,
engine/tools.py), and answered by the offline composer: what a running daemon does."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from zocratesd.demo.zotero_dir import Annotation, Attachment, Item, pdf_file, write
from zocratesd.demo.zotero_dir import Library as ZoteroLibrary
from zocratesd.engine.answer.causes import search_facts
from zocratesd.engine.answer.segment import split_sentences
from zocratesd.engine.models.offline import compose_answer
from zocratesd.engine.research import MAX_ASPECTS, Research
from zocratesd.engine.tools import _numbered
from zocratesd.library.retrieval import DEFAULT_TOP_K, Scope
from zocratesd.library.service import Library
from zocratesd.textnorm import glued_heading

STROHLE = Item(
    "STROHLE1", "Soil microbial respiration under drought", creators=[("Anna", "Ströhle"), ("Jonas", "Kühn")], date="2019",
    fields={"abstractNote": "Introduction. Drought is a major stress for soil ecosystems. We find that microbial "
                            "respiration dropped by 40% after six weeks without rain. Recovery took two months after rewetting."},
    attachments=[Attachment("STRPDF01", pages=[
        "Introduction\nDrought is a major stress for soil ecosystems worldwide, and\nforests suffer most.",
        "2.1 Sampling Design\nWe sampled twelve plots in Bavaria.\nResults\nMicrobial respiration dropped by 40% after "
        "six weeks without rain, and fungal biomass fell."])],
)
# Kühn alone: "Strohle and Kuhn" asks for the paper they wrote together, not this one.
KUHN = Item("KUHNALON", "Nitrogen leaching in sandy soils", creators=[("Jonas", "Kühn")], date="2021",
            fields={"abstractNote": "Sandy soils lost twice as much nitrate as loam under heavy rain."})
LEWIS20 = Item("LEWIS202", "Retrieval-augmented generation for knowledge-intensive NLP", creators=[("Patrick", "Lewis"), ("Ethan", "Perez")],
               date="2020", fields={"abstractNote": "We combine a parametric generator with a dense retriever over Wikipedia. "
                                                    "RAG models set the state of the art on open-domain question answering."})
LEWIS21 = Item("LEWIS211", "Paraphrased questions for retrieval", creators=[("Mike", "Lewis")], date="2021",
               fields={"abstractNote": "We show that paraphrased questions improve dense retrieval recall by 5 points."})
MULLER = Item("MULLER01", "Salt trade of Lübeck", creators=[("Jörg", "Müller"), ("Eva", "Schmidt"), ("Karl", "Braun")], date="1999",
              fields={"abstractNote": "Merchants of Lübeck controlled the Baltic salt route for two centuries."})
GARCIA = Item("GARCIA01", "Magical realism and memory", creators=[("Gabriel", "García-Márquez")], date="1982",
              fields={"abstractNote": "Memory in the novel is collective, and time is circular rather than linear."})
# A paper whose title says "Bloom": a question about Bloom filters is about the topic, not about
# an author named Bloom.
BLOOM_T = Item("BLOOMFLT", "Bloom filters for genome assembly", creators=[("Rayan", "Chikhi")], date="2013",
               fields={"abstractNote": "Bloom filters store k-mers of a de Bruijn graph in little memory."})
BLOOM_A = Item("BLOOMAUT", "Space/time trade-offs in hash coding", creators=[("Burton", "Bloom")], date="1970",
               fields={"abstractNote": "Hash coding with allowable errors trades space for time in lookups."})
# No abstract: the name matches only the item's header; its full text says what it found.
FROHLICH = Item("FROHLICH", "Glacier mass balance in the Alps", creators=[("Wolfgang", "Fröhlich")], date="2011",
                attachments=[Attachment("FROHPDF1", pages=["Alpine glaciers lost 2% of their ice mass per year since 2000.",
                                                           "Methods are described in the supplement."])])
# A name that is also a word: "young mice" is a topic, whoever Young is.
YOUNG_A = Item("YOUNGAUT", "Gut microbiota after antibiotics", creators=[("Vincent", "Young")], date="2014",
               fields={"abstractNote": "Antibiotics shifted the gut microbiome of adult mice for weeks."})
YOUNG_T = Item("YOUNGMIC", "Recovery of juvenile rodents", creators=[("Ana", "Silva")], date="2016",
               fields={"abstractNote": "Young mice recovered their gut microbiome within days after antibiotics."})
# Enough other papers that a name's rarity makes it rank, as in a real library.
OTHERS = [Item(f"OTHER{i:03d}", f"Grassland study {i}", creators=[("Sam", f"Author{i}")], date="2015",
               fields={"abstractNote": f"We find that grazing changed plant cover in plot {i}."}) for i in range(12)]


def indexed(tmp_path_factory: pytest.TempPathFactory, name: str, items: list[Item]) -> Library:
    """A schema-true Zotero library of `items`, indexed."""
    d = tmp_path_factory.mktemp(name)
    write(d, ZoteroLibrary(items=items))
    library = Library(d, d / "zocrates-data", local_api_url=None)
    library.indexer.refresh(None)
    return library


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return indexed(tmp_path_factory, "names", [STROHLE, KUHN, LEWIS20, LEWIS21, MULLER, GARCIA, BLOOM_T, BLOOM_A,
                                                FROHLICH, YOUNG_A, YOUNG_T, *OTHERS])


async def _ask(lib: Library, question: str) -> str:
    scope = Scope()
    research = Research.start(invocation_id="i", branch=None, query=question, scope=scope,
                              initial_budget=MAX_ASPECTS, max_extensions=0)
    while (aspect := research.next_aspect()) is not None:
        research.record_round(aspect, await lib.search(aspect, scope, DEFAULT_TOP_K))
    passages = _numbered(list(research.synthesis()))
    result: dict[str, Any] = {"query": question, "scope": "library", "passages": passages, "research": research.report(),
                              "library": await search_facts(lib, scope, question, research.aspects, passages)}
    return compose_answer(question, result)


def ask(lib: Library, question: str) -> str:
    return asyncio.run(_ask(lib, question))


def cited(answer: str) -> list[str]:
    return re.findall(r"^\[\d+\] .*/items/([A-Z0-9]{8})\)$", answer.split("# Cited Sources")[-1], re.M)


@pytest.mark.parametrize("question", [
    "What did Ströhle and Kühn find?", "What did Strohle and Kuhn find?", "What did Stroehle and Kuehn find?",
    "what did stroehle and kuehn find", "Strohle and Kuhn: findings?",
])
def test_authors_named_with_or_without_accents_find_their_paper(lib: Library, question: str) -> None:
    answer = ask(lib, question)
    assert cited(answer) == ["STROHLE1"], answer
    assert "We find that microbial respiration dropped by 40%" in answer, answer
    assert "found nothing" not in answer


def test_one_named_author_finds_each_of_their_papers(lib: Library) -> None:
    assert sorted(cited(ask(lib, "What did Kuehn find?"))) == ["KUHNALON", "STROHLE1"]


def test_et_al_and_a_hyphenated_name_typed_without_accents(lib: Library) -> None:
    answer = ask(lib, "Müller et al.")
    assert cited(answer) == ["MULLER01"] and "Baltic salt route" in answer, answer
    assert cited(ask(lib, "What did Mueller et al. say?")) == ["MULLER01"]
    answer = ask(lib, "What did Garcia-Marquez say about memory?")
    assert cited(answer) == ["GARCIA01"] and "time is circular" in answer, answer


def test_an_author_of_a_paper_without_abstract_is_answered_from_its_text(lib: Library) -> None:
    answer = ask(lib, "What did Froehlich find?")
    assert cited(answer) == ["FROHLICH"] and "lost 2% of their ice mass" in answer, answer
    assert "Fröhlich (2011). Glacier mass balance in the Alps. p. 1." in answer


def test_a_year_narrows_an_author(lib: Library) -> None:
    assert sorted(cited(ask(lib, "What did Lewis find?"))) == ["LEWIS202", "LEWIS211"]
    answer = ask(lib, "What did Lewis 2020 find?")
    assert cited(answer) == ["LEWIS202"] and "state of the art" in answer, answer
    assert cited(ask(lib, "Lewis 2021")) == ["LEWIS211"]
    assert cited(ask(lib, "What did Lewis 1995 find?")) == []  # no paper of that year: nothing, not another year's


def test_an_author_and_a_topic_quotes_that_author_on_it(lib: Library) -> None:
    answer = ask(lib, "What did Stroehle find about fungal biomass?")
    assert cited(answer) == ["STROHLE1"] and "fungal biomass fell" in answer, answer
    # A word in a title is a topic, even when someone of that name wrote a paper; so is a word
    # another paper's text uses.
    assert cited(ask(lib, "How do Bloom filters store k-mers?")) == ["BLOOMFLT"]
    assert "YOUNGMIC" in cited(ask(lib, "How fast do young mice recover their gut microbiome after antibiotics?"))
    assert cited(ask(lib, "What did Young find?")) == ["YOUNGAUT"]


def test_quotes_leave_section_headings_out(lib: Library) -> None:
    answer = ask(lib, "Why is drought a stress for soil ecosystems?")
    body = answer.split("# Cited Sources")[0]
    assert "Drought is a major stress for soil ecosystems" in body, answer
    assert "Introduction" not in body and "Sampling Design" not in body, answer


def test_headings_are_not_sentences() -> None:
    assert split_sentences("Introduction. Language models struggle with long inputs. We fix it.") == [
        "Language models struggle with long inputs.", "We fix it."]
    assert split_sentences("2.1 Training Details\nWe train for 3 epochs.\nRESULTS\nIt works.") == [
        "We train for 3 epochs.", "It works."]
    # Not headings: a wrapped line of prose, a lower-case word alone on a line, a sentence about results.
    assert split_sentences("3 of the 12 patients\nrelapsed. We trained the\nmodel\non data. Results: it worked.") == [
        "3 of the 12 patients relapsed.", "We trained the model on data.", "Results: it worked."]


def test_the_index_keeps_a_heading_line_apart(tmp_path: Path) -> None:
    from zocratesd.library.fulltext import chunks

    [(page, text)] = chunks("Introduction\nDrought is a major\nstress.")
    assert (page, text) == (None, "Introduction\n\nDrought is a major stress.")


# A book chapter: the PDF's third page is page 127 of the book, as Zotero's reader shows it.
CHAPTER = Item(
    "CHAPTER1", "Coral reef recovery after bleaching", item_type="bookSection", creators=[("Terry", "Hughes")], date="2018",
    attachments=[Attachment("CHAPPDF1", pages=[
        "Title page of the chapter.", "Reefs are diverse ecosystems.",
        "Reefs need about a decade to recover from mass coral bleaching, if nothing else disturbs them.",
        "Ocean acidification slows calcification of coral skeletons."],
        annotations=[Annotation("CHAPANN1", text="Reefs need about a decade to recover from mass coral bleaching",
                                comment="recovery time", page_label="127", page_index=2)])],
)


# Zotero's PDF worker puts a heading that shares a line with its text on that line (seen in Zotero
# 9.0.6): "Results Symbiont shuffling ...", numbered ("2. Methods We ..."); and sentences that start
# with a section's word stay whole.
GLUED = Item("GLUEDHD1", "Symbiont shuffling in reef corals", creators=[("Ruth", "Gates")], date="2015",
             attachments=[Attachment("GLUEDPDF", pages=[
                 "1. Introduction Reef corals bleach when the sea warms.\n2. Methods We tagged 40 colonies of Montipora "
                 "on two reefs. Methods for scoring bleaching differ between survey teams.",
                 "Results Symbiont shuffling increased the thermal tolerance of tagged colonies by 1.5 degrees. Results "
                 "were mixed on the shallow reef.\nDISCUSSION Shuffling is a slow route to tolerance. Discussion of "
                 "costs is left to later work."])])


@pytest.fixture(scope="module")
def glued(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return indexed(tmp_path_factory, "glued", [GLUED, *OTHERS])


def test_a_heading_glued_to_its_sentence_is_not_quoted(glued: Library) -> None:
    answer = ask(glued, "Did symbiont shuffling increase the thermal tolerance of corals?")
    body = answer.split("# Cited Sources")[0]
    assert cited(answer) == ["GLUEDHD1"], answer
    assert "- Symbiont shuffling increased the thermal tolerance of tagged colonies by 1.5 degrees." in body, answer
    assert "Results Symbiont" not in body and "DISCUSSION" not in body, answer
    answer = ask(glued, "How many colonies of Montipora were tagged, and how do teams score bleaching?")
    body = answer.split("# Cited Sources")[0]
    assert "- We tagged 40 colonies of Montipora on two reefs." in body, answer
    assert "Methods for scoring bleaching differ between survey teams." in body, answer  # a sentence, not a heading
    assert "2. Methods" not in body and "Methods We" not in body, answer


def test_glued_headings_are_cut_from_sentences_not_sentences_that_start_with_a_sections_word() -> None:
    assert glued_heading("Results Symbiont shuffling increased tolerance.") == len("Results ")
    assert glued_heading("2. Methods We sampled.") == len("2. Methods ")
    assert glued_heading("III. RESULTS AND DISCUSSION The corals died.") == len("III. RESULTS AND DISCUSSION ")
    assert glued_heading("Materials and Methods A total of 40 colonies.") == len("Materials and Methods ")
    assert glued_heading("Abstract Background Corals bleach.") == len("Abstract Background ")
    assert glued_heading("3.2 Data We used two reefs.") == len("3.2 Data ")  # numbered: any section name
    for prose in ("Results were mixed.", "Methods for X differ between teams.", "Discussion of costs is left out.",
                  "Results: it worked.", "Model M3 wins.", "Conclusions drawn here hold.", "results Symbiont x",
                  "Introduction", "Summary statistics are given in Table 2.", "Model United Nations members voted.",
                  "Data Science Institute researchers found it."):
        assert glued_heading(prose) == 0, prose
    assert split_sentences("We read it. 2. Methods We sampled 40 colonies. Results Symbiont shuffling helped. Results were mixed.") == [
        "We read it.", "We sampled 40 colonies.", "Symbiont shuffling helped.", "Results were mixed."]
    assert split_sentences("Discussion Shuffling is slow.\nDiscussion of costs is left out.") == [
        "Shuffling is slow.", "Discussion of costs is left out."]


@pytest.fixture(scope="module")
def chapter(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return indexed(tmp_path_factory, "labels", [CHAPTER, *OTHERS])


def test_a_page_is_cited_by_the_label_the_reader_shows(chapter: Library) -> None:
    answer = ask(chapter, "How long do reefs need to recover from mass coral bleaching?")
    assert cited(answer) == ["CHAPTER1"], answer
    assert "Hughes (2018). Coral reef recovery after bleaching. p. 127." in answer, answer
    assert "p. 3" not in answer
    # Two pages: each quote names its label, the entry lists them in the PDF's order; the page
    # without a label is cited by its number.
    answer = ask(chapter, "How long do reefs need to recover from mass coral bleaching, and what slows calcification of coral skeletons?")
    assert "[1, p. 127]" in answer and "[1, p. 4]" in answer and "pp. 127, 4." in answer, answer


def test_a_highlight_in_the_full_text_is_quoted_once_from_the_annotation(chapter: Library) -> None:
    """The highlight's text is also in the PDF's text: quoted once, as the annotation (its page
    label and the user's comment), not again from the full text."""
    for question in ("How long do reefs need to recover from mass coral bleaching?",
                     "How long do reefs need to recover from mass coral bleaching, and what slows calcification of coral skeletons?"):
        answer = ask(chapter, question)
        body = answer.split("# Cited Sources")[0]
        assert body.count("Reefs need about a decade") == 1, answer
        assert "if nothing else disturbs them" not in body, answer  # the full text's sentence
        assert "- Reefs need about a decade to recover from mass coral bleaching — recovery time [1" in body, answer
        assert "p. 127" in answer


async def _passages(lib: Library, question: str) -> list[dict[str, Any]]:
    return _numbered([(h.passage, h.score) for h in await lib.search(question, Scope(), DEFAULT_TOP_K)])


def test_the_link_keeps_the_pdf_page(chapter: Library) -> None:
    hit = next(p for p in asyncio.run(_passages(chapter, "decade recover bleaching")) if p["kind"] == "annotation")
    assert (hit["page"], hit["page_label"]) == (3, "127")
    assert hit["link"] == "zotero://open-pdf/library/items/CHAPPDF1?page=3&annotation=CHAPANN1"


def test_cited_page_falls_back_to_the_number() -> None:
    from zocratesd.engine.answer.sources import cited_page

    assert cited_page({"page": 3, "page_label": "127"}) == "127"
    assert cited_page({"page": 3, "page_label": None}) == "3"
    assert cited_page({"page": 3, "page_label": "x" * 40}) == "3"  # not a label a reader cites
    assert cited_page({"page": None, "page_label": "127"}) is None


# The same chapter with its PDF on disk: the PDF's own labels (i, ii, then 125...) name every page,
# annotated or not.
BOOK = Item(
    "BOOKCHAP", "Kelp forest decline", item_type="bookSection", creators=[("Kim", "Wernberg")], date="2019",
    attachments=[Attachment("BOOKPDF1", pages=[
        "Preface of the volume.", "Contents.", "Kelp forests declined by half along the coast after the marine heatwave.",
        "Urchin barrens replaced the kelp where predators were fished out."],
        file_bytes=pdf_file(4, ((0, "r", "", 1), (2, "D", "", 125))))],
)
# Its PDF is damaged: no labels, its pages cited by number, nothing fails.
BROKEN = Item(
    "BROKENPD", "Seagrass meadows as carbon sinks", creators=[("Carlos", "Duarte")], date="2013",
    attachments=[Attachment("BROKPDF1", pages=["Cover.", "Seagrass meadows bury carbon forty times faster than forests."],
                            file_bytes=pdf_file(2, ((0, "D", "", 300),))[:200])],
)


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> Library:
    return indexed(tmp_path_factory, "books", [BOOK, BROKEN, *OTHERS])


def test_full_text_is_cited_by_the_pdfs_own_page_labels(books: Library) -> None:
    answer = ask(books, "How much did kelp forests decline after the marine heatwave?")
    assert cited(answer) == ["BOOKCHAP"] and "Wernberg (2019). Kelp forest decline. p. 125." in answer, answer
    hit = next(p for p in asyncio.run(_passages(books, "kelp forests declined heatwave")) if p["item_key"] == "BOOKCHAP")
    assert (hit["page"], hit["page_label"]) == (3, "125")
    assert hit["link"] == "zotero://open-pdf/library/items/BOOKPDF1?page=3"  # the PDF's page index
    roman = next(p for p in asyncio.run(_passages(books, "preface volume")) if p["item_key"] == "BOOKCHAP")
    assert (roman["page"], roman["page_label"]) == (1, "i")


def test_a_damaged_pdf_is_cited_by_page_number(books: Library) -> None:
    answer = ask(books, "How fast do seagrass meadows bury carbon?")
    assert cited(answer) == ["BROKENPD"], answer
    assert re.search(r"forty times faster than forests\. \[1(, p\. 2)?\]", answer) and "300" not in answer, answer
    assert re.search(r"Seagrass meadows as carbon sinks\. pp?\. (1, )?2\.", answer), answer
    assert books.status()["state"] == "ready"


def test_page_labels_read_from_pdfs(tmp_path: Path) -> None:
    import io

    import pypdf

    from zocratesd.library.pdflabels import LabelsUnreadable, page_labels

    def put(key: str, data: bytes, name: str = "paper.pdf") -> None:
        (tmp_path / "storage" / key).mkdir(parents=True, exist_ok=True)
        (tmp_path / "storage" / key / name).write_bytes(data)

    put("LABELS01", pdf_file(5, ((0, "r", "", 1), (2, "D", "", 125), (4, "A", "App-", 1))))
    assert page_labels(tmp_path, "LABELS01") == ["i", "ii", "125", "126", "App-A"]
    # The same labels behind a compressed cross-reference stream and object streams (what most
    # producers write today).
    w = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf_file(3, ((0, "D", "", 41),)))))
    w.compress_identical_objects()
    buf = io.BytesIO()
    w.write(buf)
    put("LABELS02", buf.getvalue())
    assert page_labels(tmp_path, "LABELS02") == ["41", "42", "43"]
    put("NOLABELS", pdf_file(2))
    assert page_labels(tmp_path, "NOLABELS") is None  # no /PageLabels: cited by number
    put("NOTAPDF1", b"<html>not a pdf</html>")
    with pytest.raises(LabelsUnreadable):  # a damaged file: the indexer counts it, its pages are cited by number
        page_labels(tmp_path, "NOTAPDF1")
    assert page_labels(tmp_path, "MISSING1") is None and page_labels(tmp_path, "../../etc") is None
    # A symlink out of storage/ is not Zotero's file.
    outside = tmp_path / "outside.pdf"
    outside.write_bytes(pdf_file(1, ((0, "D", "", 9),)))
    (tmp_path / "storage" / "SYMLINK1").mkdir()
    (tmp_path / "storage" / "SYMLINK1" / "paper.pdf").symlink_to(outside)
    assert page_labels(tmp_path, "SYMLINK1") is None
