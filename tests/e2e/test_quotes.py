"""Quotes a researcher can check, against a real daemon over a Zotero data dir written as Zotero
makes it: PDFs printed with running headers, page numbers and words hyphenated at line ends, a
page-label tree starting at 127, ligatures in the extracted text, an item with only an abstract.

- Quote -> item and page: exact, reflowed (pasted from a PDF with its line breaks and hyphens) and
  slightly misquoted sentences, over JSON-RPC, the `zocrates find-quote` CLI and MCP's `find_quote`.
- Every quote verified: a real-model fake (OpenAI's chat completions API on 127.0.0.1) answering
  with (a) a correct quote, (b) an invented one, (c) a real quote given to the wrong paper, (d) the
  right quote with the wrong page, (e) a source of which only the abstract was read, (f) a book of
  which Zotero extracted the first pages only, (g) a quote with two words changed: flagged or
  corrected in the answer, `verified` per citation in ACP's `_meta`, the UI session object,
  `zocrates ask --json` and MCP's structured content; and the offline answerer's answer verified.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_openai import Behaviour, FakeOpenAI
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from rawrpc import RawConn
from test_cli import zocrates_command
from test_library import wait_ready
from zoterofixture import Attachment, Item, PageFurniture, build_zotero_dir, printed_pages

from zocratesd.demo.zotero_dir import pdf_file

pytestmark = pytest.mark.e2e

CLI_TIMEOUT_S = 120.0
MCP_TIMEOUT_S = 120.0

REEF = "QUOTEAAA"  # the coral paper: pages labelled 127-129
REEF_PDF = "QUOTEPDF"
HYDE = "QUOTEBBB"  # the retrieval paper: pages 1-2, no labels
HYDE_PDF = "QUOTEPD2"
SEAGRASS = "QUOTECCC"  # only an abstract
BOOK = "QUOTEDDD"  # a 442-page book of which Zotero extracted the first 3 pages
BOOK_PDF = "QUOTEPD3"
BOOK_SENTENCE = "Tidal marshes keep pace with sea level rise through sediment accretion and root growth."

ON_127 = "The ﬁrst surveys showed substantial differences between protected and unprotected sites across the archipelago."
ON_128 = "Symbiont shuffling increased thermal tolerance in colonies that survived consecutive heatwaves in the northern reefs."
ON_129 = "Management interventions must combine local protection with global emission reductions to be effective."
REEF_PAGES = [
    "Coral reefs recover from bleaching events when herbivorous fish populations remain abundant and water quality "
    f"is maintained throughout the recovery period. {ON_127}",
    f"Colonies were sampled every season for three consecutive years. {ON_128} The eﬀect persisted for two summers.",
    f"Reef managers asked what should change. {ON_129} Local action alone buys time but does not restore reefs.",
]
HYDE_SENTENCE = "Hypothetical document embeddings let a language model write a fake answer that is then used to retrieve real documents."
HYDE_PAGES = [
    f"{HYDE_SENTENCE} The fake answer is embedded by an unsupervised contrastive encoder.",
    "Zero-shot dense retrieval outperforms lexical baselines on several benchmark collections without relevance labels.",
]
SEAGRASS_ABSTRACT = "Seagrass meadows store large amounts of carbon in their sediments over millennia."
# As a journal prints them: running headers, page numbers, lines of 48 characters with long words
# hyphenated at a line's end (as pdftotext extracted them).
PRINTED = PageFurniture(odd_header="Journal of Reef Science 12 ({page})", even_header="Reef resilience", first_page=127, width=48)


def library(data_dir: Path) -> None:
    reef_pages = printed_pages(REEF_PAGES, PRINTED)
    assert any(line.endswith("-") for page in reef_pages for line in page.splitlines())  # some words are hyphenated
    items = [
        Item(REEF, "Coral reef resilience after bleaching", creators=[("Ana", "Reyes")], date="2021",
             attachments=[Attachment(REEF_PDF, pages=reef_pages, file_bytes=pdf_file(3, ((0, "D", "", 127),)))]),
        Item(HYDE, "Precise zero-shot dense retrieval", creators=[("Luyu", "Gao")], date="2022",
             attachments=[Attachment(HYDE_PDF, pages=HYDE_PAGES)]),
        Item(SEAGRASS, "Blue carbon in seagrass meadows", creators=[("Mia", "Olsen")], date="2019",
             fields={"abstractNote": SEAGRASS_ABSTRACT}),
        Item(BOOK, "Coastal wetlands", item_type="book", creators=[("Ines", "Duarte")], date="2020",
             attachments=[Attachment(BOOK_PDF, pages=["Preface.", BOOK_SENTENCE, "Chapter two begins here."], total_pages=442)]),
    ]
    build_zotero_dir(data_dir, items, version=129)


def cited_list(*entries: tuple[int, str, str]) -> str:
    return "\n\n# Cited Sources\n" + "\n".join(f"[{n}] {title}. (zotero://select/library/items/{key})" for n, key, title in entries)


def styled(question: str, passages: list[dict[str, Any]]) -> str:
    """Cases a, b and d in the author-year and Pandoc styles: "(Reyes, 2021, p. 128)", "[@key, p. 128]";
    a and d with a list in the style's form, b with none (the marker resolved through the passages)."""
    style, case = question.split()[0], question.split()[2].rstrip(":")
    key = next(p["citation_key"] for p in passages if p["item_key"] == REEF)

    def cite(page: str | None) -> str:
        at = f", p. {page}" if page else ""
        return f"[@{key}{at}]" if style == "pandoc" else f"(Reyes, 2021{at})"

    lead = f"[@{key}] " if style == "pandoc" else ""
    listed = cited_list((1, REEF, f"{lead}Ana Reyes (2021). Coral reef resilience after bleaching"))
    if case == "a":
        return f'Reyes reports that "{ON_128[:-1]}" {cite("128")}.' + listed
    if case == "b":
        return f"Reyes insists that \u201ccoral reefs never recover from bleaching without human help\u201d {cite(None)}."
    return f'The authors conclude: "{ON_129[:-1]}" {cite("127")}.' + listed


