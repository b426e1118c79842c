"""The research loop beyond the library, on the default install (the offline answerer): what the
library leaves unanswered is searched online as online.mode and the person allow, answered from
the works' abstracts with their DOI and marked as not in the library; a work the library holds is
cited as the library's item; under `ask` the editor is asked once (kind `fetch`), the terminal asks,
a face that cannot ask stays in the library and says how to allow it; a checkpoint offers "search
online"; no network is one clear line. Against the OpenAlex, arXiv and Crossref stand-ins."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fake_scholarly import refused_port
from rawrpc import RawConn
from test_cli import zocrates
from test_online import DPR, TARDI, VARROA, online_daemon, services, started

pytestmark = pytest.mark.e2e

__all__ = ["services"]  # the stand-ins' fixture, used here by name

ONLINE_MARK = "Online, not in your library"


def prompt_answering(c: RawConn, sid: str, text: str, answer: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """session/prompt as an editor sends it; `answer(params)` gives each session/request_permission's result."""
    c.send({"jsonrpc": "2.0", "id": 900, "method": "session/prompt",
            "params": {"sessionId": sid, "prompt": [{"type": "text", "text": text}]}})
    asked = []
    while True:
        msg = c.recv()
        if msg.get("method") == "session/request_permission":
            asked.append(msg["params"])
            c.send({"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg["params"])})
        elif msg.get("method") == "session/update":
            c.notifications.append(msg)
        elif msg.get("id") == 900:
            return msg, asked


def selected(option: str) -> Any:
    return lambda params: {"outcome": {"outcome": "selected", "optionId": option}}


def last_answer(c: RawConn, sid: str) -> str:
    text: str = c.result("_zocrates/session/get", {"sessionId": sid})["messages"][-1]["text"]
    return text


def sent(services: Any) -> list[Any]:
    return [r for s in services for r in s.received]


def test_with_online_on_what_the_library_cannot_answer_is_answered_from_online_abstracts(
    daemon_factory: Any, services: Any,
) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="on"))
    out = zocrates(d, "ask", "--new", "How do tardigrades survive desiccation?")
    assert out.returncode == 0, out
    assert TARDI.title in out.stdout and f"https://doi.org/{TARDI.doi}" in out.stdout, out.stdout
    assert ONLINE_MARK in out.stdout and "searched online" in out.stdout, out.stdout
    assert "intrinsically disordered proteins" in out.stdout  # quoted from the work's abstract
    # What left the machine: the question's words, nothing of the library.
    terms = {r.param("search") or r.param("query.bibliographic") or r.param("search_query") for r in sent(services)}
    words = {w for t in terms for w in (t or "").replace("all:", "").replace(" AND ", " ").split()}
    assert words == {"tardigrades", "survive", "desiccation"}, terms  # its content words only
    d.stop()


def test_a_work_the_library_holds_is_cited_as_the_library_item_not_twice(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="on"))
    with RawConn(d.socket_path) as c:
        c.result("initialize", {"protocolVersion": 1})
        sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
        reply, asked = prompt_answering(c, sid, "Which encoders are varroa-free?", selected("once"))
        assert reply["result"]["stopReason"] == "end_turn" and asked == [], (reply, asked)
        answer = last_answer(c, sid)
    assert sent(services), "the library leaves this unanswered: it is searched online"
    # DPR is found online and held by the library (KARPDPR1): cited as the user's item, once.
    assert "zotero://select/library/items/KARPDPR1" in answer, answer
    assert f"https://doi.org/{DPR.doi}" not in answer and answer.count(DPR.title) == 1, answer
    d.stop()


@pytest.mark.parametrize("choice", ["once", "no", "always", "never"])
def test_under_ask_the_editor_is_asked_once_a_turn_and_its_answer_decides(
    daemon_factory: Any, services: Any, choice: str,
) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="ask"))
    with RawConn(d.socket_path) as c:
        c.result("initialize", {"protocolVersion": 1, "clientInfo": {"name": "zed", "version": "1"}})
        sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
        question = "How do tardigrades survive desiccation? And how is oxalic acid used against varroa mites?"
        reply, asked = prompt_answering(c, sid, question, selected(choice))
        assert reply["result"]["stopReason"] == "end_turn", reply
        assert len(asked) == 1, asked  # once a turn, however many parts go online
        call = asked[0]["toolCall"]
        assert call["kind"] == "fetch" and "tardigrades" in call["title"], call
        assert "Only these search terms leave this machine" in call["content"][0]["content"]["text"]
        assert {o["kind"] for o in asked[0]["options"]} == {"allow_once", "allow_always", "reject_once", "reject_always"}
        answer = last_answer(c, sid)
        config = json.loads((d.state_dir / "zocrates_config.json").read_text())
        if choice in ("no", "never"):
            assert sent(services) == [] and TARDI.title not in answer, answer  # nothing left the machine
            assert config["online"]["mode"] == ("off" if choice == "never" else "ask")
            assert "zocrates ask --online" not in answer  # they were asked: no advice on how to allow it
        else:
            assert TARDI.title in answer and ONLINE_MARK in answer, answer
            assert config["online"]["mode"] == ("on" if choice == "always" else "ask")
        if choice == "never":  # remembered: the next turn neither asks nor sends
            _, again = prompt_answering(c, sid, "What do tardigrade proteins do when they dry?", selected("once"))
            assert again == [] and sent(services) == []
        if choice == "always":  # remembered: the next turn goes online without asking
            before = len(sent(services))
            _, again = prompt_answering(c, sid, "What do tardigrade proteins do when they dry?", selected("no"))
            assert again == [] and len(sent(services)) > before
    d.stop()


