"""JSON-RPC 2.0 messages, sans-IO: parse and classify one frame, build responses and errors.

`parse_frame(frame)` returns a `Request`, `Notification`, `Response` or `Invalid`. `Invalid`
carries the error response to send: its id is the frame's id whenever that id is readable, so a
client's pending request never hangs on an `id: null` error. A handler answers with an error by
raising `errors.RpcError`.

The messages we build are TypedDicts (`RequestMessage`, `NotificationMessage`, `Reply`): plain
dicts, because they go straight to the encoder, with their members declared. `params` and
`result` are the methods' own shapes, typed by the faces that know them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, NotRequired, TypedDict, TypeGuard, cast

import msgspec

# Error codes. JSON-RPC reserves -32768..-32000; ACP adds -32002 and -32800 there. Zocrates' own
# codes are 1000-1999, outside that range (protocol/README.md, "Errors", which lists every one).
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
RESOURCE_NOT_FOUND: Final = -32002
REQUEST_CANCELLED: Final = -32800
SESSION_BUSY: Final = 1001
OVERLOADED: Final = 1002
MODEL_ERROR: Final = 1003
CHECKPOINT_NOT_PENDING: Final = 1004
WRITE_REFUSED: Final = 1005
ONLINE_OFF: Final = 1006
ONLINE_FAILED: Final = 1007


class ErrorCode(msgspec.Struct, frozen=True):
    """One error code: its number, its standard `message`, and the `data.kind` it gets when the
    sender names none (a core error names its own: InvalidInput is -32602 with `invalid_input`)."""

    code: int
    message: str
    kind: str


ERROR_CODES: Final[dict[int, ErrorCode]] = {
    e.code: e
    for e in (
        ErrorCode(PARSE_ERROR, "Parse error", "parse_error"),
        ErrorCode(INVALID_REQUEST, "Invalid request", "invalid_request"),
        ErrorCode(METHOD_NOT_FOUND, "Method not found", "method_not_found"),
        ErrorCode(INVALID_PARAMS, "Invalid params", "invalid_params"),
        ErrorCode(INTERNAL_ERROR, "Internal error", "internal"),
        ErrorCode(RESOURCE_NOT_FOUND, "Resource not found", "not_found"),
        ErrorCode(REQUEST_CANCELLED, "Request cancelled", "cancelled"),
        ErrorCode(SESSION_BUSY, "Session busy", "session_busy"),
        ErrorCode(OVERLOADED, "Overloaded", "overloaded"),
        ErrorCode(MODEL_ERROR, "Model error", "model_error"),
        ErrorCode(CHECKPOINT_NOT_PENDING, "Checkpoint not pending", "checkpoint_not_pending"),
        ErrorCode(WRITE_REFUSED, "Write refused", "write_refused"),
        ErrorCode(ONLINE_OFF, "Online search off", "online_off"),
        ErrorCode(ONLINE_FAILED, "Online look-up failed", "online_failed"),
    )
}
# A code not in the table (one a peer sent us, or a newer daemon's) still gets a message and a kind.
UNKNOWN_CODE = ErrorCode(0, "Error", "error")

Id = int | str | None
RequestId = int | str
#: The params we send: an object whose members the method defines. What comes in is the parsed
#: JSON object itself (`Request.params`), validated where it is handled.
Params = Mapping[str, Any]


class ErrorObject(TypedDict, total=False):
    """A reply's `error` member. What a peer sends may lack any member or hold the wrong type, so
    readers check each (errors.RpcError.from_wire); what we send has all three."""

    code: int
    message: str
    data: Any


class RequestMessage(TypedDict):
    jsonrpc: str
    id: RequestId
    method: str
    params: NotRequired[Params]


class NotificationMessage(TypedDict):
    jsonrpc: str
    method: str
    params: NotRequired[Params]


class Reply(TypedDict, total=False):
    """A response: `result` or `error`; `id` null when the request's id could not be read."""

    jsonrpc: str
    result: Any
    error: ErrorObject
    id: Id


#: Any message we send.
Outgoing = RequestMessage | NotificationMessage | Reply


class Request(msgspec.Struct, frozen=True):
    id: RequestId
    method: str
    params: dict[str, Any]


class Notification(msgspec.Struct, frozen=True):
    method: str
    params: dict[str, Any]


