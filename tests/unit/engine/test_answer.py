"""The offline answerer (engine/answer/, issue 21): sentences of scientific prose, evidence by
coverage, quotes with their subject, part-by-part and side-by-side answers, one `# Cited Sources`
entry per item, and the real cause when nothing is found."""

from __future__ import annotations

from typing import Any

import pytest

from zocratesd.engine.answer import compose_answer, split_sentences
from zocratesd.engine.answer.causes import search_facts
from zocratesd.engine.answer.evidence import MIN_COVERAGE, coverage, is_evidence, prepare
from zocratesd.engine.answer.question import parse_question, split_parts, terms_of
from zocratesd.engine.answer.sources import entry
from zocratesd.engine.research import Research, plan_aspects
from zocratesd.library.retrieval import InMemoryRetriever, Passage, Scope

pytestmark = pytest.mark.anyio

# (text, the sentences it must give)
HARD_CASES = [
    ("After antibiotics allowed C. difficile spores to germinate. Untreated mice resisted.",
     ["After antibiotics allowed C. difficile spores to germinate.", "Untreated mice resisted."]),
    ("As shown by Lewis et al. (2020), RAG helps. It is cited.", ["As shown by Lewis et al. (2020), RAG helps.", "It is cited."]),
    ("Lewis et al. showed it. Then more.", ["Lewis et al. showed it.", "Then more."]),
    ("Results are in Fig. 2 and Eq. 3. Next we test.", ["Results are in Fig. 2 and Eq. 3.", "Next we test."]),
    ("RAG reaches 44.5 vs. 41.5 for DPR. BART is worse.", ["RAG reaches 44.5 vs. 41.5 for DPR.", "BART is worse."]),
    ("Sparse models, e.g. BM25, are fast. Dense ones, i.e. DPR, are not.", ["Sparse models, e.g. BM25, are fast.", "Dense ones, i.e. DPR, are not."]),
    ("Tools, e.g. BM25. Fine.", ["Tools, e.g. BM25.", "Fine."]),
    ("It was described by J. Smith and K. Lee in 2001. Later work followed.",
     ["It was described by J. Smith and K. Lee in 2001.", "Later work followed."]),
    ("E. coli and S. aureus grew. Both died.", ["E. coli and S. aureus grew.", "Both died."]),
    ("The effect was large.[12] However, it faded.", ["The effect was large.[12]", "However, it faded."]),
    ("The effect was large [3, 4]. However, it faded.", ["The effect was large [3, 4].", "However, it faded."]),
    ("The effect was large.12,13 However, it faded.", ["The effect was large.12,13", "However, it faded."]),
    ("Add 2.5 M NaCl to the buffer. Then wait 0.5 h.", ["Add 2.5 M NaCl to the buffer.", "Then wait 0.5 h."]),
    ("Cells were incubated for 24 h. Cells were lysed.", ["Cells were incubated for 24 h.", "Cells were lysed."]),
    ("Orthologs from Acidaminococcus sp. BV3L6 worked. Good.", ["Orthologs from Acidaminococcus sp. BV3L6 worked.", "Good."]),
    ("Expression fell. mRNA levels rose. p53 was stable.", ["Expression fell.", "mRNA levels rose.", "p53 was stable."]),
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
    ("Data from the U.S. Census were used. We did X.", ["Data from the U.S. Census were used.", "We did X."]),
    ("See No. 5 and pp. 12-14 of Vol. 3. Done.", ["See No. 5 and pp. 12-14 of Vol. 3.", "Done."]),
    ("What is RAG? how does it work?", ["What is RAG?", "how does it work?"]),
    ("Version 1.2.3 of the tool (Dr. Who, Ph.D. thesis) ran. Fine.", ["Version 1.2.3 of the tool (Dr. Who, Ph.D. thesis) ran.", "Fine."]),
    ("One paragraph without end\n\nAnother one", ["One paragraph without end", "Another one"]),
    ("The diffi-\ncile case is hard. Yes.", ["The difficile case is hard.", "Yes."]),
]