def test_under_ask_a_face_that_cannot_ask_stays_in_the_library_and_says_how(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="ask"))
    out = zocrates(d, "ask", "--new", "How do tardigrades survive desiccation?")  # stdin is not a terminal
    assert out.returncode == 0, out
    assert sent(services) == [] and TARDI.title not in out.stdout, out
    assert "zocrates ask --online" in out.stdout and "online.mode is ask" in out.stderr, out
    out = zocrates(d, "ask", "--new", "--online", "How do tardigrades survive desiccation?")
    assert out.returncode == 0 and TARDI.title in out.stdout, out
    d.stop()


def test_a_checkpoint_offers_search_online_and_choosing_it_searches_what_is_left(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="ask", research={"initial_budget": 1})
    started(d)
    question = "What does dense passage retrieval do? How do tardigrades survive desiccation?"
    with RawConn(d.socket_path) as c:
        c.result("initialize", {"protocolVersion": 1})
        sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
        reply, asked = prompt_answering(c, sid, question, selected("search_online"))
        assert reply["result"]["stopReason"] == "end_turn", reply
        assert len(asked) == 1, asked  # the checkpoint; choosing online there is the consent for it
        assert "search_online" in [o["optionId"] for o in asked[0]["options"]]
        assert "search_online" in asked[0]["toolCall"]["rawInput"]["actions"]
        assert "search online" in asked[0]["toolCall"]["title"]
        answer = last_answer(c, sid)
    assert TARDI.title in answer and ONLINE_MARK in answer, answer
    assert "zotero://select/library/items/KARPDPR1" in answer  # the part the library answers, from the library
    d.stop()


def test_resuming_with_search_online_is_refused_when_online_search_is_off(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="off", research={"initial_budget": 1})
    started(d)
    with RawConn(d.socket_path) as c:
        c.result("initialize", {"protocolVersion": 1})
        sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
        reply, asked = prompt_answering(c, sid, "What does dense passage retrieval do? How do tardigrades survive "
                                        "desiccation?", lambda params: {"outcome": {"outcome": "cancelled"}})
        assert [o["optionId"] for o in asked[0]["options"]] == ["extend", "synthesize"]  # not offered
        hitl = reply["result"]["_meta"]["zocrates"]["pendingHitl"]
        error = c.call("_zocrates/chat/resume", {"sessionId": sid, "invocationId": hitl["invocation_id"],
                                                 "interruptId": hitl["interrupt_id"], "response": {"action": "search_online"}})
        assert error["error"]["data"]["kind"] == "online_off" and "online.mode" in error["error"]["data"]["message"], error
        assert c.result("_zocrates/session/get", {"sessionId": sid})["pending_hitl"] is not None  # nothing lost
    assert sent(services) == []
    d.stop()


def test_with_no_network_the_answer_says_so_at_once_and_answers_from_the_library(daemon_factory: Any) -> None:
    with refused_port() as a, refused_port() as b, refused_port() as r:
        urls = tuple(f"http://127.0.0.1:{p}" for p in (a, b, r))
        d = started(online_daemon(daemon_factory, urls, mode="on"))  # type: ignore[arg-type]
        t0 = time.monotonic()
        out = zocrates(d, "ask", "--new", "How do tardigrades survive desiccation?")
        took = time.monotonic() - t0
        assert out.returncode == 0, out
        assert "offline: no provider could be reached; searched your library only" in out.stdout.lower(), out.stdout
        assert took < 30, took  # generous: a refused connection is answered at once, never a long hang
        d.stop()


