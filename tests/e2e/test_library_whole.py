"""Notes, annotations, group libraries, Chinese text and unprocessed full text through a real
`zocratesd serve` over the socket, from a schema-true Zotero 10 data dir (zocratesd/demo/zotero_dir.py):
each question's only answer is in one of them, and the answer cites that item. One daemon for all.
Then PDFs printed as journals print them (running headers, page numbers, hyphenated lines): their
passages quote the prose only, on the pages and with the page labels they had."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from rawrpc import RawConn
from zoterofixture import FixtureAttachment, FixtureItem, PageFurniture, build_zotero_dir, printed_pages, rich_library

from zocratesd.demo.zotero_dir import ZOTERO_10, Attachment, Item, pdf_file, write

pytestmark = pytest.mark.e2e

_ITEMS_RE = re.compile(r"/items/([A-Z0-9]{8})")
READY_TIMEOUT_S = 60.0


def wait_ready(c: RawConn) -> dict[str, Any]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = c.result("_zocrates/library/status", {})
        if st["state"] in ("ready", "error", "unavailable"):
            return st
        time.sleep(0.05)
    raise AssertionError(f"the library index was not ready in {READY_TIMEOUT_S} s: {st}")


class Turn:
    def __init__(self, answer: str, passages: list[dict[str, Any]]):
        self.answer = answer
        self.passages = passages  # what search_library returned (tool_call_update rawOutput), in order


def _passages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        if "item_key" in value and "link" in value:
            return [value]
        return [p for v in value.values() for p in _passages(v)]
    if isinstance(value, list):
        return [p for v in value for p in _passages(v)]
    return []


def ask(c: RawConn, sid: str, text: str, prompt_extra: list[dict[str, Any]] | None = None, **meta: Any) -> Turn:
    blocks = [{"type": "text", "text": text}, *(prompt_extra or [])]
    reply = c.call("session/prompt", {"sessionId": sid, "prompt": blocks, "_meta": {"zocrates": meta}})
    assert reply["result"]["stopReason"] == "end_turn", reply
    ups = [n["params"]["update"] for n in c.notifications if n["method"] == "session/update"]
    c.notifications.clear()
    answer = "".join(u["content"]["text"] for u in ups if u["sessionUpdate"] == "agent_message_chunk")
    found = [p for u in ups if u["sessionUpdate"] == "tool_call_update" for p in _passages(u.get("rawOutput"))]
    return Turn(answer, found)


def cited(turn: Turn) -> set[str]:
    """The item keys the answer links to (zotero://.../items/KEY), whatever its layout."""
    return set(_ITEMS_RE.findall(turn.answer))


def first(turn: Turn) -> dict[str, Any]:
    """The best passage search_library returned."""
    assert turn.passages, turn.answer
    return turn.passages[0]


def test_every_kind_of_text_is_found_and_cited(daemon_factory: Any) -> None:
    d = daemon_factory()
    write(d.data_dir, rich_library(), version=ZOTERO_10)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}}))
    d.start()
    with RawConn(d.socket_path) as c:
        st = wait_ready(c)
        assert st["state"] == "ready", st
        assert st["kinds"] == {"items": 10, "notes": 2, "annotations": 2, "texts": 6}
        assert [(lib["library"], lib["name"]) for lib in st["libraries"]] == [("user", "My Library"), ("groups/4242", "Lab Group")]
        assert st["summary"].startswith("library ready: 10 items, 6 full texts, 2 notes, 2 annotations in 2 libraries (from ")
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]

        t = ask(c, sid, "What does axolotl regeneration depend on?")  # a child note
        assert "NOTEPAR1" in cited(t)
        assert (first(t)["item_key"], first(t)["kind"], first(t)["source_key"]) == ("NOTEPAR1", "note", "NOTECHL1")
        t = ask(c, sid, "How many animals did the quokka census count?")  # a standalone note
        assert "NOTESOL1" in cited(t) and first(t)["link"] == "zotero://select/library/items/NOTESOL1"
        t = ask(c, sid, "What did I compare with bioluminescent plankton?")  # an annotation's comment
        assert "ANNPAPER" in cited(t)
        assert (first(t)["source_key"], first(t)["page_label"], first(t)["link"]) == (
            "ANNOTCM1", "xi", "zotero://open-pdf/library/items/ANNPDF01?page=2&annotation=ANNOTCM1")
        t = ask(c, sid, "How does tardigrade cryptobiosis work?")  # a group library
        assert "GRPPAPR1" in cited(t) and first(t)["library"] == "groups/4242"
        assert first(t)["link"] == "zotero://select/groups/4242/items/GRPPAPR1"
        t = ask(c, sid, "什么是机器学习中的神经网络训练方法？")  # Chinese text: found by the CJK bigram index
        assert first(t)["item_key"] == "ZHPAPER1" and first(t)["link"].startswith("zotero://open-pdf/library/items/ZHPDF001?page=")
        assert cited(t) == {"ZHPAPER1"} and "本文研究机器学习中的神经网络训练方法。" in t.answer, t.answer  # and answered from it
        t = ask(c, sid, "What are pangolin scales made of?")  # only in .zotero-ft-unprocessed
        assert "SYNCPAPR" in cited(t) and first(t)["link"] == "zotero://open-pdf/library/items/SYNCPDF1?page=1"
        t = ask(c, sid, "salt route of Lubeck")  # accents fold, in the search and in the answer
        assert first(t)["item_key"] == "LUBECK01" and cited(t) == {"LUBECK01"}, t.answer
        assert "\n- Merchants of Lübeck and the Baltic salt route. [1]\n" in t.answer, t.answer  # the abstract, no header
        t = ask(c, sid, "narwhal tusk sensing")  # feeds are never searched
        assert "FEEDITM1" not in t.answer and all(p["item_key"] != "FEEDITM1" for p in t.passages)

        # Group scope: only that library; a group item linked as zotero://select/groups/<id>/items/KEY.
        t = ask(c, sid, "tardigrade cryptobiosis", library="user")
        assert cited(t) == set() and t.passages == []
        t = ask(c, sid, "okapi stripes", library="groups/4242")
        assert cited(t) == {"LEWIS202"} and {p["library"] for p in t.passages} == {"groups/4242"}
        link = {"type": "resource_link", "uri": "zotero://select/groups/4242/items/GRPPAPR1", "name": "Surviving extremes"}
        t = ask(c, sid, "How do they survive desiccation?", [link])
        assert cited(t) == {"GRPPAPR1"} and {p["library"] for p in t.passages} == {"groups/4242"}
    d.stop()
    log = d.stderr_text()
    assert log.count("library: library ready: 10 items, 6 full texts") == 1  # logged once, not at every poll


