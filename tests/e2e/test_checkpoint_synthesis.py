"""A research turn that stops at checkpoints, against a real daemon on a Zotero library (Zotero's
own schema, PDF texts with running headers and page numbers): the editor answers over the socket
"search further" with guidance, twice, then "answer now". The answer says which parts it answers,
which were searched without an answer and which were not searched yet; guidance is searched
first; the question keeps its part count unless guidance names a new topic, and then says so."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rawrpc import RawConn
from test_checkpoints import stored_rounds
from test_library import cited, wait_ready
from zoterofixture import PAGE_BREAK, FixtureAttachment, FixtureItem, build_zotero_dir

pytestmark = pytest.mark.e2e


def pdf(header: str, pages: list[str]) -> str:
    """A PDF's text as Zotero's cache keeps it: each page opens with the journal's running header
    and ends with its page number."""
    return PAGE_BREAK.join(f"{header}\n\n{body}\n\n{n}\n\n" for n, body in enumerate(pages, start=1))


def paper(key: str, title: str, abstract: str, body: str | None = None) -> FixtureItem:
    attachments = [FixtureAttachment(key[:4] + "PDF" + key[-1], text=pdf("Cell Death Differ (2019) 26:1-9", [
        "Introduction. Ferroptosis is an iron-dependent form of regulated cell death.", body]))] if body else []
    return FixtureItem(key, title, creators=[("Ada", key.title())], date="2019", abstract=abstract, attachments=attachments)


LIBRARY = [
    paper("MTORXCT1", "mTORC2 regulates amino acid metabolism in cancer by phosphorylation of the cystine-glutamate antiporter xCT",
          "mTORC2 phosphorylates xCT at serine 26, which inhibits its cystine uptake activity.",
          "Phosphorylation of xCT by mTORC2 suppresses cystine import and glutathione synthesis."),
    paper("GPX4FER1", "Regulation of ferroptotic cancer cell death by GPX4",
          "GPX4 reduces lipid hydroperoxides and thereby prevents ferroptosis."),
    paper("ERASTIN1", "Ferroptosis: an iron-dependent form of nonapoptotic cell death",
          "Erastin blocks system xc- and depletes glutathione, which triggers ferroptosis."),
    paper("ACSL4DOL", "ACSL4 dictates ferroptosis sensitivity by shaping cellular lipid composition",
          "ACSL4 enriches cellular membranes with long polyunsaturated fatty acids."),
    paper("P53SLC71", "Ferroptosis as a p53-mediated activity during tumour suppression",
          "p53 represses SLC7A11 transcription and so sensitises cells to ferroptosis."),
    paper("IRONCHE1", "Iron chelation in ferroptotic cell death",
          "Iron chelators such as deferoxamine block ferroptotic cell death."),
    paper("NRF2ACT1", "NRF2 and the antioxidant response in ferroptosis",
          "NRF2 activates antioxidant genes including SLC7A11 and GPX4."),
    paper("LIPROX01", "Liproxstatin protects mice from acute renal failure",
          "Liproxstatin is a radical-trapping antioxidant that halts lipid peroxidation.",
          "Liproxstatin protected mice from acute renal failure."),
]
# Eight parts; the library answers all but the fourth (nothing here on TFRC1).
EIGHT = ("How does mTORC2 regulate xCT? What does GPX4 do? How does erastin trigger ferroptosis? "
         "What does TFRC1 import? What does ACSL4 enrich? How does p53 affect SLC7A11? "
         "Which iron chelators block cell death? What does NRF2 activate?")
PARTS = [p + "?" for p in EIGHT.rstrip("?").split("? ")]


def turn(c: RawConn, sid: str, text: str, answers: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """One prompt, its checkpoints answered as an editor does (`answers`, in order): the answer's
    text and the checkpoints asked (their tool calls)."""
    asked: list[dict[str, Any]] = []
    c.notifications.clear()
    c.send({"jsonrpc": "2.0", "id": "p", "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})
    while True:
        msg = c.recv()
        if msg.get("method") == "session/request_permission":
            asked.append(msg["params"]["toolCall"])
            c.send({"jsonrpc": "2.0", "id": msg["id"], "result": answers[len(asked) - 1]})
        elif msg.get("id") == "p":
            assert msg["result"]["stopReason"] == "end_turn", msg
            break
        else:
            c.notifications.append(msg)
    answer = "".join(n["params"]["update"]["content"]["text"] for n in c.notifications
                     if n["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
    return answer, asked


def extend(guidance: str | None = None) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": "extend"},
            **({"_meta": {"zocrates": {"guidance": guidance}}} if guidance else {})}


ANSWER_NOW = {"outcome": {"outcome": "selected", "optionId": "synthesize"}}


def test_answer_now_after_guidance_says_what_was_answered_searched_and_left(daemon_factory: Any) -> None:
    d = daemon_factory()
    build_zotero_dir(d.data_dir, LIBRARY)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps(
        {"library": {"local_api": False}, "research": {"initial_budget": 2, "max_extensions": 3}}))
    d.start()
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
        sid = c.result("session/new", {"cwd": "/tmp", "mcpServers": []})["sessionId"]
        answer, asked = turn(c, sid, EIGHT, [extend("liproxstatin"), extend("NRF2 antioxidant genes"), ANSWER_NOW])
        # The answer's offer taken up: the parts left are searched now (two rounds, then one more).
        rest, asked_again = turn(c, sid, "Search the rest", [extend()])

    assert [a["rawInput"]["unaddressed_aspects"] for a in asked] == [PARTS[2:], PARTS[3:], PARTS[4:7]]
    assert asked[0]["title"].startswith("I searched 2 of the 8 parts of your question,")
    # The new topic is a part of its own, and said to be; the guidance on NRF2 is that part's.
    assert asked[1]["title"].startswith(
        'I searched 4 of 9 parts (the 8 parts of your question and "liproxstatin", a new part from your guidance),')
    assert asked[2]["title"].startswith("I searched 6 of 9 parts (the 8 parts")
    # Guidance first, each time: round 3 is the new topic, round 5 the NRF2 part with the user's words.
    assert [aspect for _, aspect in stored_rounds(d.db_path, sid)] == [
        PARTS[0], PARTS[1], "liproxstatin", PARTS[2], f"{PARTS[7]} NRF2 antioxidant genes", PARTS[3], *PARTS[4:7]]

    head, _, body = answer.partition("\n## ")
    assert head.startswith("Your question has 8 parts, and your guidance added “liproxstatin” as a new part. "
                           "I had searched 6 of 9 when you asked for the answer."), answer
    assert ("- Answered: “How does mTORC2 regulate xCT?”; “What does GPX4 do?”; “How does erastin trigger ferroptosis?”; "
            "“What does NRF2 activate?”; “liproxstatin”.") in head
    assert "- Searched, but nothing in your library answers: “What does TFRC1 import?”." in head
    assert ("- Not searched yet: “What does ACSL4 enrich?”; “How does p53 affect SLC7A11?”; "
            "“Which iron chelators block cell death?”. Say “search the rest” and I will search your library for them.") in head
    assert "Not answered" not in answer
    for left in PARTS[4:7]:  # no section, no "nothing answers" for a part nobody searched
        assert f"## {left}" not in answer
    assert {"MTORXCT1", "GPX4FER1", "ERASTIN1", "NRF2ACT1", "LIPROX01"} <= set(cited(answer))
    assert "## liproxstatin" in body or body.startswith("liproxstatin")

    assert asked_again[0]["rawInput"]["unaddressed_aspects"] == PARTS[6:7]
    assert rest.startswith("Searching the 3 parts of your earlier question I had not searched yet."), rest
    for part in PARTS[4:7]:
        assert f"## {part}" in rest
    assert {"ACSL4DOL", "P53SLC71", "IRONCHE1"} <= set(cited(rest))
