"""Citation keys, citation styles and bibliographies from outside: a real daemon on a library written
as Zotero writes it, with a Better BibTeX database and an installed CSL style; ACP over the socket
(the `citation_style` setting, `/bib`, `/cite`, `_zocrates/citations/export`), `zocrates cite` as a
subprocess, and the official MCP SDK client (`ask`'s sources, `export_citations`)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import bibtexparser
import citeproc
import pytest
from daemonproc import DaemonProc, daemon_env
from fake_openai import FakeOpenAI
from fences import fenced_body
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from rawrpc import RawConn
from test_cli import zocrates_command
from test_library import ask, indexed_daemon, wait_ready
from zoterofixture import Creator, Item, Library

from zocratesd.demo.zotero_dir import write
from zocratesd.library.bbt import BBT_DB

pytestmark = pytest.mark.e2e

CLI_TIMEOUT_S = 60.0
QUESTION = "What does retrieval-augmented generation combine?"
STYLE = "harvard-cite-them-right"


def library() -> Library:
    return Library(items=[
        Item("LEWIS202", "Retrieval-augmented generation for knowledge-intensive NLP tasks", item_type="conferencePaper",
             creators=[("Patrick", "Lewis"), ("Ethan", "Perez")], date="2020", fields={
                 "citationKey": "lewis2020rag", "proceedingsTitle": "Advances in Neural Information Processing Systems",
                 "pages": "9459-9474",
                 "abstractNote": "Retrieval-augmented generation combines a parametric memory, a sequence-to-sequence model, "
                                 "with a non-parametric memory, a dense vector index of Wikipedia passages."}),
        Item("DPRPAPER", "Dense passage retrieval for open-domain question answering",
             creators=[("Vladimir", "Karpukhin")], date="2020",
             fields={"abstractNote": "Dense passage retrieval encodes questions and passages with two encoders; "
                                     "retrieval-augmented generation builds on its retriever."}),
        Item("STROHLE1", "Retrieval & generation: 100% {open} questions", creators=[Creator("Ströhle", "Jörg")], date="2021",
             fields={"abstractNote": "Retrieval-augmented generation combines retrieval with generation for open questions."}),
    ])


@pytest.fixture(scope="module")
def served() -> Iterator[DaemonProc]:
    root = Path(tempfile.mkdtemp(prefix="zc", dir="/tmp"))  # short: socket paths are capped
    data = root / "zotero"
    write(data, library())
    # Better BibTeX's database, as Better BibTeX 7 creates it, with its key for the DPR paper.
    zot = sqlite3.connect(f"file:{data / 'zotero.sqlite'}?mode=ro", uri=True)
    (dpr_id,) = zot.execute("SELECT itemID FROM items WHERE key = 'DPRPAPER'").fetchone()
    zot.close()
    bbt = sqlite3.connect(data / BBT_DB)
    bbt.executescript("CREATE TABLE citationkey (itemID NOT NULL PRIMARY KEY, itemKey NOT NULL, libraryID NOT NULL, "
                      "citationKey NOT NULL CHECK (citationKey <> ''), pinned CHECK (pinned in (0, 1)), "
                      "UNIQUE (libraryID, itemKey))")
    bbt.execute("INSERT INTO citationkey VALUES (?, 'DPRPAPER', 1, 'karpukhin2020dense', 0)", (dpr_id,))
    bbt.commit()
    bbt.close()
    (data / "styles").mkdir()
    shutil.copy(Path(citeproc.__file__).parent / "data" / "styles" / f"{STYLE}.csl", data / "styles")
    with indexed_daemon(root, data) as d:
        yield d


def new_session(c: RawConn) -> str:
    return str(c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"])


def zocrates(d: DaemonProc, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*zocrates_command(), "--zotero-data-dir", str(d.data_dir), *args], env=d.env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def test_answers_cite_in_the_session_style_and_bib_exports_what_they_cite(served: DaemonProc) -> None:
    with RawConn(served.socket_path) as c:
        sid = new_session(c)
        numbered = ask(c, sid, QUESTION)
        assert "[1]" in numbered and "[@" not in numbered

        options = c.result("session/set_config_option", {"sessionId": sid, "configId": "citation_style", "value": "pandoc"})
        assert {o["id"]: o["currentValue"] for o in options["configOptions"]}["citation_style"] == "pandoc"
        pandoc = ask(c, sid, QUESTION)
        assert "[@lewis2020rag]" in pandoc, pandoc  # the item's own citationKey
        body, _, listed = pandoc.partition("# Cited Sources")
        assert not re.search(r"\[\d", body), pandoc  # no number in the text
        assert re.search(r"^\[\d\] \[@lewis2020rag\] Patrick Lewis & Ethan Perez \(2020\)\. ", listed, re.M), pandoc

        # The prompt's answer names the cited items' keys for an editor to insert.
        reply = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": QUESTION}]})
        c.notifications.clear()
        keys = reply["result"]["_meta"]["zocrates"]["citationKeys"]
        assert keys["LEWIS202"] == "lewis2020rag" and keys.get("DPRPAPER", "karpukhin2020dense") == "karpukhin2020dense", keys
        # Its "[@key]" citations are checked against their sources, as numbered ones are.
        checked = reply["result"]["_meta"]["zocrates"]["citations"]
        assert checked and all(x["verified"] is True for x in checked), checked
        assert "LEWIS202" in {x["item_key"] for x in checked}, checked

        assert "Citation style: author-year." in ask(c, sid, "/cite author-year")
        reply = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": QUESTION}]})
        author_year = "".join(n["params"]["update"]["content"]["text"] for n in c.notifications
                              if n["method"] == "session/update" and n["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        c.notifications.clear()
        assert "(Lewis & Perez, 2020)" in author_year, author_year
        checked = reply["result"]["_meta"]["zocrates"]["citations"]
        assert checked and all(x["verified"] is True for x in checked), checked
        assert "LEWIS202" in {x["item_key"] for x in checked}, checked

        bib = ask(c, sid, "/bib")
        entries = {e.key: e for e in bibtexparser.parse_string(bib).entries}
        assert "lewis2020rag" in entries, bib
        lewis = entries["lewis2020rag"]
        assert lewis.entry_type == "inproceedings" and lewis.fields_dict["pages"].value == "9459--9474"
        assert lewis.fields_dict["booktitle"].value == "Advances in Neural Information Processing Systems"
        cited = set(entries)
        # Every key is one of the three the library gives: its field's, Better BibTeX's, a generated one.
        assert cited <= {"lewis2020rag", "karpukhin2020dense", "strohle2021retrieval"}, cited

        text = c.result("_zocrates/citations/export", {"sessionId": sid, "format": "text", "style": STYLE})
        assert text["style"] == STYLE and "Lewis, P. and Perez, E. (2020)" in text["text"], text
        assert {"item_key": "LEWIS202", "library": "user", "citation_key": "lewis2020rag"} in text["sources"]
        bad = c.call("session/set_config_option", {"sessionId": sid, "configId": "citation_style", "value": "mla"})
        assert bad["error"]["code"] == -32602 and "numbered, author-year, pandoc" in bad["error"]["data"]["message"]
        nothing = c.call("_zocrates/citations/export", {"sessionId": new_session(c)})
        assert nothing["error"]["code"] == -32602 and "nothing cited" in nothing["error"]["data"]["message"]


def test_an_editor_that_asks_for_pandoc_citations_gets_them_in_its_new_sessions(served: DaemonProc) -> None:
    pandoc = {"_meta": {"zocrates": {"citationStyle": "pandoc"}}}
    with RawConn(served.socket_path) as editor, RawConn(served.socket_path) as other:
        editor.result("initialize", {"protocolVersion": 1, "clientCapabilities": pandoc})
        other.result("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        created = editor.result("session/new", {"cwd": "/", "mcpServers": []})
        assert {o["id"]: o["currentValue"] for o in created["configOptions"]}["citation_style"] == "pandoc"
        sid = created["sessionId"]
        answer = ask(editor, sid, QUESTION)
        assert "[@lewis2020rag]" in answer and not re.search(r"\[\d", answer.partition("# Cited Sources")[0]), answer
        # A setting of the session, as if the editor had set it: every face sees it, and it can change.
        assert other.result("_zocrates/session/get", {"sessionId": sid})["settings"]["citation_style"] == "pandoc"
        other.result("session/set_config_option", {"sessionId": sid, "configId": "citation_style", "value": "numbered"})
        assert "[1]" in ask(editor, sid, QUESTION)
        # A client that does not ask keeps the default.
        plain = other.result("session/new", {"cwd": "/", "mcpServers": []})
        assert {o["id"]: o["currentValue"] for o in plain["configOptions"]}["citation_style"] == "numbered"
    with RawConn(served.socket_path) as wrong:
        bad = wrong.call("initialize", {"protocolVersion": 1, "clientCapabilities": {"_meta": {"zocrates": {"citationStyle": "mla"}}}})
        assert bad["error"]["code"] == -32602 and "numbered, author-year, pandoc" in json.dumps(bad["error"]), bad


def test_zocrates_cite_prints_a_bibliography_a_tool_reads(served: DaemonProc) -> None:
    asked = zocrates(served, "ask", "--new", "--citation-style", "pandoc", "What is dense passage retrieval?")
    assert asked.returncode == 0 and "[@karpukhin2020dense]" in asked.stdout, asked
    sid = re.search(r"session (session-\S+)", asked.stderr).group(1)  # type: ignore[union-attr]
    # `--json`: the done line names each cited item's key.
    as_json = zocrates(served, "ask", "--json", "--session", sid, "What is dense passage retrieval?")
    assert as_json.returncode == 0, as_json.stderr
    done = json.loads(as_json.stdout.strip().splitlines()[-1])
    assert done["type"] == "done" and done["citation_keys"]["DPRPAPER"] == "karpukhin2020dense", done
    with RawConn(served.socket_path) as c:
        ask(c, sid, "What do open questions with retrieval and generation need?")
    out = zocrates(served, "cite", sid, "--format", "biblatex")
    assert out.returncode == 0, out.stderr
    entries = {e.key: e for e in bibtexparser.parse_string(out.stdout).entries}
    assert entries["karpukhin2020dense"].fields_dict["date"].value == "2020"  # Better BibTeX's key
    title = entries["strohle2021retrieval"].fields_dict["title"].value  # generated: ASCII-folded family name
    assert title == "Retrieval \\& generation: 100\\% \\{open\\} questions"
    assert entries["strohle2021retrieval"].fields_dict["author"].value == "Ströhle, Jörg"

    csl = zocrates(served, "cite", sid, "--format", "csl-json")
    assert csl.returncode == 0, csl.stderr
    items = json.loads(csl.stdout)
    assert {i["id"] for i in items} == set(entries) and all(i["citation-key"] == i["id"] for i in items)

    apa = zocrates(served, "cite", sid, "--format", "text")
    assert apa.returncode == 0 and "Karpukhin, V. (2020). Dense passage retrieval" in apa.stdout, apa
    unknown = zocrates(served, "cite", sid, "--format", "text", "--style", "chicago")
    assert unknown.returncode == 1 and f"installed: {STYLE}, apa" in unknown.stderr, unknown


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_sources_carry_keys_and_export_citations_gives_the_bibliography(served: DaemonProc) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "zocratesd", "mcp", "--zotero-data-dir",
                                                                 str(served.data_dir)], env=served.env)
    async with stdio_client(params) as (read, write_), ClientSession(read, write_) as s:
        await s.initialize()
        with anyio.fail_after(120):
            asked = await s.call_tool("ask", {"question": QUESTION, "citation_style": "pandoc"})
        assert not asked.is_error and isinstance(asked.structured_content, dict), asked.content
        assert "[@lewis2020rag]" in asked.structured_content["answer"]
        sources = asked.structured_content["sources"]
        assert {"LEWIS202": "lewis2020rag"}.items() <= {x["item_key"]: x["citation_key"] for x in sources}.items(), sources
        sid = asked.structured_content["session_id"]
        with anyio.fail_after(60):
            done = await s.call_tool("export_citations", {"session_id": sid, "format": "bibtex"})
            extra = await s.call_tool("export_citations", {"item_keys": ["DPRPAPER"], "format": "csl-json"})
            refused = await s.call_tool("export_citations", {"format": "bibtex"})
        assert not done.is_error and isinstance(done.structured_content, dict)
        got: dict[str, Any] = done.structured_content
        assert "lewis2020rag" in got["keys"] and "@inproceedings{lewis2020rag," in got["text"]
        assert json.loads(extra.structured_content["text"])[0]["id"] == "karpukhin2020dense"  # type: ignore[index]
        assert refused.is_error and "needs a session_id" in refused.content[0].text  # type: ignore[union-attr]


def test_a_real_model_is_asked_for_the_session_style_and_sees_each_passage_key(daemon_factory: Any) -> None:
    fake = FakeOpenAI()
    try:
        d = daemon_factory()
        write(d.data_dir, library())
        d.env["ZQ_KEY"] = "sk-e2e"
        d.state_dir.mkdir(parents=True, exist_ok=True)
        (d.state_dir / "zocrates_config.json").write_text(json.dumps(
            {"model": {"provider": "openai", "name": "fake/model", "base_url": fake.base_url, "api_key_env": "ZQ_KEY"}}))
        d.start()
        with RawConn(d.socket_path) as c:
            wait_ready(c)
            sid = new_session(c)
            c.result("session/set_config_option", {"sessionId": sid, "configId": "citation_style", "value": "pandoc"})
            ask(c, sid, QUESTION)
        # The model's second call of the turn: the search's result in, the answer out.
        body = next(r["body"] for r in reversed(fake.requests)
                    if any(m.get("role") == "tool" for m in r["body"].get("messages") or []))
        system = [m["content"] for m in body["messages"] if m["role"] == "system"]
        assert any("Pandoc citations" in s and "[@KEY, p. 4]" in s for s in system), system
        tool = json.loads(fenced_body(next(m["content"] for m in body["messages"] if m["role"] == "tool")))
        assert {p["item_key"]: p["citation_key"] for p in tool["passages"]}["LEWIS202"] == "lewis2020rag"
        assert tool["citation_style"] == "pandoc"
    finally:
        fake.close()


def test_without_a_style_named_text_comes_in_zoteros_quick_copy_style() -> None:
    """The sidebar's Copy bibliography names no style: the daemon uses the one the user's Zotero
    copies with (Settings → Export → Item Format, in the profile's prefs.js), when it is installed
    in the data dir's styles; else APA."""
    root = Path(tempfile.mkdtemp(prefix="zc", dir="/tmp"))
    data = root / "zotero"
    write(data, library())
    (data / "styles").mkdir()
    shutil.copy(Path(citeproc.__file__).parent / "data" / "styles" / f"{STYLE}.csl", data / "styles")
    home = root / "home"
    profile = home / ".zotero" / "zotero" / "k3j2h1g0.default"
    profile.mkdir(parents=True)
    (profile.parent / "profiles.ini").write_text("[Profile0]\nName=default\nIsRelative=1\nPath=k3j2h1g0.default\nDefault=1\n")

    def quick_copy(setting: str) -> None:
        (profile / "prefs.js").write_text(f'user_pref("extensions.zotero.export.quickCopy.setting", {json.dumps(setting)});\n')

    quick_copy(f"bibliography=http://www.zotero.org/styles/{STYLE}")
    run = root / "run"
    run.mkdir(mode=0o700)
    d = DaemonProc(data_dir=data, runtime_dir=run, env={**daemon_env(run), "HOME": str(home)})
    d.start()
    try:
        with RawConn(d.socket_path) as c:
            assert wait_ready(c)["state"] == "ready"
            lewis = {"format": "text", "items": [{"itemKey": "LEWIS202"}]}
            text = c.result("_zocrates/citations/export", lewis)
            assert text["style"] == STYLE and text["text"].startswith("Lewis, P. and Perez, E. (2020)"), text
            # A style named wins; Zotero's newer JSON form of the setting is read too.
            assert c.result("_zocrates/citations/export", {**lewis, "style": "apa"})["style"] == "apa"
            quick_copy(json.dumps({"mode": "bibliography", "contentType": "html", "id": f"http://www.zotero.org/styles/{STYLE}"}))
            assert c.result("_zocrates/citations/export", lewis)["style"] == STYLE
            # A Quick Copy style not installed here, or an export format instead of a style: APA.
            quick_copy("bibliography=http://www.zotero.org/styles/nature")
            assert c.result("_zocrates/citations/export", lewis)["style"] == "apa"
            quick_copy("export=9cb70025-a888-4a29-a210-93ec52da40d4")
            assert c.result("_zocrates/citations/export", lewis)["style"] == "apa"
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)
