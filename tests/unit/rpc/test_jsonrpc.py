from __future__ import annotations

import pytest

from zocrates_wire import jsonrpc
from zocrates_wire.jsonrpc import Invalid, Notification, Request, Response, parse_frame


def err(msg: object) -> tuple[int, object, str]:
    assert isinstance(msg, Invalid) and msg.reply is not None
    e = msg.reply["error"]
    return e["code"], msg.reply["id"], e["data"]["kind"]


def test_request_notification_response() -> None:
    assert parse_frame(b'{"jsonrpc":"2.0","id":7,"method":"m","params":{"a":1}}') == Request(7, "m", {"a": 1})
    assert parse_frame(b'{"jsonrpc":"2.0","id":"s","method":"m"}') == Request("s", "m", {})
    assert parse_frame(b'{"jsonrpc":"2.0","method":"n","params":null}') == Notification("n", {})
    assert parse_frame(b'{"jsonrpc":"2.0","id":"z:1","result":{"x":1}}') == Response("z:1", {"x": 1}, None)
    r = parse_frame(b'{"jsonrpc":"2.0","id":"z:2","error":{"code":-1,"message":"no"}}')
    assert isinstance(r, Response) and r.error == {"code": -1, "message": "no"}


@pytest.mark.parametrize(
    "frame, code, id_, kind",
    [
        (b"{not json", -32700, None, "parse_error"),
        (b"\xff\xfe{}", -32700, None, "parse_error"),
        (b"[" * 100_000, -32700, None, "parse_error"),
        (b'{"n":' + b"9" * 5000 + b"}", -32700, None, "parse_error"),
        (b"[]", -32600, None, "invalid_request"),
        (b'[{"jsonrpc":"2.0","id":1,"method":"m"}]', -32600, None, "invalid_request"),
        (b'"just a string"', -32600, None, "invalid_request"),
        (b'{"jsonrpc":"1.0","id":3,"method":"m"}', -32600, 3, "invalid_request"),
        (b'{"id":4,"method":"m"}', -32600, 4, "invalid_request"),
        (b'{"jsonrpc":"2.0","id":5,"method":42}', -32600, 5, "invalid_request"),
        (b'{"jsonrpc":"2.0","id":6,"method":""}', -32600, 6, "invalid_request"),
        (b'{"jsonrpc":"2.0","id":true,"method":"m"}', -32600, None, "invalid_request"),
        (b'{"jsonrpc":"2.0","id":1.5,"method":"m"}', -32600, None, "invalid_request"),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"m"}', -32600, None, "invalid_request"),
        (b'{"jsonrpc":"2.0","id":8}', -32600, 8, "invalid_request"),
        (b'{"jsonrpc":"2.0","id":9,"method":"m","params":[1,2]}', -32602, 9, "invalid_params"),
        (b'{"jsonrpc":"2.0","id":10,"method":"m","params":"x"}', -32602, 10, "invalid_params"),
    ],
)
def test_invalid_frames_get_the_right_error_with_the_id_when_readable(
    frame: bytes, code: int, id_: object, kind: str
) -> None:
    assert err(parse_frame(frame)) == (code, id_, kind)


def test_silently_ignored() -> None:
    # A notification with bad params cannot be answered; a response with an unusable id was never ours.
    assert parse_frame(b'{"jsonrpc":"2.0","method":"n","params":[1]}') == Invalid(None)
    assert parse_frame(b'{"jsonrpc":"2.0","id":true,"result":1}') == Invalid(None)


def test_error_data_always_has_a_kind() -> None:
    assert jsonrpc.error(-32601, 1, data="nope")["error"]["data"] == {"kind": "method_not_found", "detail": "nope"}
    assert jsonrpc.error(-32002, 1, data={"sessionId": "s"})["error"]["data"] == {"kind": "not_found", "sessionId": "s"}
    assert jsonrpc.error(1001, 1, data={"kind": "session_busy"})["error"]["data"] == {"kind": "session_busy"}
    reply = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "Internal error", "data": "boom"}}
    assert jsonrpc.normalise_error(reply)["error"]["data"] == {"kind": "internal", "detail": "boom"}
