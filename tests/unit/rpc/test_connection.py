"""The sans-IO connection state, driven with bytes and calls only: no streams, no tasks, no loop."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zocrates_wire import connection as connection_mod
from zocrates_wire.connection import (
    NEED_DATA,
    CancelRequested,
    Connection,
    ConnectionStateError,
    Event,
    NeedData,
    NotificationReceived,
    OversizeFrame,
    Rejected,
    RequestReceived,
    ResponseReceived,
    UnexpectedResponse,
)
from zocrates_wire.framing import encode_message


def feed(conn: Connection, *messages: dict[str, Any] | bytes) -> list[Event]:
    """Feed messages (or raw lines) in one chunk; every event that comes out."""
    conn.receive_data(b"".join(m if isinstance(m, bytes) else encode_message(m) for m in messages))
    return drain(conn)


def drain(conn: Connection) -> list[Event]:
    events: list[Event] = []
    while True:
        event = conn.next_event()
        if isinstance(event, NeedData):
            return events
        events.append(event)


def request(id: Any, method: str = "m", params: Any = None) -> dict[str, Any]:
    msg = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def answer(id: Any, result: Any = "ok") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def cancel(target: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": target}}


# --- our requests -------------------------------------------------------------------------------


def test_ids_are_minted_with_the_prefix_or_as_integers() -> None:
    daemon, client = Connection(id_prefix="z:"), Connection()
    first, second = daemon.start_request("session/request_permission", {"a": 1}), daemon.start_request("x")
    assert (first.id, second.id) == ("z:1", "z:2")
    assert first.message == {"jsonrpc": "2.0", "id": "z:1", "method": "session/request_permission", "params": {"a": 1}}
    assert second.message == {"jsonrpc": "2.0", "id": "z:2", "method": "x"}  # no params: none sent
    assert [client.start_request("m").id for _ in range(3)] == [1, 2, 3]
    assert dict(daemon.pending) == {"z:1": "session/request_permission", "z:2": "x"}


def test_an_answer_ends_its_pending_request_once() -> None:
    conn = Connection(id_prefix="z:")
    out = conn.start_request("ask")
    [event] = feed(conn, answer(out.id, {"optionId": "extend"}))
    assert isinstance(event, ResponseReceived)
    assert (event.response.id, event.response.result, event.response.error) == ("z:1", {"optionId": "extend"}, None)
    assert not conn.pending
    # A second answer for the same id is not taken for a new one.
    assert feed(conn, answer(out.id, {"optionId": "extend"})) == [UnexpectedResponse(event.response, late=False)]


def test_an_error_answer_is_delivered_as_such() -> None:
    conn = Connection()
    out = conn.start_request("m")
    err = {"code": 1001, "message": "Session busy", "data": {"kind": "session_busy"}}
    [event] = feed(conn, {"jsonrpc": "2.0", "id": out.id, "error": err})
    assert isinstance(event, ResponseReceived) and event.response.error == err


def test_answers_to_ids_we_never_used_are_unexpected_and_ids_do_not_match_across_types() -> None:
    client, daemon = Connection(), Connection(id_prefix="z:")
    client.start_request("m")  # id 1
    daemon.start_request("m")  # id "z:1"
    events = feed(client, answer("1"), answer("z:999")) + feed(daemon, answer(1), answer("1"))
    assert len(events) == 4 and all(isinstance(e, UnexpectedResponse) and not e.late for e in events)
    assert list(client.pending) == [1] and list(daemon.pending) == ["z:1"]


def test_cancelling_a_pending_request_gives_the_notice_and_its_late_answer_is_ignored() -> None:
    conn = Connection()
    out = conn.start_request("slow")
    assert conn.cancel_request(out.id) == {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}
    assert not conn.pending
    assert conn.cancel_request(out.id) is None  # nothing left to cancel
    late = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32800, "message": "Request cancelled"}}
    [event] = feed(conn, late)
    assert isinstance(event, UnexpectedResponse) and event.late
    # The next request gets its own id, and its own answer.
    nxt = conn.start_request("next")
    assert nxt.id == 2
    [event] = feed(conn, answer(1, "stale again"), answer(2, "fresh"))[1:]
    assert isinstance(event, ResponseReceived) and event.response.result == "fresh"


def test_a_request_answered_before_its_caller_gave_up_is_not_cancelled() -> None:
    conn = Connection()
    out = conn.start_request("m")
    feed(conn, answer(out.id))
    assert conn.cancel_request(out.id) is None


def test_cancelled_ids_are_remembered_up_to_a_limit() -> None:
    conn = Connection()
    ids = [conn.start_request("m").id for _ in range(connection_mod.MAX_REMEMBERED_CANCELS + 1)]
    for request_id in ids:
        conn.cancel_request(request_id)
    events = feed(conn, answer(ids[0]), answer(ids[1]))
    assert [e.late for e in events if isinstance(e, UnexpectedResponse)] == [False, True]


def test_a_request_that_was_never_sent_is_discarded_without_a_notice() -> None:
    conn = Connection()
    out = conn.start_request("too big")
    conn.discard_request(out.id)
    assert not conn.pending and conn.cancel_request(out.id) is None
    [event] = feed(conn, answer(out.id))
    assert isinstance(event, UnexpectedResponse) and not event.late


# --- the other side's requests ------------------------------------------------------------------


def test_a_request_is_admitted_and_finished_with_its_reply() -> None:
    conn = Connection()
    [event] = feed(conn, request(7, "echo", {"a": 1}))
    assert isinstance(event, RequestReceived)
    assert (event.request.id, event.request.method, event.request.params) == (7, "echo", {"a": 1})
    assert dict(conn.in_flight) == {7: "echo"}
    assert conn.finish_request(7, {"jsonrpc": "2.0", "id": 7, "result": {"a": 1}}) == {
        "jsonrpc": "2.0", "id": 7, "result": {"a": 1},
    }
    assert not conn.in_flight
    with pytest.raises(ConnectionStateError):
        conn.finish_request(7, None)  # finished already


def test_a_duplicate_id_in_flight_is_refused_with_id_null() -> None:
    conn = Connection()
    feed(conn, request(5, "slow"))
    [event] = feed(conn, request(5, "echo"))
    assert event == Rejected(
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Invalid request",
                "data": {"kind": "duplicate_id", "id": 5, "detail": "this id is already in use by a request in flight"},
            },
        }
    )
    assert dict(conn.in_flight) == {5: "slow"}  # the first one is untouched
    conn.finish_request(5, None, cancelled=True)
    [event] = feed(conn, request(5, "echo"))  # free again
    assert isinstance(event, RequestReceived)


def test_requests_beyond_the_in_flight_limit_are_overloaded() -> None:
    conn = Connection(max_in_flight=2)
    assert all(isinstance(e, RequestReceived) for e in feed(conn, request(1), request(2)))
    [event] = feed(conn, request(3))
    assert isinstance(event, Rejected)
    assert event.reply == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": 1002, "message": "Overloaded", "data": {"kind": "overloaded", "limit": 2}},
    }
    assert set(conn.in_flight) == {1, 2}
    conn.finish_request(1, None)
    assert isinstance(feed(conn, request(3))[0], RequestReceived)


def test_without_a_limit_every_request_is_admitted() -> None:
    conn = Connection()
    events = feed(conn, *(request(n) for n in range(1000)))
    assert len(events) == 1000 and all(isinstance(e, RequestReceived) for e in events)


def test_cancel_request_names_a_request_in_flight_or_nothing() -> None:
    conn = Connection(id_prefix="z:")
    conn.start_request("ours")  # "z:1" is ours, not theirs: theirs to cancel it is not
    feed(conn, request(1, "slow"), request("long", "slow"))
    assert feed(conn, cancel("long"), cancel(1)) == [CancelRequested("long"), CancelRequested(1)]
    # Unknown ids, ids of the wrong type, our own pending ids and non-ids name nothing: dropped.
    assert feed(conn, cancel("1"), cancel("z:1"), cancel("never"), cancel(True), cancel(1.0), cancel(1.5)) == []
    assert feed(conn, cancel([1]), cancel({"a": 1}), cancel(None), {"jsonrpc": "2.0", "method": "$/cancel_request"}) == []
    assert set(conn.in_flight) == {1, "long"}  # a cancel only asks; the I/O layer finishes it


def test_a_cancelled_request_is_answered_minus_32800_whatever_its_handler_returned() -> None:
    conn = Connection()
    feed(conn, request("a"), request("b"))
    cancelled = {"jsonrpc": "2.0", "id": "a", "error": {"code": -32800, "message": "Request cancelled", "data": {"kind": "cancelled"}}}
    assert conn.finish_request("a", {"jsonrpc": "2.0", "id": "a", "result": 1}, cancelled=True) == cancelled
    assert conn.finish_request("b", None)["error"]["code"] == -32800  # no reply: it never finished


def test_an_error_reply_gets_its_kind() -> None:
    conn = Connection()
    feed(conn, request(1, "missing"))
    reply = conn.finish_request(1, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "Method not found", "data": "missing"}})
    assert reply["error"]["data"] == {"kind": "method_not_found", "detail": "missing"}


def test_cancel_request_sent_as_a_request_is_just_a_request() -> None:
    conn = Connection()
    [event] = feed(conn, request(1, "$/cancel_request", {"requestId": 1}))
    assert isinstance(event, RequestReceived) and event.request.method == "$/cancel_request"


# --- frames -------------------------------------------------------------------------------------


def test_notifications_come_out_with_params_defaulting_to_an_empty_object() -> None:
    conn = Connection()
    [first, second] = feed(
        conn, {"jsonrpc": "2.0", "method": "session/update", "params": {"x": 1}}, {"jsonrpc": "2.0", "method": "n", "params": None}
    )
    assert isinstance(first, NotificationReceived) and first.notification.params == {"x": 1}
    assert isinstance(second, NotificationReceived) and (second.notification.method, second.notification.params) == ("n", {})


def test_frames_the_connection_cannot_act_on_are_rejected_with_the_frame_id_when_readable() -> None:
    conn = Connection()
    events = feed(conn, b"garbage\n", b'{"jsonrpc":"2.0","id":4,"method":"x","params":[1]}\n', b"[1,2]\n")
    assert [e.reply["id"] for e in events if isinstance(e, Rejected)] == [None, 4, None]
    assert [e.reply["error"]["code"] for e in events if isinstance(e, Rejected)] == [-32700, -32602, -32600]
    # Said nothing about: an answer with an id we could never have used, a notification with bad params.
    assert feed(conn, answer([1]), {"jsonrpc": "2.0", "method": "n", "params": [1]}) == []


def test_an_oversize_frame_is_reported_and_reading_goes_on() -> None:
    conn = Connection(max_frame_bytes=64)
    events = feed(conn, b"x" * 100 + b"\n", request(1))
    error = {"code": -32600, "message": "Invalid request", "data": {"kind": "frame_too_large", "limit": 64}}
    assert events[0] == OversizeFrame(64, {"jsonrpc": "2.0", "id": None, "error": error})
    assert isinstance(events[1], RequestReceived)
    assert conn.max_frame_bytes == 64


def test_frames_split_across_reads_and_a_last_line_without_newline() -> None:
    conn = Connection()
    data = encode_message(request(1)) + json.dumps(request(2)).encode()  # the last line has no "\n"
    for i in range(len(data)):
        conn.receive_data(data[i : i + 1])
    [first] = drain(conn)
    assert isinstance(first, RequestReceived) and first.request.id == 1
    assert conn.next_event() is NEED_DATA
    conn.receive_data(b"")  # end of input
    [last] = drain(conn)
    assert isinstance(last, RequestReceived) and last.request.id == 2


# --- the end ------------------------------------------------------------------------------------


def test_closing_the_input_fails_pending_requests_and_lets_requests_in_flight_finish() -> None:
    conn = Connection(id_prefix="z:")
    ours = [conn.start_request("a").id, conn.start_request("b").id]
    feed(conn, request(1, "slow"))
    assert not conn.input_closed
    assert conn.close_input() == ours
    assert (conn.input_closed, conn.closed) == (True, False)
    assert not conn.pending and conn.cancel_request(ours[0]) is None
    assert conn.finish_request(1, {"jsonrpc": "2.0", "id": 1, "result": "done"})["result"] == "done"
    assert conn.close_input() == []  # idempotent


def test_no_request_is_started_once_the_input_has_closed() -> None:
    """Issue 16: its answer could never arrive, so nothing may wait on it (a checkpoint asked of a
    client whose stdin had ended held the session for the whole answer timeout)."""
    conn = Connection(id_prefix="z:")
    conn.receive_data(b"")
    conn.close_input()
    with pytest.raises(ConnectionStateError, match="input-closed"):
        conn.start_request("session/request_permission", {"sessionId": "s"})
    assert not conn.pending and not conn.closed


def test_closing_fails_pending_requests_and_refuses_new_ones() -> None:
    conn = Connection()
    out = conn.start_request("a")
    cancelled = conn.start_request("b")
    conn.cancel_request(cancelled.id)
    feed(conn, request("theirs"))
    assert conn.close() == [out.id]
    assert conn.closed and conn.input_closed
    assert conn.cancel_request(out.id) is None
    with pytest.raises(ConnectionStateError):
        conn.start_request("c")
    # A request in flight still finishes (its reply goes nowhere, but the table is kept straight).
    conn.finish_request("theirs", None, cancelled=True)
    assert not conn.in_flight and conn.close() == []


def test_the_tables_are_read_only_views() -> None:
    conn = Connection()
    conn.start_request("m")
    with pytest.raises(TypeError):
        conn.pending[2] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        conn.in_flight[2] = "x"  # type: ignore[index]


def test_the_in_flight_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Connection(max_in_flight=0)


# --- both ends ----------------------------------------------------------------------------------


def test_two_connections_talk_including_a_cascading_cancel() -> None:
    """A client and a daemon wired together by the bytes each would write."""
    client, daemon = Connection(), Connection(id_prefix="z:", max_in_flight=256)

    call = client.start_request("session/prompt", {"sessionId": "s"})
    [received] = feed(daemon, call.message)
    assert isinstance(received, RequestReceived)
    # The daemon asks the client something while it works on the call.
    question = daemon.start_request("session/request_permission", {"sessionId": "s"})
    [asked] = feed(client, question.message)
    assert isinstance(asked, RequestReceived) and asked.request.id == "z:1"
    # The client's caller gives up: the daemon is told, cancels, and cancels its own question.
    notice = client.cancel_request(call.id)
    assert notice is not None
    assert feed(daemon, notice) == [CancelRequested(call.id)]
    daemon_notice = daemon.cancel_request(question.id)
    assert daemon_notice is not None
    assert feed(client, daemon_notice) == [CancelRequested("z:1")]
    # Both answer -32800; each answer arrives late and is dropped on the other side.
    late_for_daemon = client.finish_request("z:1", None, cancelled=True)
    late_for_client = daemon.finish_request(call.id, None, cancelled=True)
    [a] = feed(daemon, late_for_daemon)
    [b] = feed(client, late_for_client)
    assert isinstance(a, UnexpectedResponse) and a.late and isinstance(b, UnexpectedResponse) and b.late
    assert not (client.pending or client.in_flight or daemon.pending or daemon.in_flight)
