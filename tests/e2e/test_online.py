"""Search beyond the library through a real daemon, against stand-ins of OpenAlex, arXiv and Crossref
written from their documentation (tests/fake_scholarly.py): works merged by DOI, a work the library
holds marked as that item, a day's cache, every failure a clear line that loses the other providers'
works, no network a fast answer, `online.mode = off` nothing sent; from the socket, the CLI and the
MCP SDK client."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fake_scholarly import FakeArxiv, FakeCrossref, FakeOpenAlex, ScholarlyWork, refused_port
from rawrpc import RawConn
from test_cli import zocrates
from test_library import wait_ready
from zoterofixture import build_zotero_dir, sample_library

pytestmark = pytest.mark.e2e

VARROA = ScholarlyWork("Oxalic acid treatment of varroa mites in broodless colonies", authors=(("Ana", "Reyes"),), year=2019,
                       venue="Journal of Apicultural Research", doi="10.1080/00218839.2019.1234567",
                       abstract="Oxalic acid applied in winter reduces varroa mite loads in broodless honeybee colonies.",
                       oa_url="https://example.org/varroa.pdf")
PREPRINT = ScholarlyWork("Modelling varroa mite population growth in honeybee colonies", authors=("Li Wei",), year=2021,
                         arxiv_id="2103.01234", abstract="A model of varroa mite growth in colonies through the season.")
# The library holds this one already (KARPDPR1): found online, it is cited as the library item.
DPR = ScholarlyWork("Dense Passage Retrieval for Open-Domain Question Answering", authors=(("Vladimir", "Karpukhin"),),
                    year=2020, doi="10.18653/v1/2020.emnlp-main.550", abstract="Dense passage retrieval with varroa-free encoders.")
# Nothing in the sample library is about tardigrades: a question only online works answer.
TARDI = ScholarlyWork("Tardigrade survival of desiccation by vitrification", authors=(("Maria", "Boothby"),), year=2017,
                      venue="Molecular Cell", doi="10.1016/j.molcel.2017.02.018",
                      abstract="Tardigrades survive desiccation using intrinsically disordered proteins that vitrify.")
CORPUS = [VARROA, PREPRINT, DPR, TARDI]


@pytest.fixture
def services() -> Iterator[tuple[FakeOpenAlex, FakeArxiv, FakeCrossref]]:
    with FakeOpenAlex(CORPUS) as oa, FakeArxiv(CORPUS) as ax, FakeCrossref(CORPUS) as cr:
        yield oa, ax, cr


def online_daemon(
    daemon_factory: Any, urls: tuple[str, ...], *, where: str | None = None, model_url: str | None = None,
    research: dict[str, int] | None = None, **online: Any,
) -> Any:
    """A daemon on the sample library whose online search goes to `urls` (OpenAlex, arXiv, Crossref);
    `model_url`: an OpenAI-compatible model there (tests/fake_openai.py), else the offline answerer."""
    d = daemon_factory()
    if where is not None:  # a second daemon in the test: its own Zotero data dir
        d = daemon_factory(d.data_dir.parent / where)
    d.env.pop("ZOCRATES_ONLINE__MODE", None)  # the mode is this test's (its config file)
    build_zotero_dir(d.data_dir, *sample_library(), version=129)
    d.state_dir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"library": {"local_api": False}, "online": {
        "openalex_url": urls[0], "arxiv_url": urls[1], "crossref_url": urls[2], "mailto": "ada@example.org",
        "request_timeout_s": 3.0, "search_timeout_s": 8.0, **online}}
    if model_url is not None:
        config["model"] = {"provider": "openai", "name": "fake/model", "base_url": model_url, "api_key_env": "ZQ_KEY"}
        d.env["ZQ_KEY"] = "sk-e2e"
    if research is not None:
        config["research"] = research
    (d.state_dir / "zocrates_config.json").write_text(json.dumps(config))
    return d


def started(d: Any) -> Any:
    d.start()
    with RawConn(d.socket_path) as c:
        wait_ready(c)
    return d


def test_works_are_merged_marked_when_the_library_holds_them_and_cached(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url)))
    with RawConn(d.socket_path) as c:
        found = c.result("_zocrates/online/search", {"query": "varroa mites colonies", "limit": 5})
        by_title = {w["title"]: w for w in found["works"]}
        assert set(by_title) == {VARROA.title, PREPRINT.title}, found
        varroa = by_title[VARROA.title]
        assert varroa["providers"] == ["openalex", "crossref"] and varroa["doi"] == VARROA.doi  # once, by DOI
        assert varroa["abstract"] == VARROA.abstract  # rebuilt from OpenAlex's inverted index
        assert varroa["year"] == 2019 and varroa["authors"] == ["Ana Reyes"] and varroa["oa_url"] == VARROA.oa_url
        assert by_title[PREPRINT.title]["arxiv_id"] == "2103.01234" and found["failures"] == [] and not found["offline"]
        # What left the machine: the terms (and the polite pool's address), nothing of the library.
        sent = [r for s in services for r in s.received]
        assert {r.param("search") or r.param("query.bibliographic") or r.param("search_query") for r in sent} >= {
            "varroa mites colonies"}
        assert oa.received[0].param("mailto") == "ada@example.org"
        held = c.result("_zocrates/online/search", {"query": "dense passage retrieval", "yearFrom": 2019, "yearTo": 2021})
        dpr = next(w for w in held["works"] if w["title"] == DPR.title)
        assert dpr["in_library"] == {"library": "user", "item_key": "KARPDPR1", "link": "zotero://select/library/items/KARPDPR1"}
        assert oa.received[-1].param("filter") == "publication_year:2019-2021"
        before = sum(len(s.received) for s in services)
        again = c.result("_zocrates/online/search", {"query": "varroa mites colonies", "limit": 5})
        assert again["cached"] and again["works"] == found["works"] and sum(len(s.received) for s in services) == before
    d.stop()


def test_each_failure_is_a_line_and_the_other_providers_still_answer(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url)))
    oa.rate_limit(1, retry_after="1")  # waited once, then answered
    cr.server_error(2, 500)  # tried again once, then given up
    ax.malformed(1)
    with RawConn(d.socket_path) as c:
        found = c.result("_zocrates/online/search", {"query": "varroa mites colonies"})
        # OpenAlex (after its 429) holds both works; arXiv's broken answer and Crossref's 500s only cost their own.
        assert {w["title"] for w in found["works"]} == {VARROA.title, PREPRINT.title}, found
        assert any(f.startswith("arxiv: its answer was not understood") for f in found["failures"]), found
        assert any(f == "crossref: it answered HTTP 500" for f in found["failures"]), found
        assert len([r for r in oa.received]) == 2  # the 429, then the answer
        oa.huge(1, 10 * 1024 * 1024)
        ax.hang(1)
        t0 = time.monotonic()
        worst = c.result("_zocrates/online/search", {"query": "varroa population model"})
        assert time.monotonic() - t0 < 15  # bounded by the request timeout, not by the hanging server
        lines = " | ".join(worst["failures"])
        assert "openalex: its answer is too large" in lines and "arxiv: no answer within 3 s" in lines, worst
        assert oa.bytes_sent < 10 * 1024 * 1024  # the daemon stopped reading
    d.stop()


def test_no_network_is_a_fast_clear_line_and_off_sends_nothing(daemon_factory: Any, services: Any) -> None:
    oa, _, _ = services
    with refused_port() as a, refused_port() as b, refused_port() as cport:
        d = started(online_daemon(daemon_factory, tuple(f"http://127.0.0.1:{p}" for p in (a, b, cport))))
        with RawConn(d.socket_path) as c:
            t0 = time.monotonic()
            found = c.result("_zocrates/online/search", {"query": "varroa"})
            assert time.monotonic() - t0 < 5 and found["works"] == [] and found["offline"], found
            assert found["message"] == "offline: no provider could be reached, so nothing was found online"
        d.stop()
    off = started(online_daemon(daemon_factory, (oa.base_url, oa.base_url, oa.base_url), where="zotero-off", mode="off"))
    with RawConn(off.socket_path) as c:
        refused = c.call("_zocrates/online/search", {"query": "varroa"})
        assert refused["error"]["data"]["kind"] == "online_off" and "nothing left this machine" in refused["error"]["data"]["message"]
    assert oa.received == []
    out = zocrates(off, "online", "varroa")
    assert out.returncode == 1 and "online search is off" in out.stderr and out.stdout == ""
    off.stop()


def test_the_cli_lists_the_works_with_where_to_find_them(daemon_factory: Any, services: Any) -> None:
    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url)))
    out = zocrates(d, "online", "dense passage retrieval", "--from", "2019")
    assert out.returncode == 0, out
    assert DPR.title in out.stdout and "in your library: zotero://select/library/items/KARPDPR1" in out.stdout
    d.stop()


@pytest.mark.anyio
async def test_the_mcp_tool_returns_the_works_fenced_with_the_library_item_marked(daemon_factory: Any, services: Any) -> None:
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    oa, ax, cr = services
    d = started(online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url)))
    params = StdioServerParameters(command=sys.executable, args=["-m", "zocratesd", "mcp", "--zotero-data-dir", str(d.data_dir)],
                                   env=d.env)
    async with stdio_client(params) as (read, write_), ClientSession(read, write_) as s:
        await s.initialize()
        result = await s.call_tool("search_online", {"query": "dense passage retrieval", "limit": 3})
    assert not result.is_error, result.content
    works = result.structured_content["works"]
    assert works[0]["in_library"]["item_key"] == "KARPDPR1"
    text = result.content[0].text
    assert "in your library: zotero://select/library/items/KARPDPR1" in text and "<library-text" in text  # fenced
    d.stop()


def test_with_online_on_a_question_the_library_cannot_answer_is_answered_from_online_works(
    daemon_factory: Any, services: Any,
) -> None:
    from fake_openai import Behaviour, FakeOpenAI

    oa, ax, cr = services
    model = FakeOpenAI(behaviour=Behaviour(online_when_empty=True))
    try:
        d = online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode="on", model_url=model.base_url)
        started(d)
        with RawConn(d.socket_path) as c:
            sid = c.result("session/new", {"cwd": "/", "mcpServers": []})["sessionId"]
            c.result("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "tardigrade desiccation survival"}]})
            answer = c.result("_zocrates/session/get", {"sessionId": sid})["messages"][-1]["text"]
        # The research loop searched online for what the library left unanswered, and the model cites it.
        assert "online works" in answer.lower() and TARDI.title in answer and f"https://doi.org/{TARDI.doi}" in answer, answer
        assert "online:" in answer  # marked as an online source, not the user's library
        sent = oa.received[0].param("search")
        assert sent == "tardigrade desiccation survival"  # the question's terms, nothing else
        d.stop()
    finally:
        model.close()


@pytest.mark.parametrize(("mode", "flag", "online"), [
    ("ask", None, False), ("ask", "--online", True), ("on", "--no-online", False), ("on", None, True),
])
def test_the_turn_goes_online_only_as_the_mode_and_the_persons_choice_allow(
    daemon_factory: Any, services: Any, mode: str, flag: str | None, online: bool,
) -> None:
    from fake_openai import Behaviour, FakeOpenAI

    oa, ax, cr = services
    model = FakeOpenAI(behaviour=Behaviour(online_when_empty=True))
    try:
        d = online_daemon(daemon_factory, (oa.base_url, ax.base_url, cr.base_url), mode=mode, model_url=model.base_url)
        started(d)
        out = zocrates(d, "ask", "--new", *([flag] if flag else []), "tardigrade desiccation survival")
        assert out.returncode == 0, out
        sent = sum(len(s.received) for s in services)
        if online:
            assert TARDI.title in out.stdout and sent > 0, out
        else:
            assert sent == 0 and TARDI.title not in out.stdout, out  # nothing left the machine
        d.stop()
    finally:
        model.close()