def test_a_question_the_library_answers_stays_in_the_library(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="on"))
    out = zocrates(d, "ask", "--new", "Do beekeepers treat varroa mites with oxalic acid?")
    assert out.returncode == 0 and "BEEKEEP1" in out.stdout, out
    assert sent(services) == [] and VARROA.title not in out.stdout  # answered by the library: nothing sent
    d.stop()


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "answer"), [("ask", "once"), ("ask", "decline"), ("on", None), ("off", None)])
async def test_an_mcp_client_gets_online_sources_as_the_mode_and_its_elicitation_allow(
    daemon_factory: Any, services: Any, mode: str, answer: str | None,
) -> None:
    import sys

    import mcp_types as types
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode=mode))
    asked: list[Any] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        if answer == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"choice": answer})

    params = StdioServerParameters(command=sys.executable, args=["-m", "zocratesd", "mcp", "--zotero-data-dir", str(d.data_dir)],
                                   env=d.env)
    async with stdio_client(params) as (read, write_), ClientSession(read, write_, elicitation_callback=on_elicit) as s:
        await s.initialize()
        result = await s.call_tool("ask", {"question": "How do tardigrades survive desiccation?"})
    assert not result.is_error, result.content
    if mode == "ask":
        assert len(asked) == 1 and "tardigrades survive desiccation" in asked[0].message, asked
        assert "Only these search terms leave this machine" in asked[0].message
    else:
        assert asked == []  # decided by the mode: nobody is asked
    text = result.content[0].text
    if mode == "off":
        assert sent(services) == [] and TARDI.title not in text, text
    elif answer in ("once", None):
        assert TARDI.title in text and f"https://doi.org/{TARDI.doi}" in text, text
        sources = result.structured_content["sources"]
        assert any(src.get("link") == f"https://doi.org/{TARDI.doi}" or TARDI.title in json.dumps(src) for src in sources), sources
    else:
        assert sent(services) == [] and TARDI.title not in text, text
        assert "online argument" in text and "online.mode = on" in text, text  # says how to allow it
    d.stop()


def test_a_model_that_goes_online_shows_the_editor_a_fetch_tool_call_with_its_works(daemon_factory: Any, services: Any) -> None:
    from fake_openai import Behaviour, FakeOpenAI

    oa, ax, cr = services
    model = FakeOpenAI(behaviour=Behaviour(online_first=True))
    try:
        d = online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="on", model_url=model.base_url)
        started(d)
        with RawConn(d.socket_path) as c:
            c.result("initialize", {"protocolVersion": 1})
            sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
            reply, asked = prompt_answering(c, sid, "tardigrade desiccation survival", selected("once"))
            assert reply["result"]["stopReason"] == "end_turn" and asked == [], reply
            updates = [n["params"]["update"] for n in c.notifications if n.get("method") == "session/update"]
        calls = [u for u in updates if u.get("sessionUpdate") == "tool_call" and u.get("title") == "search_online_literature"]
        assert len(calls) == 1 and calls[0]["kind"] == "fetch", updates
        done = [u for u in updates if u.get("sessionUpdate") == "tool_call_update" and u.get("toolCallId") == calls[0]["toolCallId"]
                and u.get("status") == "completed"]
        assert done and TARDI.title in json.dumps(done[-1].get("rawOutput")), done  # its result: the works
        d.stop()
    finally:
        model.close()


def test_a_work_found_online_is_added_to_zotero_by_its_doi(daemon_factory: Any, services: Any, zotero10: Any) -> None:
    """"Add to Zotero" for an online source: the DOI is looked up at Crossref (only the DOI leaves the
    machine), and the new item keeps its title, authors, year, venue, abstract and link; undo trashes it."""
    oa, ax, cr = services
    d = online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="ask")
    d.env["ZOCRATES_LIBRARY__LOCAL_API_URL"] = zotero10.base_url
    started(d)
    out = zocrates(d, "add", f"https://doi.org/{TARDI.doi}", "--yes")
    assert out.returncode == 0 and out.stdout.startswith("written: w-"), out
    made = [i for i in zotero10.items if i["data"].get("DOI") == TARDI.doi]
    assert len(made) == 1, zotero10.items[-1:]
    data = made[0]["data"]
    assert data["itemType"] == "journalArticle" and data["title"] == TARDI.title and data["date"] == "2017"
    assert data["abstractNote"] == TARDI.abstract and data["publicationTitle"] == "Molecular Cell"
    assert data["url"] and data["creators"] == [{"creatorType": "author", "firstName": "Maria", "lastName": "Boothby"}]
    asked = [r for r in cr.received if TARDI.doi in r.path.lower()]
    assert asked and all(not r.query or set(r.query) <= {"mailto"} for r in asked)  # the DOI, and nothing else
    # A DOI Crossref does not know, and a text that is no DOI: clear errors, nothing written.
    unknown = zocrates(d, "add", "10.9999/no.such.work", "--yes")
    assert unknown.returncode == 1 and "Crossref knows no work with the DOI 10.9999/no.such.work" in unknown.stderr, unknown
    bad = zocrates(d, "add", "not a doi", "--yes")
    assert bad.returncode == 1 and "a DOI looks like 10.1234/abc" in bad.stderr, bad
    assert len([i for i in zotero10.items if i["data"].get("itemType") == "journalArticle" and i["data"].get("DOI")
                and i["data"]["DOI"].startswith("10.9999")]) == 0
    d.stop()