class Response(msgspec.Struct, frozen=True):
    """An answer from the other side to one of our own requests."""

    id: RequestId
    result: Any = None
    error: ErrorObject | None = None


class Invalid(msgspec.Struct, frozen=True):
    """A frame we cannot act on; `reply` is the error to send (None: say nothing)."""

    reply: Reply | None


Message = Request | Notification | Response | Invalid


def error_data(code: int, data: Any) -> dict[str, Any]:
    """`data` as an object that always has `kind`; a bare value becomes its `detail`."""
    kind = ERROR_CODES.get(code, UNKNOWN_CODE).kind
    if isinstance(data, dict):
        return data if "kind" in data else {"kind": kind, **data}
    out: dict[str, Any] = {"kind": kind}
    if data is not None:
        out["detail"] = data
    return out


def error_object(code: int, message: str | None = None, data: Any = None) -> ErrorObject:
    """An error response's `error` member: the code's standard message unless given, `data` with its `kind`."""
    return {
        "code": code,
        "message": message or ERROR_CODES.get(code, UNKNOWN_CODE).message,
        "data": error_data(code, data),
    }


def error(code: int, id: Id, message: str | None = None, data: Any = None) -> Reply:
    return {"jsonrpc": "2.0", "id": id, "error": error_object(code, message, data)}


def normalise_error(reply: Reply) -> Reply:
    """Give an error reply built elsewhere (a handler's, a client's) the same `data.kind` shape."""
    err = reply.get("error")
    if isinstance(err, dict):
        err["data"] = error_data(err.get("code", INTERNAL_ERROR), err.get("data"))
    return reply


def success(id: RequestId, result: Any) -> Reply:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def request(id: RequestId, method: str, params: Params | None) -> RequestMessage:
    msg: RequestMessage = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: Params | None) -> NotificationMessage:
    msg: NotificationMessage = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def valid_id(value: Any) -> TypeGuard[RequestId]:
    # bool is an int in Python but not a JSON-RPC id; floats are allowed by the spec but a
    # fractional id is a client bug we would rather report than round.
    return (isinstance(value, str) or isinstance(value, int)) and not isinstance(value, bool)


def _readable_id(obj: dict[str, Any]) -> Id:
    value = obj.get("id")
    return value if valid_id(value) else None


def parse_frame(frame: bytes) -> Message:
    """Classify one frame. Never raises on client input."""
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Invalid(error(PARSE_ERROR, None, data=f"invalid UTF-8 at byte {exc.start}"))
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError and over-long integer literals; RecursionError is
        # deep nesting ("[[[[..."), which must cost the client an error, not the daemon a crash.
        return Invalid(error(PARSE_ERROR, None, data=str(exc)[:200] or type(exc).__name__))
    if isinstance(obj, list):
        return Invalid(error(INVALID_REQUEST, None, data="batches are not supported; send one message per line"))
    if not isinstance(obj, dict):
        return Invalid(error(INVALID_REQUEST, None, data="a message must be a JSON object"))

    msg_id = _readable_id(obj)
    if obj.get("jsonrpc") != "2.0":
        return Invalid(error(INVALID_REQUEST, msg_id, data='"jsonrpc" must be "2.0"'))

    if "method" not in obj:
        if "id" in obj and ("result" in obj or "error" in obj):
            if not valid_id(obj["id"]):
                return Invalid(None)  # a response we could never have asked for: ignore it
            err = obj.get("error")
            # Its members are checked where they are read (errors.RpcError.from_wire).
            return Response(obj["id"], obj.get("result"), cast(ErrorObject, err) if isinstance(err, dict) else None)
        return Invalid(error(INVALID_REQUEST, msg_id, data='a message needs "method", or "id" with "result"/"error"'))

    method = obj["method"]
    if not isinstance(method, str) or not method:
        return Invalid(error(INVALID_REQUEST, msg_id, data='"method" must be a non-empty string'))
    if "id" in obj and not valid_id(obj["id"]):
        return Invalid(error(INVALID_REQUEST, None, data='"id" must be a string or an integer'))
    params = obj.get("params")
    if params is None:
        params = {}  # the ACP SDK sends "params": null when there are none
    if not isinstance(params, dict):
        if "id" not in obj:
            return Invalid(None)
        return Invalid(error(INVALID_PARAMS, obj["id"], data='"params" must be an object'))
    if "id" in obj:
        return Request(obj["id"], method, params)
    return Notification(method, params)
