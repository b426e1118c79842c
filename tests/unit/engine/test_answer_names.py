"""Questions that name authors, and answers that quote sentences, not headings (issue 31).

The library is written by the schema-true writer (zocratesd/library/writer.py), indexed by the
daemon's indexer, searched by the `search_library` pipeline without ADK (engine/research.py,
engine/tools.py), and answered by the offline composer: what a running daemon does."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from zocratesd.engine.answer.causes import search_facts
from zocratesd.engine.answer.segment import split_sentences
from zocratesd.engine.models.offline import compose_answer
from zocratesd.engine.research import MAX_ASPECTS, Research
from zocratesd.engine.tools import _numbered
from zocratesd.library import Library
from zocratesd.library.retrieval import DEFAULT_TOP_K, Scope
from zocratesd.library.writer import Attachment, Item, write
from zocratesd.library.writer import Library as ZoteroLibrary

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
# Enough other papers that a name's rarity makes it rank, as in a real library.
OTHERS = [Item(f"OTHER{i:03d}", f"Grassland study {i}", creators=[("Sam", f"Author{i}")], date="2015",
               fields={"abstractNote": f"We find that grazing changed plant cover in plot {i}."}) for i in range(12)]


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Library:
    d = tmp_path_factory.mktemp("names")
    write(d, ZoteroLibrary(items=[STROHLE, KUHN, LEWIS20, LEWIS21, MULLER, GARCIA, BLOOM_T, BLOOM_A, *OTHERS]))
    library = Library(d, d / "zocrates-data", local_api_url=None)
    library.indexer.refresh(None)
    return library


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


def test_a_year_narrows_an_author(lib: Library) -> None:
    assert sorted(cited(ask(lib, "What did Lewis find?"))) == ["LEWIS202", "LEWIS211"]
    answer = ask(lib, "What did Lewis 2020 find?")
    assert cited(answer) == ["LEWIS202"] and "state of the art" in answer, answer
    assert cited(ask(lib, "Lewis 2021")) == ["LEWIS211"]
    assert cited(ask(lib, "What did Lewis 1995 find?")) == []  # no paper of that year: nothing, not another year's


def test_an_author_and_a_topic_quotes_that_author_on_it(lib: Library) -> None:
    answer = ask(lib, "What did Stroehle find about fungal biomass?")
    assert cited(answer) == ["STROHLE1"] and "fungal biomass fell" in answer, answer
    # A word in a title is a topic, even when someone of that name wrote a paper.
    assert cited(ask(lib, "How do Bloom filters store k-mers?")) == ["BLOOMFLT"]


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
