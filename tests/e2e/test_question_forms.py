"""Questions as researchers put them, against a real `zocratesd serve` over its socket: a claim, or
"Is it true that ...?", "What evidence is there that ...?", "What does the literature say about
...?", answered from the paper that bears on it, on a Zotero 10 library of biomedical abstracts
(BEIR SciFact, read in place from the shared data: each claim's cited abstract and distractors).
"Found nothing" only when nothing is there, and then it names what is missing."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from rawrpc import RawConn
from test_library import ask, cited, wait_ready
from zoterofixture import FixtureItem, Note, build_zotero_dir

pytestmark = pytest.mark.e2e

SCIFACT = Path(__file__).resolve().parents[3] / "shared" / "data" / "beir" / "scifact"
DISTRACTORS = 300

# SciFact claims and the abstract each cites (its qrels), chosen where the claim's words and the
# abstract's differ the way they do in practice: a named thing the paper calls otherwise
# ("Galliformes": chickens), an abbreviation the claim defines ("(CVD)"), a paraphrase.
CLAIMS = {
    "Cell autonomous sex determination in somatic cells occurs in Galliformes.": "4388470",
    "An M2-like phenotype in brown adipose tissue macrophages is quickly induced by cold exposure.": "4319174",
    "It is not proven that moderate consumption of candy and chocolate reduces the risk of cardiovascular disease (CVD) "
    "specifically.": "5293024",
}
# A paper that spells out what a natural question abbreviates ("GPs": general practice).
PRESCRIBING = FixtureItem(
    "BRITTEN0", "Misunderstandings in prescribing decisions in general practice", creators=[("Nicky", "Britten")],
    date="2000", abstract=(
        "Objective: to describe misunderstandings between patients and doctors associated with prescribing decisions "
        "in general practice. Design: qualitative study of consultations in 20 practices. Results: we identified 14 "
        "categories of misunderstanding, among them patient information unknown to the doctor, conflicting "
        "information, and disagreement about the attribution of side effects. All were associated with a lack of "
        "patients' participation in the consultation. Conclusions: patients' hopes and preferences about medicines "
        "should be voiced and discussed before a prescription is written."))
FORMS = {
    "claim": "{claim}",
    "is it true": "Is it true that {lower}?",
    "evidence": "What evidence is there that {lower}?",
    "literature": "What does the literature say about whether {lower}?",
}


def _lower(claim: str) -> str:
    text = claim.rstrip(".")
    return text[0].lower() + text[1:] if text[1:2].islower() else text


def _key(corpus_id: str) -> str:
    return ("S" + corpus_id).rjust(8, "0")[:8]


def _corpus() -> dict[str, dict[str, Any]]:
    path = SCIFACT / "corpus.jsonl"
    if not path.is_file():
        raise AssertionError(f"this test reads SciFact in place and needs {path} (the shared data)")
    with open(path, encoding="utf-8") as f:
        return {str(d["_id"]): d for d in map(json.loads, f)}


@pytest.fixture(scope="module")
def library_items() -> list[FixtureItem]:
    corpus = _corpus()
    wanted = set(CLAIMS.values())
    rng = random.Random(20261206)
    ids = sorted(wanted) + rng.sample(sorted(set(corpus) - wanted), DISTRACTORS)
    return [FixtureItem(_key(i), corpus[i]["title"], abstract=corpus[i]["text"], date="2015") for i in ids] + [PRESCRIBING]


@pytest.fixture()
def session(daemon_factory: Any, library_items: list[FixtureItem]) -> Any:
    d = daemon_factory()
    # Two standalone notes: records of the index, not papers (an answer counts papers, as the status does).
    notes = [Note("NOTESTA1", "Reading list for the lab meeting."), Note("NOTESTA2", "Ideas about dengue and cities.")]
    build_zotero_dir(d.data_dir, library_items, version=129, notes=notes)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}}))
    d.start()
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
        yield c, c.result("session/new", {"cwd": "/tmp"})["sessionId"]
    d.stop()


def test_a_claim_in_every_form_is_answered_from_the_paper_that_bears_on_it(session: Any) -> None:
    c, sid = session
    missed = []
    for claim, corpus_id in CLAIMS.items():
        for form, template in FORMS.items():
            question = template.format(claim=claim, lower=_lower(claim))
            answer = ask(c, sid, question, mode="library")
            if _key(corpus_id) not in cited(answer):
                missed.append(f"{form}: {question!r} -> {answer[:300]!r}")
    assert not missed, "\n".join(missed)


def test_the_frame_is_not_what_was_searched_for_and_a_refusal_names_what_is_missing(session: Any) -> None:
    c, sid = session
    answer = ask(c, sid, "Is it true that tardigrades survive the vacuum of space in cryptobiosis?", mode="library")
    assert "# Cited Sources" not in answer
    assert "true that" not in answer  # the topic named is the claim, not its frame
    assert "about “Tardigrades survive the vacuum of space in cryptobiosis”" in answer, answer
    assert "The closest passage lacks “Tardigrades”" in answer and "words asked about" in answer, answer
    papers = c.result("_zocrates/library/status", {})["kinds"]["items"]
    assert f"in your library ({papers} items indexed)" in answer, answer


def test_a_natural_question_meets_the_paper_that_spells_out_its_abbreviation(session: Any) -> None:
    c, sid = session
    answer = ask(c, sid, "What misunderstandings occur between GPs and patients about prescribing?", mode="library")
    assert cited(answer)[:1] == ["BRITTEN0"], answer


def test_a_pasted_abstract_is_one_text_to_match_not_a_question_of_many_parts(session: Any) -> None:
    """"Which of my papers bear on this abstract? <a whole abstract>": the abstract's sentences are
    not each a part to answer; its key terms find the paper it comes from."""
    c, sid = session
    corpus = _corpus()
    doc = max(CLAIMS.values(), key=lambda i: corpus[i]["text"].count(". "))
    abstract = corpus[doc]["text"]
    assert abstract.count(". ") >= 4, "the test needs an abstract of several sentences"
    answer = ask(c, sid, f"Which papers in my library bear on this abstract? {abstract}", mode="library")
    assert "parts" not in answer.split("\n", 1)[0], answer[:400]
    assert cited(answer)[:1] == [_key(doc)], answer[:600]
