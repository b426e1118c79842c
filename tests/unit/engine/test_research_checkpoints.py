"""Deep-research checkpoints in the core: budgeted rounds, pause, resume, cap, and every wrong answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from zocratesd.config import ZocratesConfig
from zocratesd.core.daemon import Daemon
from zocratesd.engine.research import Research, plan_aspects
from zocratesd.engine.tools import ROUND_METADATA_KEY
from zocratesd.errors import CheckpointNotPending, InvalidInput, SessionBusy
from zocratesd.library.retrieval import Hit, InMemoryRetriever, Passage, Scope
from zocratesd.store import APP_NAME, USER_ID
from zocratesd.updates import Checkpoint, ToolProgress

pytestmark = pytest.mark.anyio

PASSAGES = [
    Passage("LEWIS202", "Retrieval-Augmented Generation", "RAG combines parametric and non-parametric memory.", ("Patrick Lewis",), 2020),
    Passage("GAOHYDE1", "HyDE", "HyDE writes a hypothetical document and embeds it to retrieve real ones.", ("Luyu Gao",), 2022),
    Passage("KARPDPR1", "Dense Passage Retrieval", "DPR encodes questions and passages with two BERT encoders.", ("V. Karpukhin",), 2020),
    Passage("COLBERT1", "ColBERT", "ColBERT scores late interactions between token embeddings.", ("O. Khattab",), 2020),
]
THREE = "What does RAG combine? How does HyDE retrieve? Which encoders does DPR use?"
FOUR = THREE + " What does ColBERT score?"


class CountingRetriever(InMemoryRetriever):
    """The in-memory BM25 retriever, counting what it is asked; `gate` can hold a search."""

    def __init__(self, passages: list[Passage]):
        super().__init__(list(passages))
        self.queries: list[str] = []
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def search(self, query: str, scope: Scope, top_k: int = 6) -> list[Hit]:
        self.queries.append(query)
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        return await super().search(query, scope, top_k)


async def make(tmp_path: Path, budget: int = 1, max_extensions: int = 2) -> tuple[Daemon, CountingRetriever]:
    retriever = CountingRetriever(PASSAGES)
    config = ZocratesConfig(research={"initial_budget": budget, "max_extensions": max_extensions})
    d = Daemon(tmp_path, config, retriever=retriever)
    await d.start()
    return d, retriever


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[tuple[Daemon, CountingRetriever]]:
    d, r = await make(tmp_path)
    yield d, r
    await d.aclose()


async def stored_rounds(d: Daemon, sid: str) -> list[dict[str, Any]]:
    session = await d.db.service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    assert session is not None
    return [e.custom_metadata[ROUND_METADATA_KEY] for e in session.events if e.custom_metadata and ROUND_METADATA_KEY in e.custom_metadata]


async def answer_of(d: Daemon, sid: str, invocation_id: str) -> str:
    messages = (await d.get_session(sid))["messages"]
    return [m["text"] for m in messages if m["invocation_id"] == invocation_id and m["role"] == "assistant" and m["text"]][-1]


def test_aspects_are_the_sentences_and_clauses() -> None:
    assert plan_aspects("What is RAG? How does HyDE work; and DPR. ") == ["What is RAG?", "How does HyDE work", "and DPR."]
    assert plan_aspects("Explain retrieval") == ["Explain retrieval"]
    assert plan_aspects("What is RAG? What is RAG?") == ["What is RAG?"]  # a repeat is one aspect
    assert plan_aspects("? ; .") == ["? ; ."]  # nothing to split on: the question as it is
    many = plan_aspects(" ".join(f"Topic{i} retrieval?" for i in range(20)))
    assert len(many) == 8 and "Topic7" in many[-1]  # the rest joins the last aspect, by its key terms


def test_a_snapshot_survives_json_and_refuses_garbage() -> None:
    r = Research.start(invocation_id="e-1", branch="search_library@c1", query=THREE, scope=Scope("papers", ("LEWIS202",)),
                       initial_budget=1, max_extensions=2)
    r.record_round(r.next_aspect() or "", [Hit(PASSAGES[0], 1.5)])
    r.raise_checkpoint()
    back = Research.from_json(r.to_json())
    assert back is not None and back.to_json() == r.to_json()
    assert back.evidence() == [PASSAGES[0]] and back.pending_interrupt == "interrupt_ext_1"
    for junk in [None, "x", {}, {"version": 1}, {**r.to_json(), "evidence": "nope"}, {**r.to_json(), "version": 99}]:
        assert Research.from_json(junk) is None


async def test_a_paused_turn_resumes_twice_without_repeating_a_round(daemon: tuple[Daemon, CountingRetriever]) -> None:
    d, retriever = daemon
    sid = (await d.create_session()).id
    watching = d.watch(sid)
    first = await d.prompt(sid, THREE)
    hitl = first.pending_hitl
    assert hitl is not None and hitl["interrupt_id"] == "interrupt_ext_1" and hitl["invocation_id"] == first.invocation_id
    assert hitl["payload"]["unaddressed_aspects"] == ["How does HyDE retrieve?", "Which encoders does DPR use?"]
    assert (await d.get_session(sid))["pending_hitl"] == hitl
    shown = [u for u in watching.take_nowait() if isinstance(u, (ToolProgress, Checkpoint))]
    assert [type(u) for u in shown] == [ToolProgress, Checkpoint] and shown[1].to_json() == hitl
    state = await d.reader.session_state(sid)
    assert state["hitl_snapshot"]["evidence"][0]["aspect"] == "What does RAG combine?"
    assert state["hitl_snapshot"]["ceilings"]["budget"] == 1

    second = await d.resume(sid, first.invocation_id, "interrupt_ext_1", {"action": "extend_budget"})
    assert second.invocation_id == first.invocation_id
    assert second.pending_hitl is not None and second.pending_hitl["interrupt_id"] == "interrupt_ext_2"
    third = await d.resume(sid, first.invocation_id, "interrupt_ext_2", {"action": "synthesize"})
    assert third.pending_hitl is None and third.stop_reason == "end_turn"

    # Each aspect was searched once, in order, across the three runs of the paused tool.
    assert retriever.queries == ["What does RAG combine?", "How does HyDE retrieve?"]
    assert [(r["n"], r["aspect"]) for r in await stored_rounds(d, sid)] == [(1, "What does RAG combine?"), (2, "How does HyDE retrieve?")]
    answer = await answer_of(d, sid, first.invocation_id)
    assert "LEWIS202" in answer and "GAOHYDE1" in answer  # evidence from before and after the pause
    state = await d.reader.session_state(sid)
    assert state["hitl_snapshot"] is None
    trail = state["retrieved_evidence"][-1]
    assert trail["invocation_id"] == first.invocation_id
    assert trail["queries"] == ["What does RAG combine?", "How does HyDE retrieve?"]
    assert {"LEWIS202", "GAOHYDE1"} <= set(trail["citations"])
    ui = await d.get_session(sid)
    assert ui["pending_hitl"] is None
    assert [m["role"] for m in ui["messages"] if m["text"]] == ["user", "assistant"]


async def test_guidance_is_searched_first_and_answers_are_validated(daemon: tuple[Daemon, CountingRetriever]) -> None:
    d, retriever = daemon
    sid = (await d.create_session()).id
    first = await d.prompt(sid, THREE)
    inv = first.invocation_id
    assert inv is not None
    for bad in [None, "extend", {"action": "more"}, {"action": "extend_budget", "guidance": 5},
                {"action": "extend_budget", "guidance": "x" * 2001}]:
        with pytest.raises(InvalidInput):
            await d.resume(sid, inv, "interrupt_ext_1", bad)
    with pytest.raises(InvalidInput):
        await d.resume(sid, inv, "", {"action": "synthesize"})
    before = len(await stored_rounds(d, sid))
    second = await d.resume(sid, inv, "interrupt_ext_1", {"action": "extend_budget", "guidance": "  ColBERT late interaction  "})
    assert retriever.queries[-1] == "ColBERT late interaction"
    assert second.pending_hitl is not None
    assert second.pending_hitl["payload"]["addressed_aspects"][-1] == "ColBERT late interaction"
    assert len(await stored_rounds(d, sid)) == before + 1


async def test_double_answers_and_wrong_ids_change_nothing(daemon: tuple[Daemon, CountingRetriever]) -> None:
    d, _ = daemon
    sid = (await d.create_session()).id
    first = await d.prompt(sid, THREE)
    inv = first.invocation_id
    assert inv is not None
    rows = await d.reader.live_session(sid)
    for wrong in [(inv, "interrupt_ext_2"), ("e-not-a-turn", "interrupt_ext_1"), (inv, "interrupt_ext_1x")]:
        with pytest.raises(CheckpointNotPending) as info:
            await d.resume(sid, *wrong, {"action": "synthesize"})
        assert info.value.data["pendingInterruptId"] == "interrupt_ext_1"
    assert len((await d.reader.live_session(sid)).live) == len(rows.live)
    await d.resume(sid, inv, "interrupt_ext_1", {"action": "synthesize"})
    done = len((await d.reader.live_session(sid)).live)
    with pytest.raises(CheckpointNotPending):
        await d.resume(sid, inv, "interrupt_ext_1", {"action": "synthesize"})  # answered already
    assert len((await d.reader.live_session(sid)).live) == done


async def test_a_rewound_checkpoint_cannot_be_answered_and_the_next_prompt_is_normal(
    daemon: tuple[Daemon, CountingRetriever]
) -> None:
    d, _ = daemon
    sid = (await d.create_session()).id
    await d.prompt(sid, "What does RAG combine?")
    paused = await d.prompt(sid, THREE)
    assert paused.invocation_id is not None and paused.pending_hitl is not None
    rewound = await d.rewind(sid, paused.invocation_id)
    assert rewound["session"]["pending_hitl"] is None
    assert (await d.reader.session_state(sid)).get("hitl_snapshot") is None
    with pytest.raises(CheckpointNotPending):
        await d.resume(sid, paused.invocation_id, "interrupt_ext_1", {"action": "extend_budget"})
    after = await d.prompt(sid, "Which encoders does DPR use?")
    assert after.pending_hitl is None and after.invocation_id != paused.invocation_id
    assert "KARPDPR1" in await answer_of(d, sid, after.invocation_id or "")


async def test_resume_while_another_turn_runs_is_busy_and_a_new_prompt_supersedes_the_checkpoint(
    daemon: tuple[Daemon, CountingRetriever]
) -> None:
    d, retriever = daemon
    sid = (await d.create_session()).id
    paused = await d.prompt(sid, THREE)
    assert paused.pending_hitl is not None and paused.invocation_id is not None
    retriever.gate, retriever.entered = asyncio.Event(), asyncio.Event()
    running = asyncio.ensure_future(d.prompt(sid, "What does ColBERT score?"))
    await asyncio.wait_for(retriever.entered.wait(), 10)
    with pytest.raises(SessionBusy):
        await d.resume(sid, paused.invocation_id, "interrupt_ext_1", {"action": "synthesize"})
    retriever.gate.set()
    newer = await asyncio.wait_for(running, 30)
    assert newer.pending_hitl is None
    assert (await d.get_session(sid))["pending_hitl"] is None  # superseded by the newer prompt
    with pytest.raises(CheckpointNotPending):
        await d.resume(sid, paused.invocation_id, "interrupt_ext_1", {"action": "synthesize"})
    assert "COLBERT1" in await answer_of(d, sid, newer.invocation_id or "")


async def test_a_client_that_always_extends_is_stopped_by_the_cap(daemon: tuple[Daemon, CountingRetriever]) -> None:
    d, retriever = daemon  # budget 1, at most 2 extensions; four aspects need three
    sid = (await d.create_session()).id
    asked: list[str] = []

    async def always_extend(checkpoint: dict[str, Any]) -> dict[str, Any]:
        asked.append(checkpoint["interrupt_id"])
        return {"action": "extend_budget"}

    result = await d.prompt(sid, FOUR, ask=always_extend)
    assert asked == ["interrupt_ext_1", "interrupt_ext_2"]
    assert result.pending_hitl is None and result.stop_reason == "end_turn"
    assert len(retriever.queries) == 3  # 1 + 1 + 1 rounds; the fourth aspect was never searched
    session = await d.db.service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    assert session is not None
    report = next(
        p.function_response.response["research"] for e in session.events for p in (e.content.parts if e.content else [])
        if p.function_response and p.function_response.name == "search_library"
    )
    assert report["capped"] is True and report["extensions"] == [1, 2]
    assert report["unaddressed_aspects"] == ["What does ColBERT score?"]


async def test_a_client_that_declines_fails_or_cancels_leaves_the_checkpoint_pending(
    daemon: tuple[Daemon, CountingRetriever]
) -> None:
    d, _ = daemon
    sid = (await d.create_session()).id

    async def decline(checkpoint: dict[str, Any]) -> None:
        return None

    async def fail(checkpoint: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionResetError("the editor went away")

    async def nonsense(checkpoint: dict[str, Any]) -> dict[str, Any]:
        return {"action": "launch"}

    for ask in (decline, fail, nonsense):
        result = await d.prompt(sid, THREE, ask=ask)
        assert result.pending_hitl is not None and result.stop_reason == "end_turn", ask
        assert (await d.get_session(sid))["pending_hitl"] == result.pending_hitl

    waiting = asyncio.Event()

    async def never(checkpoint: dict[str, Any]) -> dict[str, Any]:
        waiting.set()
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    turn = asyncio.ensure_future(d.prompt(sid, THREE, ask=never))
    await asyncio.wait_for(waiting.wait(), 10)
    assert d.cancel(sid)
    result = await asyncio.wait_for(turn, 10)
    assert result.stop_reason == "cancelled" and result.pending_hitl is not None
    # Still answerable from another client afterwards.
    done = await d.resume(sid, result.pending_hitl["invocation_id"], result.pending_hitl["interrupt_id"], {"action": "synthesize"})
    assert done.pending_hitl is None


async def test_a_checkpoint_survives_a_new_daemon_on_the_same_data(tmp_path: Path) -> None:
    d, _ = await make(tmp_path)
    sid = (await d.create_session()).id
    paused = await d.prompt(sid, THREE)
    await d.aclose()

    d2, retriever = await make(tmp_path)
    try:
        assert (await d2.get_session(sid))["pending_hitl"] == paused.pending_hitl
        assert paused.pending_hitl is not None
        result = await d2.resume(sid, paused.pending_hitl["invocation_id"], "interrupt_ext_1", {"action": "extend_budget"})
        assert retriever.queries == ["How does HyDE retrieve?"]  # round 1 is not run again
        assert result.pending_hitl is not None and result.pending_hitl["interrupt_id"] == "interrupt_ext_2"
    finally:
        await d2.aclose()


async def test_an_answer_stored_by_a_daemon_that_died_before_the_turn_went_on_can_be_given_again(
    daemon: tuple[Daemon, CountingRetriever]
) -> None:
    from google.adk.events import Event
    from google.genai import types

    d, retriever = daemon
    sid = (await d.create_session()).id
    paused = await d.prompt(sid, THREE)
    assert paused.pending_hitl is not None and paused.invocation_id is not None
    # What ADK stores first when a resume starts: the user's answer. Then the daemon dies.
    session = await d.db.service.get_session(app_name=APP_NAME, user_id=USER_ID, session_id=sid)
    assert session is not None
    await d.db.service.append_event(session, Event(
        author="user", invocation_id=paused.invocation_id,
        content=types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
            id="interrupt_ext_1", name="adk_request_input", response={"action": "extend_budget"}))]),
    ))
    assert (await d.get_session(sid))["pending_hitl"] == paused.pending_hitl  # still answerable
    again = await d.resume(sid, paused.invocation_id, "interrupt_ext_1", {"action": "extend_budget"})
    assert again.pending_hitl is not None and again.pending_hitl["interrupt_id"] == "interrupt_ext_2"
    assert retriever.queries == ["What does RAG combine?", "How does HyDE retrieve?"]
    with pytest.raises(CheckpointNotPending):  # the turn went on: the old answer cannot be given a third time
        await d.resume(sid, paused.invocation_id, "interrupt_ext_1", {"action": "extend_budget"})
    done = await d.resume(sid, paused.invocation_id, "interrupt_ext_2", {"action": "synthesize"})
    assert done.pending_hitl is None and "GAOHYDE1" in await answer_of(d, sid, paused.invocation_id)


# --- "answer now": which parts were answered, searched without an answer, or not searched yet -------

FERROPTOSIS = [
    Passage("MTORXCT1", "mTORC2 and xCT", "mTORC2 phosphorylates xCT at serine 26 and inhibits cystine uptake.", ("A. Gu",), 2017),
    Passage("GPX4FER1", "GPX4 and ferroptosis", "GPX4 reduces lipid hydroperoxides and prevents ferroptosis.", ("W. Yang",), 2014),
    Passage("ERASTIN1", "Erastin", "Erastin blocks system xc- and depletes glutathione, triggering ferroptosis.", ("S. Dixon",), 2012),
    Passage("ACSL4DOL", "ACSL4", "ACSL4 enriches membranes with polyunsaturated fatty acids and dictates ferroptosis.", ("S. Doll",), 2017),
    Passage("P53SLC71", "p53", "p53 represses SLC7A11 transcription and sensitises cells to ferroptosis.", ("L. Jiang",), 2015),
    Passage("IRONCHE1", "Iron chelation", "Iron chelators such as deferoxamine block ferroptotic cell death.", ("S. Dixon",), 2012),
    Passage("NRF2ACT1", "NRF2", "NRF2 activates antioxidant genes including SLC7A11.", ("X. Sun",), 2016),
    Passage("LIPROX01", "Liproxstatin", "Liproxstatin-1 is a radical-trapping antioxidant that halts lipid peroxidation.", ("J. Friedmann",), 2014),
]
# Eight parts; the library answers all but the fourth (nothing on TFRC1 here).
EIGHT = ("How does mTORC2 regulate xCT? What does GPX4 do? How does erastin trigger ferroptosis? "
         "What does TFRC1 import? What does ACSL4 dictate? How does p53 affect SLC7A11? "
         "Which iron chelators block cell death? What does NRF2 activate?")
EIGHT_PARTS = plan_aspects(EIGHT)


async def test_answer_now_says_which_parts_were_answered_unanswered_and_not_searched(tmp_path: Path) -> None:
    retriever = CountingRetriever(FERROPTOSIS)
    d = Daemon(tmp_path, ZocratesConfig(research={"initial_budget": 2, "max_extensions": 3}), retriever=retriever)
    await d.start()
    try:
        assert len(EIGHT_PARTS) == 8
        sid = (await d.create_session()).id
        first = await d.prompt(sid, EIGHT)
        inv = first.invocation_id
        assert first.pending_hitl is not None and inv is not None
        assert "2 of the 8 parts" in first.pending_hitl["message"]
        # Guidance naming a topic none of the parts asks about: searched first, as a part of its own, said so.
        second = await d.resume(sid, inv, "interrupt_ext_1", {"action": "extend_budget", "guidance": "liproxstatin"})
        assert retriever.queries[2] == "liproxstatin"
        assert second.pending_hitl is not None
        message = second.pending_hitl["message"]
        assert "I searched 4 of 9 parts (the 8 parts of your question and \"liproxstatin\", a new part from your guidance)" in message
        assert second.pending_hitl["payload"]["unaddressed_aspects"] == EIGHT_PARTS[3:]
        # Guidance naming an unsearched part's topic: that part, searched first, with the user's words; no new part.
        third = await d.resume(sid, inv, "interrupt_ext_2", {"action": "extend_budget", "guidance": "NRF2 activate antioxidants"})
        assert retriever.queries[4] == "What does NRF2 activate? NRF2 activate antioxidants"
        assert retriever.queries[5] == "What does TFRC1 import?"
        assert third.pending_hitl is not None
        assert "I searched 6 of 9 parts (the 8 parts" in third.pending_hitl["message"]
        assert third.pending_hitl["payload"]["unaddressed_aspects"] == EIGHT_PARTS[4:7]
        done = await d.resume(sid, inv, "interrupt_ext_3", {"action": "synthesize"})
        assert done.pending_hitl is None
        answer = await answer_of(d, sid, inv)
        head = answer.split("## ", 1)[0]
        assert head.startswith("Your question has 8 parts, and your guidance added “liproxstatin” as a new part. "
                               "I had searched 6 of 9 when you asked for the answer.")
        assert "- Answered: “How does mTORC2 regulate xCT?”; “What does GPX4 do?”; “How does erastin trigger ferroptosis?”; " \
               "“What does NRF2 activate?”; “liproxstatin”." in head
        assert "- Searched, but nothing in your library answers: “What does TFRC1 import?”." in head
        assert ("- Not searched yet: “What does ACSL4 dictate?”; “How does p53 affect SLC7A11?”; "
                "“Which iron chelators block cell death?”. Say “search the rest”") in head
        assert "Not answered" not in answer and "ACSL4 dictate" not in answer.split("## ", 1)[1]
        assert "## liproxstatin" in answer and "LIPROX01" in answer and "NRF2ACT1" in answer
    finally:
        await d.aclose()


def test_guidance_refines_the_part_it_names_and_keeps_the_part_count() -> None:
    r = Research.start(invocation_id="e-1", branch=None, query=EIGHT, scope=Scope(), initial_budget=2, max_extensions=3)
    assert r.next_query() == (EIGHT_PARTS[0], EIGHT_PARTS[0], False)
    r.record_round(EIGHT_PARTS[0], [], EIGHT_PARTS[0])
    r.record_round(EIGHT_PARTS[1], [], EIGHT_PARTS[1])
    r.extend("mTORC2 phosphorylation of xCT")  # the part searched already: searched again for it, no new part
    r.extend("iron chelators")  # an unsearched part
    assert len(r.aspects) == 8 and r.added_parts == []
    assert r.next_query() == ("mTORC2 phosphorylation of xCT", EIGHT_PARTS[0], True)
    r.record_round("mTORC2 phosphorylation of xCT", [], EIGHT_PARTS[0], guided=True)
    assert r.next_query() == (f"{EIGHT_PARTS[6]} iron chelators", EIGHT_PARTS[6], True)
    r.record_round(f"{EIGHT_PARTS[6]} iron chelators", [], EIGHT_PARTS[6], guided=True)
    assert r.unaddressed == EIGHT_PARTS[2:6] + EIGHT_PARTS[7:] and r.next_query() is None  # the budget is spent
    assert "searched 3 of the 8 parts of your question" in r.checkpoint_message()
    back = Research.from_json(r.to_json())
    assert back is not None and back.to_json() == r.to_json()


def test_an_enumeration_joined_by_and_splits_into_clean_parts() -> None:
    assert plan_aspects("1) what is xCT 2) how does mTORC2 regulate xCT, and 3) what does GPX4 do?") == [
        "what is xCT", "how does mTORC2 regulate xCT", "what does GPX4 do?"]
    assert plan_aspects("(a) What is xCT? (b) How does mTORC2 regulate xCT, and (c) what does GPX4 do?")[1] == \
        "How does mTORC2 regulate xCT"