def test_adding_by_doi_is_refused_when_online_search_is_off(daemon_factory: Any, services: Any, zotero10: Any) -> None:
    oa, ax, cr = services
    d = online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="off")
    d.env["ZOCRATES_LIBRARY__LOCAL_API_URL"] = zotero10.base_url
    started(d)
    out = zocrates(d, "add", TARDI.doi, "--yes")
    assert out.returncode == 1 and "online" in out.stderr and "off" in out.stderr, out
    assert cr.received == [] and not [i for i in zotero10.items if i["data"].get("DOI") == TARDI.doi]
    d.stop()


def test_cancelling_a_turn_stops_its_online_requests_in_flight(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    for s in services:
        s.hang()  # each provider takes the request and never answers
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="on",
                              request_timeout_s=60.0, search_timeout_s=120.0))
    with RawConn(d.socket_path) as c:
        c.result("initialize", {"protocolVersion": 1})
        sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
        c.send({"jsonrpc": "2.0", "id": 900, "method": "session/prompt",
                 "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "How do tardigrades survive desiccation?"}]}})
        for s in services:
            s.wait_for_hanging(1)  # the online round is in flight at every provider
        c.send({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
        while True:
            msg = c.recv()
            if msg.get("id") == 900:
                break
        assert msg["result"]["stopReason"] == "cancelled", msg
        for s in services:
            s.wait_for_finished(1)  # the daemon hung up: nothing left waiting on a provider
        assert c.result("session/list", {})["sessions"]  # the daemon goes on
    d.stop()


@pytest.mark.anyio
@pytest.mark.parametrize(("mode", "kind", "online"), [("ask", "allow_once", True), ("ask", "reject_once", False),
                                                      ("on", None, True), ("off", None, False)])
async def test_an_editor_on_the_official_acp_sdk_gets_online_sources_as_the_mode_and_its_answer_allow(
    daemon_factory: Any, services: Any, mode: str, kind: str | None, online: bool,
) -> None:
    """`zocratesd stdio` driven by the ACP Python SDK, as Zed or any ACP editor drives it: under `ask`
    the editor's permission decides, under `on` it is not asked, under `off` nothing is sent."""
    import sys

    from acp import spawn_agent_process, text_block
    from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

    class Editor:
        def __init__(self) -> None:
            self.asked: list[dict[str, Any]] = []
            self.text: list[str] = []

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            content = getattr(update, "content", None)
            if getattr(update, "session_update", None) == "agent_message_chunk" and getattr(content, "text", None):
                self.text.append(content.text)

        async def request_permission(self, options: Any, session_id: str, tool_call: Any, **kwargs: Any) -> Any:
            self.asked.append(tool_call.model_dump(by_alias=True, exclude_none=True))
            chosen = next((o.option_id for o in options if o.kind == kind), None)
            if chosen is None:
                return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
            return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen))

    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode=mode))
    editor = Editor()
    async with spawn_agent_process(editor, sys.executable, "-m", "zocratesd", "stdio", "--zotero-data-dir", str(d.data_dir),
                                   env=d.env) as (agent, _):
        await agent.initialize(protocol_version=1)
        sid = (await agent.new_session(cwd="/")).session_id
        done = await agent.prompt(session_id=sid, prompt=[text_block("How do tardigrades survive desiccation?")])
    answer = "".join(editor.text)
    assert done.stop_reason == "end_turn", done
    assert [a["kind"] for a in editor.asked] == (["fetch"] if mode == "ask" else []), editor.asked
    if online:
        assert TARDI.title in answer and f"https://doi.org/{TARDI.doi}" in answer and ONLINE_MARK in answer, answer
    else:
        assert sent(services) == [] and TARDI.title not in answer, answer
    d.stop()


def test_a_provider_failing_mid_turn_is_one_line_and_the_others_works_still_count(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    oa.server_error(times=2)  # the request and its one retry
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="on"))
    out = zocrates(d, "ask", "--new", "How do tardigrades survive desiccation?")
    assert out.returncode == 0, out
    assert "Openalex: it answered HTTP 500" in out.stdout, out.stdout
    assert "Here is what the literature found online says:" in out.stdout  # not "your library": whose words these are
    assert TARDI.title in out.stdout and f"https://doi.org/{TARDI.doi}" in out.stdout  # Crossref's record of it
    assert "Traceback" not in d.stderr_text()
    d.stop()