def narrative(question: str) -> str:
    """Cases a, b and d cited in the narrative author-year form ("Reyes (2021, p. 128) reports ..."),
    a and d with a list, b with none; a with names and years in parentheses that name no source."""
    listed = cited_list((1, REEF, "Ana Reyes (2021). Coral reef resilience after bleaching"))
    if "case a" in question:
        return (f'Reyes (2021, p. 128) reports that "{ON_128[:-1]}". The Paris Agreement (2015) and '
                'Reyes (2019) had said "reefs never bleach twice in a decade".' + listed)
    if "case b" in question:
        return "However, Reyes (2021) insists that \u201ccoral reefs never recover from bleaching without human help\u201d."
    return f'Reyes (2021, p. 127) concludes: "{ON_129[:-1]}".' + listed


def scripted(question: str, passages: list[dict[str, Any]]) -> str:
    """The fake model's answers, one per case, each from the numbered passages or its own list."""
    if question.startswith("narrative case"):
        return narrative(question)
    if question.startswith(("pandoc case", "author-year case")):
        return styled(question, passages)
    if question.startswith("case a"):  # a correct quote, its page named right
        return ('Reyes reports that "Symbiont shuffling increased thermal tolerance in colonies that survived consecutive '
                'heatwaves" [1, p. 128].' + cited_list((1, REEF, "Reyes (2021). Coral reef resilience. p. 128")))
    if question.startswith("case b"):  # an invented quote
        return ('Reyes insists that “coral reefs never recover from bleaching without human help” [1].'
                + cited_list((1, REEF, "Reyes (2021). Coral reef resilience")))
    if question.startswith("case c"):  # a real quote of the retrieval paper, cited by the coral paper's passage number
        n = next(p["n"] for p in passages if p["item_key"] == REEF)
        return f'Reyes writes that "{HYDE_SENTENCE[:-1]}" [{n}].'
    if question.startswith("case h"):  # a correct quote cited by its passage's number, no list (as models often do)
        n = next(p["n"] for p in passages if p["item_key"] == REEF)
        return f'Reyes reports that "{ON_128[:-1]}" [{n}].'
    if question.startswith("case d"):  # the right quote, the wrong page
        return (f'The authors conclude: "{ON_129[:-1]}" [1, p. 127].'
                + cited_list((1, REEF, "Reyes (2021). Coral reef resilience. p. 127")))
    if question.startswith("case f"):  # a book of which only the first pages were extracted
        return f'"{BOOK_SENTENCE[:-1]}" [1].' + cited_list((1, BOOK, "Duarte (2020). Coastal wetlands"))
    if question.startswith("case g"):  # a quote with two words changed
        return ('"Symbiont shuffling raised thermal tolerance in corals that survived consecutive heatwaves" [1].'
                + cited_list((1, REEF, "Reyes (2021). Coral reef resilience")))
    if question.startswith("case e"):  # a source read only in its abstract
        return (f'"{SEAGRASS_ABSTRACT[:-1]}" [1].' + cited_list((1, SEAGRASS, "Olsen (2019). Blue carbon in seagrass meadows")))
    return "I do not know."


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(Behaviour(answer=scripted))
    yield server
    server.close()