# Six pages of a paper printed from page 127 (the PDF's own labels say so), and four of a review.
PAPER_PAGES = [
    "Ferroptosis is an iron dependent form of regulated cell death driven by lipid peroxidation in cellular membranes. "
    "We asked whether glioblastoma cells escape it through the cystine transporter.",
    "Glioblastoma lines were cultured in defined medium and treated with erastin at increasing concentrations. "
    "Lipid peroxidation was measured by flow cytometry with a ratiometric fluorescent probe.",
    "Phosphorylation of the transporter by mTORC2 reduced cystine uptake and sensitised every line to erastin. "
    "Pharmacological inhibition of the kinase restored transporter activity within hours.",
    "Xenografts with the phosphomimetic transporter grew more slowly and responded to sulfasalazine treatment, "
    "while the unphosphorylatable mutant conferred complete resistance in vivo.",
    "Together these observations place the kinase upstream of the transporter in a pathway that controls redox "
    "homeostasis, and suggest combination strategies for tumours with hyperactive signalling.",
    "We thank the animal facility staff. The authors declare no competing interests and all data are available "
    "from the corresponding author on reasonable request.",
]
REVIEW_PAGES = [
    "Regulatory T cells maintain peripheral tolerance through several complementary suppressive mechanisms.",
    "Interleukin two consumption deprives conventional effector cells of an essential growth signal.",
    "Inhibitory receptors on their surface strip costimulatory ligands from antigen presenting cells.",
    "Therapeutic expansion of these cells is being tested in autoimmune disease and transplantation.",
]
# Printed lines, words hyphenated at their ends, as pdftotext (Zotero 6 and earlier) wrote them.
PAPER = PageFurniture("Journal of Cancer Metabolism 12 (2019) 127-132", "{page} Okafor and Lindqvist", footer="{page}",
                      first_page=127, title_page=True, width=64)
REVIEW = PageFurniture("Annual Review of Immunology", footer="Page {page} of {pages}")  # a paragraph a line, as Zotero 7+ writes


def test_printed_pages_are_indexed_without_their_furniture_on_the_same_pages(daemon_factory: Any) -> None:
    d = daemon_factory()
    printed = printed_pages(PAPER_PAGES, PAPER)
    assert any(line.endswith("-") for page in printed for line in page.split("\n"))  # words split at line ends
    build_zotero_dir(d.data_dir, [
        Item("FERROPT1", "Kinase control of cystine import in glioma", creators=[("Ada", "Okafor"), ("Per", "Lindqvist")], date="2019",
             attachments=[Attachment("FERRPDF1", pages=printed, file_bytes=pdf_file(6, ((0, "D", "", 127),)))]),
        FixtureItem("TREGREV1", "Suppressive mechanisms of regulatory T cells", creators=[("Mei", "Chen")], date="2022",
                    attachments=[FixtureAttachment("TREGPDF1", text="\f".join(REVIEW_PAGES), printing=REVIEW)]),
    ], version=ZOTERO_10)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}}))
    d.start()
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
        for key, pages, labels, furniture in (
            ("FERROPT1", PAPER_PAGES, [str(127 + n) for n in range(6)], ("Cancer Metabolism", "Okafor and Lindqvist")),
            ("TREGREV1", REVIEW_PAGES, ["1", "2", "3", "4"], ("Annual Review", "Page ")),
        ):
            chunks = c.result("_zocrates/library/item", {"itemKey": key, "fulltext": True})["fulltext"]["chunks"]
            # One chunk per page, on its page and label, and it is the page's prose exactly: no
            # header, no page number, split words whole again.
            assert [(ch["page"], ch["page_label"], ch["text"]) for ch in chunks] == [
                (n, label, " ".join(body.split())) for n, (label, body) in enumerate(zip(labels, pages, strict=True), start=1)
            ], (key, chunks)
            assert not any(f in ch["text"] for ch in chunks for f in furniture)

        # The header's words find no passage of the text any more; the prose is found on its page.
        found = c.result("_zocrates/library/search", {"query": "Journal of Cancer Metabolism", "topK": 10})["passages"]
        assert not [p for p in found if p["kind"] == "fulltext"], found
        found = c.result("_zocrates/library/search", {"query": "phosphorylation of the transporter by mTORC2", "topK": 1})["passages"]
        assert [(p["item_key"], p["page"], p["page_label"], p["link"]) for p in found] == [
            ("FERROPT1", 3, "129", "zotero://open-pdf/library/items/FERRPDF1?page=3")]
        assert found[0]["text"].startswith("Phosphorylation of the transporter by mTORC2 reduced cystine uptake"), found
    d.stop()