@pytest.mark.parametrize(("text", "expected"), HARD_CASES, ids=[c[0][:30] for c in HARD_CASES])
def test_sentences_of_scientific_prose(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_research_aspects_are_the_answers_parts() -> None:
    assert plan_aspects("What did Smith et al. find about Fig. 2? And about C. difficile?") == [
        "What did Smith et al. find about Fig. 2?", "And about C. difficile?"]
    assert plan_aspects("What does HyDE do, and how does ColBERT score documents?") == [
        "What does HyDE do", "how does ColBERT score documents?"]
    assert plan_aspects("1) What do LNPs contain? 2) How effective is BNT162b2?") == [
        "What do LNPs contain?", "How effective is BNT162b2?"]
    assert plan_aspects("Compare RNP and plasmid delivery of Cas9.") == ["Compare RNP and plasmid delivery of Cas9."]


def test_the_compaction_summary_cuts_claims_with_the_same_sentences() -> None:
    from zocratesd.compaction.summarise import extract_turn
    from zocratesd.compaction.turns import Turn

    answer = ("Here is what your library says:\n\n- After antibiotics allowed C. difficile spores to germinate. "
              "Mice resisted. [1]\n\n# Cited Sources\n[1] A (2014). T. (zotero://select/library/items/THEIABX0)")
    turn = Turn(index=1, invocation_id="i1", question="What allowed C. difficile to germinate?", start=0, end=1,
                events=[{"author": "coordinator", "content": {"parts": [{"text": answer}]}}])
    block = extract_turn(turn)
    assert "  - After antibiotics allowed C. difficile spores to germinate. [1]" in block
    assert "Mice resisted" not in block


def hit(key: str, title: str, text: str, *, n: int = 1, page: int | None = 1, creators: tuple[str, ...] = ("A. Author",),
        year: int | None = 2020, focal: bool = False) -> dict[str, Any]:
    return {"n": n, "item_key": key, "attachment_key": f"{key[:4]}PDF0" if page else None, "title": title,
            "creators": list(creators), "year": year, "page": page, "text": text, "score": 1.0, "focal": focal}


LOST = hit("LIULOST0", "Lost in the Middle: How Language Models Use Long Contexts",
           "Performance degrades when models must access relevant information in the middle of long contexts.",
           creators=("Nelson F. Liu", "Kevin Lin", "John Hewitt"), year=2023)
ALGAE = hit("CORALALG", "Decreased Abundance of Crustose Coralline Algae",
            "Reefs may thus have lost an important agent of consolidation before the end of the century.", n=2)


def cited_keys(answer: str) -> list[str]:
    sources = answer.split("# Cited Sources", 1)[1] if "# Cited Sources" in answer else ""
    return [line.rsplit("/items/", 1)[1].rstrip(")") for line in sources.splitlines() if "/items/" in line]


def test_a_passage_sharing_one_common_word_is_not_evidence() -> None:
    part = parse_question("What is lost in the middle?").parts[0]
    lost, algae = prepare([LOST, ALGAE])
    # Measured: the algae paper covers one of the two words, the paper asked about both.
    assert coverage(part, algae.stems, algae.title_stems) == 0.5 < MIN_COVERAGE <= coverage(part, lost.stems, lost.title_stems)
    assert is_evidence(part, lost) and not is_evidence(part, algae)
    answer = compose_answer("What is lost in the middle?", {"scope": "library", "passages": [ALGAE, LOST]})
    assert cited_keys(answer) == ["LIULOST0"] and "coralline" not in answer.casefold()



def test_a_passage_is_prepared_once_and_answers_stay_the_same() -> None:
    """A turn prepares its passages for the search's facts and again for the answer, and a library's
    passages come back turn after turn: the second time costs nothing and changes nothing."""
    first = prepare([LOST, ALGAE])
    again = prepare([dict(ALGAE), dict(LOST)])  # equal passages, new objects, another order
    assert again[1].sentence_stems is first[0].sentence_stems and again[0].stems is first[1].stems
    assert [s.rank for s in again] == [0, 1] and again[0].passage is not first[1].passage
    assert all(isinstance(st, frozenset) for src in first for st in (*src.sentence_stems, src.stems, src.title_stems))
    question = {"scope": "library", "passages": [ALGAE, LOST]}
    assert compose_answer("What is lost in the middle?", question) == compose_answer("What is lost in the middle?", question)

def test_only_unrelated_passages_is_found_nothing_and_says_why() -> None:
    answer = compose_answer("What is lost in translation of poetry?", {"scope": "library", "passages": [ALGAE],
                                                                      "library": {"state": "ready", "items": 37}})
    assert "# Cited Sources" not in answer and "[1]" not in answer
    assert answer.startswith("I found nothing about “lost in translation of poetry” in your library (37 items indexed).")
    assert "lacks “translation”, “poetry” (it has 1 of the 3 words asked about)" in answer
    assert "widen" not in answer  # the scope already is the library


RNP = hit("KIMRNP00", "Genome Editing via Delivery of Purified Cas9 Ribonucleoproteins",
          "We delivered Cas9 ribonucleoprotein (RNP) into human cells by electroporation. Cas9 RNPs induced mutations "
          "at frequencies of up to 79%. The RNP was degraded rapidly, within 24 h. Off-target indels at known sites fell "
          "by a median of 70 percent compared with plasmid delivery. Transfection of plasmids, by contrast, led to "
          "prolonged Cas9 expression.")


def test_a_quote_keeps_the_sentence_that_names_its_subject_and_the_comparison() -> None:
    answer = compose_answer("How much did off-target indels fall with RNP delivery?", {"scope": "library", "passages": [RNP]})
    quote = next(line for line in answer.splitlines() if line.startswith("- "))
    assert quote == ("- The RNP was degraded rapidly, within 24 h. Off-target indels at known sites fell by a median of "
                     "70 percent compared with plasmid delivery. Transfection of plasmids, by contrast, led to prolonged "
                     "Cas9 expression. [1]")


def test_a_pointing_back_sentence_keeps_the_one_before() -> None:
    drop = hit("SRIVDROP", "Dropout", "Overfitting is a serious problem. The key idea of dropout is to drop units at "
               "random during training. This prevents units from co-adapting too much.")
    answer = compose_answer("What prevents co-adapting units?", {"scope": "library", "passages": [drop]})
    assert "- The key idea of dropout is to drop units at random during training. This prevents units from co-adapting too much. [1]" in answer


def test_a_multi_part_question_is_answered_part_by_part_in_order_and_says_what_is_missing() -> None:
    hyde = hit("GAOHYDE0", "Precise Zero-Shot Dense Retrieval", "HyDE writes a hypothetical document, then embeds it.", n=1)
    colbert = hit("KHATCOLB", "ColBERT", "ColBERT scores a document by summing the maximum similarities of query embeddings.", n=2)
    q = "What does HyDE do, and how does ColBERT score documents? How do neonicotinoids affect bumblebees?"
    answer = compose_answer(q, {"scope": "library", "passages": [colbert, hyde]})
    lines = answer.splitlines()
    assert lines[0] == ("Your question has 3 parts; your library answers 2 of them. "
                        "Not answered: “How do neonicotinoids affect bumblebees?”.")
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == ["## What does HyDE do", "## how does ColBERT score documents?", "## How do neonicotinoids affect bumblebees?"]
    body = answer.split("## ", 2)
    assert "HyDE writes" in body[1] and "ColBERT scores" in body[2] and "[1]" in body[1] and "[2]" in body[2]
    assert "Nothing in your library answers this part: no passage covers “neonicotinoids affect bumblebees”." in answer
    assert cited_keys(answer) == ["GAOHYDE0", "KHATCOLB"]  # numbered in the order first cited


def test_a_comparison_sets_the_subjects_side_by_side() -> None:
    prime = hit("ANZPRIME", "Prime Editing", "Prime editing writes edits without double-strand breaks. Compared with base "
                "editing, prime editing offered complementary strengths. Base editing converts single bases.")
    answer = compose_answer("What is the difference between prime editing and base editing?", {"scope": "library", "passages": [prime]})
    assert answer.startswith("Side by side, what your library says about prime editing and base editing:")
    headings = [line for line in answer.splitlines() if line.startswith("## ")]
    assert headings == ["## Compared directly", "## Prime editing", "## Base editing"]
    assert "## Compared directly\n- Compared with base editing, prime editing offered complementary strengths. [1]" in answer
    assert "## Base editing\n- Base editing converts single bases. [1]" in answer


def test_an_item_cited_on_two_pages_is_listed_once_with_both_pages() -> None:
    p1 = hit("VASWATTN", "Attention Is All You Need", "The Transformer relies on self-attention alone.", page=1,
             creators=("Ashish Vaswani", "Noam Shazeer", "Niki Parmar"), year=2017)
    p8 = dict(p1, n=2, page=8, text="The big Transformer reaches 28.4 BLEU on WMT 2014 with self-attention.")
    answer = compose_answer("What does the Transformer do with self-attention?", {"scope": "library", "passages": [p1, p8]})
    assert answer.count("/items/VASWATTN") == 1
    assert "[1] Ashish Vaswani, Noam Shazeer & Niki Parmar (2017). Attention Is All You Need. pp. 1, 8. " \
           "(zotero://select/library/items/VASWATTN)" in answer
    assert "[1, p. 1]" in answer and "[1, p. 8]" in answer and "[2" not in answer


def test_csl_like_entries() -> None:
    assert entry({"title": "T", "creators": ["A B"], "year": 2020}, [3]) == "A B (2020). T. p. 3."
    assert entry({"title": "T?", "creators": ["A", "B", "C", "D"], "year": None}, []) == "A et al. (n.d.). T?"
    assert entry({"title": "Roe v. Wade", "creators": [], "year": 1973}, []) == "Roe v. Wade (1973)."


def test_a_focal_snippet_is_quoted_first_and_its_item_keeps_its_metadata() -> None:
    focal = {**hit("LEWIS202", "LEWIS202", "The retriever is a bi-encoder.", creators=(), year=None, page=2), "focal": True}
    found = hit("LEWIS202", "Retrieval-Augmented Generation", "Passages are retrieved from a dense index.", n=2, page=3,
                creators=("Patrick Lewis",))
    answer = compose_answer("How are passages retrieved?", {"scope": "papers", "passages": [focal, found]})
    assert answer.splitlines()[2].startswith("- The retriever is a bi-encoder. [1")
    assert "[1] Patrick Lewis (2020). Retrieval-Augmented Generation. pp. 2, 3." in answer


@pytest.mark.parametrize(("facts", "scope", "says"), [
    ({"state": "disabled", "items": 0, "message": "no Zotero library is configured"}, "library",
     "I have no library to search: no Zotero library is configured."),
    ({"state": "indexing", "percent": 42.4, "items": 120}, "library", "still being indexed (42% done)"),
    ({"state": "ready", "items": 9, "scope_items": 0}, "papers", "No papers are selected, so there was nothing to search."),
    ({"state": "ready", "items": 9, "scope_items": 0}, "collection", "The selected collection has no items"),
    ({"state": "ready", "items": 9, "scope_items": 4, "elsewhere": 2, "elsewhere_items": 1}, "collection",
     "in the selected collection, but 2 passages in 1 item elsewhere in your library answer it. Widen the scope"),
    ({"state": "ready", "items": 9, "scope_items": 4, "elsewhere": 0, "elsewhere_items": 0}, "collection",
     "in the selected collection, nor anywhere else in your library."),
    ({"state": "ready", "items": 9}, "library", "I found nothing about “varroa mites” in your library (9 items indexed)."),
])
def test_found_nothing_says_the_real_cause(facts: dict[str, Any], scope: str, says: str) -> None:
    answer = compose_answer("What about varroa mites?", {"scope": scope, "passages": [], "library": facts})
    assert says in answer, answer
    assert ("widen" in answer.casefold()) == bool(facts.get("elsewhere")), answer


BEES = Passage("BEEKEEP1", "Honeybee Colony Collapse and Varroa Mites", "Varroa mites weaken honeybee colonies.",
               collections=("MISCCOLL",))
DPR = Passage("KARPDPR1", "Dense Passage Retrieval", "Dense passage retrieval encodes questions with BERT.", collections=("DENSE0CO",))


async def facts_for(retriever: InMemoryRetriever, query: str, scope: Scope) -> dict[str, Any]:
    research = Research.start(invocation_id="i", branch=None, query=query, scope=scope, initial_budget=3, max_extensions=0)
    hits = []
    while (aspect := research.next_aspect()) is not None:
        hits = await retriever.search(aspect, scope)
        research.record_round(aspect, hits)
    passages = [h.as_json() for h in hits]
    return await search_facts(retriever, research.scope, research.query, research.aspects, passages)


async def test_search_facts_come_from_the_retrievers_status_and_a_library_wide_search() -> None:
    lib = InMemoryRetriever([BEES, DPR])
    facts = await facts_for(lib, "What about varroa mites?", Scope("collection", collection="DENSE0CO"))
    assert facts == {"scope": "collection", "state": "ready", "percent": 100.0, "items": 2, "message": None,
                     "scope_items": 1, "elsewhere_items": 1, "elsewhere": 1}
    facts = await facts_for(lib, "What about varroa mites?", Scope("collection", collection="EMPTY000"))
    assert facts["scope_items"] == 0 and "elsewhere" not in facts
    facts = await facts_for(lib, "What about varroa mites?", Scope("library"))
    assert "elsewhere" not in facts and "scope_items" not in facts  # the scope is the library: no second search
    facts = await facts_for(InMemoryRetriever([]), "What about varroa mites?", Scope("library"))
    assert facts["state"] == "disabled"


# --- the seams with the library index: folding, CJK, topic lists, the metadata chunk ---------------

ZH = {**hit("ZHPAPER1", "基于神经网络的机器学习方法", "本文研究机器学习中的神经网络训练方法。实验结果表明该方法有效。",
            creators=("王伟",)), "kind": "fulltext"}
ZH_OTHER = {**hit("ZHOTHER1", "城市交通规划", "城市交通规划需要考虑学习成本。", n=2, creators=("李娜",)), "kind": "fulltext"}


def test_chinese_questions_are_matched_by_the_index_bigrams() -> None:
    answer = compose_answer("什么是机器学习中的神经网络训练方法？", {"scope": "library", "passages": [ZH_OTHER, ZH]})
    assert cited_keys(answer) == ["ZHPAPER1"], answer  # "学习" alone (one bigram of eleven) is not evidence
    assert "\n- 本文研究机器学习中的神经网络训练方法。 [1]\n" in answer, answer  # the sentence, cut at "。"
    part = parse_question("什么是机器学习中的神经网络训练方法？").parts[0]
    assert {t.stem for t in part.terms} >= {"机器", "学习", "神经", "网络", "训练", "方法"}
    assert not {"什么", "么是"} & {t.stem for t in part.terms}  # the question's frame is not a topic
    zh, other = prepare([ZH, ZH_OTHER])
    assert is_evidence(part, zh) and not is_evidence(part, other)
    # Japanese: hiragana particles and endings frame the question; the kanji compound is the topic.
    ja = {**hit("JAPAPER1", "機械学習入門", "機械学習はデータから規則を学ぶ方法である。"), "kind": "fulltext"}
    assert cited_keys(compose_answer("機械学習とは何ですか？", {"scope": "library", "passages": [ja]})) == ["JAPAPER1"]
    assert split_sentences("第一句。第二句！「第三句？」Fourth, in English. Fifth.") == [
        "第一句。", "第二句！", "「第三句？」", "Fourth, in English.", "Fifth."]


LUBECK = {**hit("LUBECK01", "Hanseatic trade in Lübeck", "Jörg Müller 1999 hanse baltic\n\nMerchants of Lübeck and the Baltic salt route.",
                page=None, creators=("Jörg Müller",), year=1999), "kind": "metadata"}


@pytest.mark.parametrize("question", ["salt route of Lubeck", "salt route of Lübeck", "SALT ROUTE OF LÜBECK"])
def test_accents_fold_as_in_the_index(question: str) -> None:
    answer = compose_answer(question, {"scope": "library", "passages": [LUBECK]})
    assert cited_keys(answer) == ["LUBECK01"], answer
    plain = {**LUBECK, "text": "Merchants of Lubeck and the Baltic salt route.", "kind": "fulltext", "page": 1}
    assert cited_keys(compose_answer(question, {"scope": "library", "passages": [plain]})) == ["LUBECK01"]


def test_a_metadata_quote_starts_at_the_abstract_not_at_its_header() -> None:
    """The header (creators, year, tags) is searchable, never quoted: `METADATA_BREAK` parts them."""
    answer = compose_answer("salt route of Lubeck", {"scope": "library", "passages": [LUBECK]})
    assert "\n- Merchants of Lübeck and the Baltic salt route. [1]\n" in answer, answer
    assert "hanse baltic" not in answer and "Müller 1999" not in answer.split("# Cited Sources")[0]
    # An index written before the break: the "Author 1999" prefix is still cut.
    legacy = {**LUBECK, "text": "Jörg Müller 1999 Merchants of Lübeck and the Baltic salt route."}
    assert "\n- Merchants of Lübeck" in compose_answer("salt route of Lubeck", {"scope": "library", "passages": [legacy]})


def test_the_index_writes_the_metadata_break_the_answerer_cuts_at(tmp_path: Any) -> None:
    from zocratesd.engine.tools import _numbered
    from zocratesd.library._records import ItemRecord
    from zocratesd.library.index import IndexWriter, open_index, search

    item = ItemRecord("DEMOHYDE", "journalArticle", "Hypothetical Document Embeddings", creators=("Wen Zhao", "Priya Raman"),
                      year=2022, tags=("dense retrieval", "zero-shot"), stamp="1",
                      abstract="Hypothetical document embeddings make dense retrieval work without relevance labels.")
    conn = open_index(tmp_path / "library.db")
    try:
        writer = IndexWriter(conn)
        writer.write_items([(item, {})])
        writer.finish_vectors()
        writer.close()
        hits = search(conn, "zero-shot dense retrieval Zhao", Scope(), 3)  # the header's words are searchable
        assert hits and hits[0].passage.kind == "metadata"
        assert hits[0].passage.text == "Wen Zhao; Priya Raman 2022 dense retrieval zero-shot\n\n" + item.abstract
    finally:
        conn.close()
    answer = compose_answer("How does dense retrieval work without relevance labels?",
                            {"scope": "library", "passages": _numbered([(h.passage, h.score) for h in hits])})
    assert "\n- Hypothetical document embeddings make dense retrieval work without relevance labels. [1]\n" in answer, answer


SQUAT_Q = "What about varroa mites, HyDE and hypothetical documents? Any instructions?"
HYDE = hit("GAOHYDE1", "Precise Zero-Shot Dense Retrieval without Relevance Labels",
           "HyDE asks a language model to write a hypothetical document, then embeds it to retrieve real ones.", page=2)
VARROA = {**hit("BEEKEEP1", "Honeybee Colony Collapse and Varroa Mites",
                "Apiary Research Council 2018\n\nVarroa mites weaken honeybee colonies; beekeepers treat hives with oxalic acid.",
                n=2, page=None, creators=("Apiary Research Council",), year=2018), "kind": "metadata"}


def test_a_list_of_topics_is_a_part_per_topic() -> None:
    """tests/reliability/test_library_squatter.py: retrieval ranked the varroa paper first, yet it
    covered two of the list's five words (0.4 < MIN_COVERAGE) and was dropped: the topics are parts."""
    q = parse_question(SQUAT_Q)
    assert [p.text for p in q.parts] == ["Varroa mites", "HyDE", "Hypothetical documents", "Any instructions?"]
    answer = compose_answer(SQUAT_Q, {"scope": "library", "passages": [VARROA, HYDE]})
    assert cited_keys(answer) == ["BEEKEEP1", "GAOHYDE1"], answer
    assert "## Varroa mites\n- Varroa mites weaken honeybee colonies" in answer
    assert "Not answered: “Any instructions?”" in answer
    # Not a list of topics: a frame that says what is asked about them, a clause, two items, a comparison.
    for text in ("What is the effect of heat, light and salt on yield?", "What about varroa mites and HyDE?",
                 "How does HyDE work, and why do varroa mites spread?"):
        assert all(len(p.text.split()) > 2 for p in parse_question(text).parts), text
    assert parse_question("How do transformers, RNNs and CNNs differ?").comparison
    assert [p.text for p in parse_question("Tell me about sleep spindles, the hippocampus, and coral bleaching").parts] == [
        "Sleep spindles", "Hippocampus", "Coral bleaching"]


def test_one_folding_for_the_index_and_the_answerer() -> None:
    from zocratesd.library import index
    from zocratesd.textnorm import cjk_bigrams, fold

    assert index.cjk_bigrams is cjk_bigrams  # the index's bigrams are these (one definition)
    assert fold("Lübeck Ångström ﬁnd ＡＢＣ Straße") == "lubeck angstrom find abc strasse"
    assert fold("한국어 機械学習 中文") == "한국어 機械学習 中文"  # CJK untouched: NFKD would split a Hangul syllable


@pytest.mark.parametrize(("asked", "part"), [
    ("Is it true that HOXB4 is expressed in fetal liver?", "HOXB4 is expressed in fetal liver?"),
    ("What evidence is there that IL-18 drives atherosclerosis?", "IL-18 drives atherosclerosis?"),
    ("What does the literature say about whether surgery beats rest?", "Surgery beats rest?"),
    ("Is there any evidence for prion transmission in deer?", "Prion transmission in deer?"),
    ("Evidence for and against statins in the elderly", "Statins in the elderly"),
    ("Does the literature support that dropout prevents overfitting?", "Dropout prevents overfitting?"),
    ("I read that coral bleaching is irreversible. Is that so?", "Coral bleaching is irreversible."),
    # Not frames: the words name the topic.
    ("What is the true positive rate of HyDE?", "What is the true positive rate of HyDE?"),
    ("How is literature-based discovery evaluated?", "How is literature-based discovery evaluated?"),
    ("Is it true?", "Is it true?"),
])
def test_the_frame_a_claim_is_put_in_is_not_part_of_it(asked: str, part: str) -> None:
    assert split_parts(asked)[0] == part


def test_an_abbreviation_the_question_defines_is_no_term_of_its_own() -> None:
    surfaces = [t.surface for t in terms_of("risk of cardiovascular disease (CVD) in hypothetical document embeddings (HyDE)")]
    assert "CVD" not in surfaces and "HyDE" not in surfaces and "cardiovascular" in surfaces
    assert [t.surface for t in terms_of("CRISPR (Cas9) editing")] == ["CRISPR", "Cas9", "editing"]


def test_a_claim_is_answered_by_the_top_passage_that_says_it_in_other_words() -> None:
    """A statement of many content words, and the abstract the search ranked first, which shares
    about half of them and not the claim's named thing: evidence (a question of as many words is not)."""
    paper = {"item_key": "BIRDSEX1", "title": "Somatic sex identity is cell autonomous in the chicken", "kind": "metadata",
             "text": "Chicken sex determination\n\nHere we show that gynandromorph chickens have a male and a female side: "
                     "somatic cells of birds carry an inherent sex identity, so sex determination is cell autonomous.",
             "creators": ["D. Zhao"], "year": 2010, "page": None}
    claim = "Cell autonomous sex determination in somatic cells occurs in Galliformes."
    assert "BIRDSEX1" in compose_answer(claim, {"scope": "library", "passages": [paper]})
    question = "Which genes control sex determination in somatic cells of Galliformes?"
    assert "found nothing" in compose_answer(question, {"scope": "library", "passages": [paper]})


def test_a_sentence_of_both_the_abstract_and_a_page_is_quoted_once_with_its_page() -> None:
    """A PDF's first page repeats its abstract: the sentence is quoted once, from the page (a
    citation a reader can open there), not a second time from the abstract without a page."""
    said = "We detect a strong association between sleep spindle density and overnight memory retention in older adults."
    abstract = {**hit("SPINDLE1", "Sleep spindles and memory", f"Lee 2019\n\n{said} Spindles were counted by EEG.",
                      n=1, page=None), "kind": "metadata"}
    page = {**hit("SPINDLE1", "Sleep spindles and memory", f"Introduction. {said} Participants slept in the lab.",
                  n=2, page=1), "kind": "fulltext", "page_label": "1"}
    answer = compose_answer("How does sleep spindle density relate to memory retention?",
                            {"scope": "library", "passages": [abstract, page]})
    assert answer.count(said) == 1, answer
    assert "p. 1" in answer


def test_an_enumerated_part_does_not_end_in_the_word_that_joins_it_to_the_next() -> None:
    assert split_parts("1) what is xCT 2) how does mTORC2 regulate xCT, and 3) what does GPX4 do?") == [
        "what is xCT", "how does mTORC2 regulate xCT", "what does GPX4 do?"]
    assert split_parts("(a) What is xCT? (b) How does mTORC2 regulate xCT, and (c) what does GPX4 do?")[1] == (
        "How does mTORC2 regulate xCT")