OPENAI_KEY_ENV = "ZQ_QUOTE_KEY"


def openai_config(fake: FakeOpenAI) -> dict[str, Any]:
    return {"library": {"local_api": False}, "http": {"enabled": False},
            "model": {"provider": "openai", "name": "fake/model", "base_url": fake.base_url, "api_key_env": OPENAI_KEY_ENV}}


@pytest.fixture
def openai_daemon(daemon_factory: Any, fake: FakeOpenAI) -> Any:
    d = daemon_factory()
    library(d.data_dir)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps(openai_config(fake)))
    d.env[OPENAI_KEY_ENV] = "sk-e2e"
    d.start()
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
    return d


@pytest.fixture
def offline_daemon(daemon_factory: Any) -> Any:
    d = daemon_factory()
    library(d.data_dir)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    (d.state_dir / "zocrates_config.json").write_text(json.dumps({"library": {"local_api": False}, "http": {"enabled": False}}))
    d.start()
    with RawConn(d.socket_path) as c:
        assert wait_ready(c)["state"] == "ready"
    return d


def ask(c: RawConn, sid: str, text: str) -> tuple[dict[str, Any], str]:
    reply = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": text}]})
    assert reply["result"]["stopReason"] == "end_turn", reply
    ups = [n["params"]["update"] for n in c.notifications if n["method"] == "session/update"]
    c.notifications.clear()
    return reply["result"]["_meta"]["zocrates"], "".join(u["content"]["text"] for u in ups if u["sessionUpdate"] == "agent_message_chunk")


def by_n(citations: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {c["n"]: c for c in citations}


def zocrates(d: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*zocrates_command(), "--zotero-data-dir", str(d.data_dir), *args], env=d.env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


# --- quote -> item and page -------------------------------------------------------------------------


def test_a_quote_is_found_with_its_item_page_label_and_pdf_link(offline_daemon: Any) -> None:
    with RawConn(offline_daemon.socket_path) as c:
        def find(quote: str) -> list[dict[str, Any]]:
            return c.result("_zocrates/library/find_quote", {"quote": quote})["matches"]

        # Exact, with the ligature spelled out and straight quotes around it.
        (first, *_) = find('"The first surveys showed substantial differences between protected and unprotected sites"')
        assert (first["item_key"], first["page"], first["page_label"], first["exact"]) == (REEF, 1, "127", True)
        assert first["link"] == f"zotero://open-pdf/library/items/{REEF_PDF}?page=1"
        # Reflowed: pasted from the PDF, its line breaks and a word hyphenated at a line's end.
        (second, *_) = find("Symbiont shuffling increased ther-\nmal tolerance in colonies that sur-\nvived consecutive heatwaves")
        assert (second["item_key"], second["page_label"], second["exact"]) == (REEF, "128", True)
        assert second["link"] == f"zotero://open-pdf/library/items/{REEF_PDF}?page=2"
        # Slightly misquoted: two words changed, one left out.
        (near, *_) = find("Management interventions should combine local protection with global emissions reductions to be effective")
        assert (near["item_key"], near["page_label"], near["exact"]) == (REEF, "129", False)
        assert 0.8 <= near["score"] < 1
        # No page labels in the PDF: the page number is what a reader cites.
        (hyde, *_) = find("dense retrieval outperforms lexical baselines on several benchmark collections")
        assert (hyde["item_key"], hyde["page"], hyde["page_label"]) == (HYDE, 2, "2")
        # An abstract has no page: the link selects the item.
        (abstract, *_) = find(SEAGRASS_ABSTRACT)
        assert (abstract["item_key"], abstract["page"], abstract["kind"]) == (SEAGRASS, None, "metadata")
        assert abstract["link"] == f"zotero://select/library/items/{SEAGRASS}"
        assert find("Quantum chromodynamics predicts confinement of colour charge at low energies") == []
        bad = c.call("_zocrates/library/find_quote", {"quote": "two words"})
        assert bad["error"]["code"] == -32602 and "at least 3 words" in json.dumps(bad["error"]), bad

    out = zocrates(offline_daemon, "find-quote", "Symbiont shuffling increased thermal tolerance in colonies")
    assert out.returncode == 0, out.stderr
    assert "Coral reef resilience after bleaching, p. 128 (exact)" in out.stdout
    assert f"zotero://open-pdf/library/items/{REEF_PDF}?page=2" in out.stdout
    as_json = zocrates(offline_daemon, "find-quote", "--json", "Management interventions should combine local protection with global emissions")
    assert json.loads(as_json.stdout)["matches"][0]["page_label"] == "129"
    missing = zocrates(offline_daemon, "find-quote", "Quantum chromodynamics predicts confinement of colour charge")
    assert missing.returncode == 1 and "no item of the library has this quote" in missing.stderr


def test_the_offline_answer_is_verified(offline_daemon: Any) -> None:
    with RawConn(offline_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        meta, text = ask(c, sid, "What increased thermal tolerance in coral colonies?")
        assert "# Cited Sources" in text and REEF in text
        checked = meta["citations"]
        assert checked and all(ch["verified"] is True for ch in checked), checked
        reef = next(ch for ch in checked if ch["item_key"] == REEF)
        assert any(x["status"] == "found" and x["page"] == "128" and not x["page_corrected"] for x in reef["checks"]), reef
        assert "not found in the cited source" not in text
        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        answer = [m for m in ui["messages"] if m["role"] == "assistant" and m.get("citations")]
        assert len(answer) == 1 and answer[0]["citations"] == checked


# --- every quote verified: a real model's answers -----------------------------------------------------


def test_a_models_quotes_are_flagged_or_corrected(openai_daemon: Any) -> None:
    with RawConn(openai_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]

        meta, text = ask(c, sid, "case a: what did the coral study find?")
        (a,) = meta["citations"]
        assert (a["n"], a["item_key"], a["verified"]) == (1, REEF, True)
        assert a["checks"][0]["status"] == "found" and a["checks"][0]["page"] == "128" and not a["checks"][0]["page_corrected"]
        assert "Checked against the sources" not in text

        meta, text = ask(c, sid, "case b: do reefs recover alone?")
        (b,) = meta["citations"]
        assert b["verified"] is False and b["checks"][0]["status"] == "not_found"
        assert "“coral reefs never recover from bleaching without human help”: not found in the cited source." in text

        meta, text = ask(c, sid, "case c: coral reefs and hypothetical document embeddings")
        (wrong,) = meta["citations"]
        assert wrong["item_key"] == REEF and wrong["verified"] is False
        check = wrong["checks"][0]
        assert check["status"] == "not_found" and check["found_in"]["item_key"] == HYDE and check["found_in"]["page"] == "1"
        assert "not found in the cited source; it is in “Precise zero-shot dense retrieval”, p. 1." in text

        meta, text = ask(c, sid, "case d: what must managers do?")
        (d,) = meta["citations"]
        assert d["verified"] is True  # the quote is in the paper: its page is corrected
        check = d["checks"][0]
        assert (check["status"], check["cited_page"], check["page"], check["page_corrected"]) == ("found", "127", "129", True)
        assert check["link"] == f"zotero://open-pdf/library/items/{REEF_PDF}?page=3"
        assert "on p. 129, not p. 127." in text

        meta, text = ask(c, sid, "case e: how much carbon do seagrasses store?")
        (e,) = meta["citations"]
        assert e["verified"] is True and e["partial"] == "only its abstract was available, not its full text"
        assert "Blue carbon in seagrass meadows: only its abstract was available, not its full text; the rest of it was not read." in text

        meta, text = ask(c, sid, "case f: how do marshes keep up with the sea?")
        (f,) = meta["citations"]
        assert f["verified"] is True and f["partial"] == "Zotero extracted the text of only 3 of its 442 PDF pages"
        assert "Coastal wetlands: Zotero extracted the text of only 3 of its 442 PDF pages; the rest of it was not read." in text
        meta, text = ask(c, sid, "case g: what raised thermal tolerance?")
        (g,) = meta["citations"]
        check = g["checks"][0]
        assert g["verified"] is False and (check["status"], check["page"]) == ("misquoted", "128")
        assert check["source_reads"] == "symbiont shuffling increased thermal tolerance in colonies that survived consecutive heatwaves"
        assert "not found in the cited source as quoted; p. 128 reads “symbiont shuffling increased thermal" in text
        book = c.result("_zocrates/library/item", {"itemKey": BOOK})
        assert [(a["indexed_pages"], a["total_pages"]) for a in book["attachments"]] == [(3, 442)]

        # The UI session object: each answer carries its citations' checks; the notes are in the answer.
        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        checked = [m["citations"] for m in ui["messages"] if m.get("citations")]
        assert [[x["verified"] for x in cs] for cs in checked] == [[True], [False], [False], [True], [True], [True], [False]]
        shown = "\n".join(m["text"] for m in ui["messages"])
        assert "not found in the cited source" in shown and "on p. 129, not p. 127." in shown

    # `zocrates ask --json`: the done line carries the checks.
    out = zocrates(openai_daemon, "ask", "--json", "--session", sid, "case b: again?")
    assert out.returncode == 0, out.stderr
    done = json.loads(out.stdout.strip().splitlines()[-1])
    assert done["type"] == "done" and done["citations"][0]["verified"] is False


def test_an_answer_citing_passages_by_number_alone_has_keys_and_a_bibliography(openai_daemon: Any) -> None:
    with RawConn(openai_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        meta, text = ask(c, sid, "case h: what did the coral study find?")
        assert "# Cited Sources" not in text
        (h,) = meta["citations"]
        assert (h["item_key"], h["verified"]) == (REEF, True)
        # The items the check resolved are what the answer cites: their keys, their bibliography.
        key = meta["citationKeys"][REEF]
        assert key.startswith("reyes2021"), meta
        # The answer's checked citations carry it, as stored with the session (a sidebar reloaded shows it).
        assert h["citation_key"] == key
        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        assert [x["citation_key"] for m in ui["messages"] for x in m.get("citations") or []] == [key]
        done = c.result("_zocrates/citations/export", {"sessionId": sid, "format": "bibtex"})
        assert done["sources"] == [{"item_key": REEF, "library": "user", "citation_key": key}], done
        assert f"{{{key}," in done["text"] and "Coral reef resilience after bleaching" in done["text"]
        bib = ask(c, sid, "/bib")[1]
        assert f"{{{key}," in bib, bib


@pytest.mark.parametrize("style", ["pandoc", "author-year"])
def test_quotes_cited_by_key_or_author_and_year_are_flagged_or_corrected(openai_daemon: Any, style: str) -> None:
    with RawConn(openai_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        c.result("session/set_config_option", {"sessionId": sid, "configId": "citation_style", "value": style})

        meta, text = ask(c, sid, f"{style} case a: what did the coral study find?")
        (a,) = meta["citations"]
        assert (a["n"], a["item_key"], a["verified"]) == (1, REEF, True)
        assert (a["checks"][0]["status"], a["checks"][0]["page"], a["checks"][0]["page_corrected"]) == ("found", "128", False)
        assert "Checked against the sources" not in text

        meta, text = ask(c, sid, f"{style} case b: do reefs recover alone?")
        (b,) = meta["citations"]
        assert (b["item_key"], b["verified"], b["checks"][0]["status"]) == (REEF, False, "not_found")
        said = "[@" if style == "pandoc" else "(Reyes, 2021)"
        assert "“coral reefs never recover from bleaching without human help”: not found in the cited source." in text
        assert f"- {said}" in text.split("Checked against the sources")[1], text

        meta, text = ask(c, sid, f"{style} case d: what must managers do?")
        (d,) = meta["citations"]
        check = d["checks"][0]
        assert d["verified"] is True
        assert (check["status"], check["cited_page"], check["page"], check["page_corrected"]) == ("found", "127", "129", True)
        assert check["link"] == f"zotero://open-pdf/library/items/{REEF_PDF}?page=3"
        assert "on p. 129, not p. 127." in text

        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        assert [[x["verified"] for x in m["citations"]] for m in ui["messages"] if m.get("citations")] == [[True], [False], [True]]


def test_quotes_cited_in_the_narrative_author_year_form_are_flagged_or_corrected(openai_daemon: Any) -> None:
    with RawConn(openai_daemon.socket_path) as c:
        sid = c.result("session/new", {"cwd": "/tmp"})["sessionId"]
        c.result("session/set_config_option", {"sessionId": sid, "configId": "citation_style", "value": "author-year"})

        meta, text = ask(c, sid, "narrative case a: what did the coral study find?")
        (a,) = meta["citations"]  # "The Paris Agreement (2015)", "Reyes (2019)": text, no source of the answer's
        assert (a["n"], a["item_key"], a["verified"]) == (1, REEF, True), a
        assert [(x["status"], x["page"], x["page_corrected"]) for x in a["checks"]] == [("found", "128", False)]
        assert "Checked against the sources" not in text

        meta, text = ask(c, sid, "narrative case b: do reefs recover alone?")
        (b,) = meta["citations"]
        assert (b["item_key"], b["verified"], b["checks"][0]["status"]) == (REEF, False, "not_found")
        assert ("- Reyes (2021) “coral reefs never recover from bleaching without human help”: not found in the cited source."
                in text), text

        meta, text = ask(c, sid, "narrative case d: what must managers do?")
        (d,) = meta["citations"]
        check = d["checks"][0]
        assert d["verified"] is True
        assert (check["status"], check["cited_page"], check["page"], check["page_corrected"]) == ("found", "127", "129", True)
        assert check["link"] == f"zotero://open-pdf/library/items/{REEF_PDF}?page=3"
        assert "- Reyes (2021) “Management interventions must combine" in text and "on p. 129, not p. 127." in text

        ui = c.result("_zocrates/session/get", {"sessionId": sid})
        assert [[x["verified"] for x in m["citations"]] for m in ui["messages"] if m.get("citations")] == [[True], [False], [True]]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_ask_sources_carry_verified_and_find_quote_works(short_tmp: Path, fake: FakeOpenAI, anyio_backend: str) -> None:
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    data = short_tmp / "zotero"
    library(data)
    (data / "zocrates-data").mkdir()
    (data / "zocrates-data" / "zocrates_config.json").write_text(json.dumps(openai_config(fake)))
    from daemonproc import daemon_env

    env = {**daemon_env(run), OPENAI_KEY_ENV: "sk-e2e"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "zocratesd", "mcp", "--zotero-data-dir", str(data)], env=env)
    try:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(MCP_TIMEOUT_S):
                while True:  # until the library is indexed
                    found = await session.call_tool("find_quote", {"quote": ON_128})
                    if found.structured_content and found.structured_content["matches"]:
                        break
                    await anyio.sleep(0.2)
                match = found.structured_content["matches"][0]
                assert (match["item_key"], match["page_label"], match["exact"]) == (REEF, "128", True)
                assert f"p. 128 [{REEF}] exact: zotero://open-pdf/library/items/{REEF_PDF}?page=2" in found.content[0].text
                bad = await session.call_tool("ask", {"question": "case b: do reefs recover alone?"})
                assert not bad.is_error, bad.content
                (source,) = bad.structured_content["sources"]
                assert (source["item_key"], source["cited"], source["verified"]) == (REEF, True, False)
                assert source["checks"][0]["status"] == "not_found"
                assert "not found in the cited source" in bad.structured_content["answer"]
                good = await session.call_tool("ask", {"question": "case a: what did the coral study find?"})
                (source,) = good.structured_content["sources"]
                assert source["verified"] is True and source["checks"][0]["page"] == "128"
                # (c) a real quote given to the wrong paper, cited by passage number with no list:
                # the source is the paper it cites, flagged, with the paper that has the quote.
                wrong = await session.call_tool("ask", {"question": "case c: coral reefs and hypothetical document embeddings"})
                (source,) = wrong.structured_content["sources"]
                assert (source["item_key"], source["cited"], source["verified"]) == (REEF, True, False), source
                assert source["citation_key"] and source["n"] is not None
                check = source["checks"][0]
                assert check["status"] == "not_found" and check["found_in"]["item_key"] == HYDE and check["found_in"]["page"] == "1"
                assert "it is in “Precise zero-shot dense retrieval”, p. 1." in wrong.structured_content["answer"]
                # (d) the right quote, the wrong page: corrected, still verified.
                paged = await session.call_tool("ask", {"question": "case d: what must managers do?"})
                (source,) = paged.structured_content["sources"]
                check = source["checks"][0]
                assert (source["item_key"], source["cited"], source["verified"]) == (REEF, True, True)
                assert (check["status"], check["cited_page"], check["page"], check["page_corrected"]) == ("found", "127", "129", True)
                assert check["link"] == f"zotero://open-pdf/library/items/{REEF_PDF}?page=3"
                assert "on p. 129, not p. 127." in paged.structured_content["answer"]
    finally:
        subprocess.run([sys.executable, "-m", "zocratesd", "stop", "--zotero-data-dir", str(data)], env=env, timeout=60,
                       capture_output=True, check=False)
