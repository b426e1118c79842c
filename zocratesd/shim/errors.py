"""Errors as `{"status": "error", "error": {code, message, ...}}` with an HTTP status.

Core errors map by class through `HTTP_STATUSES`, this face's one table (protocol/http.md documents
it; tests/unit/test_error_mapping.py keeps the two in step). The face's own refusals (bad JSON,
token, Host, media type, body size) are `HttpError`s that carry their status and code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
from starlette.responses import JSONResponse as _StarletteJSONResponse

from zocratesd import errors


class JSONResponse(_StarletteJSONResponse):
    """Compact JSON through orjson (a long session encodes several times faster than with the
    standard library: bench/PROFILE.md); what orjson refuses (a lone surrogate from a client, huge
    ints) falls back to it."""

    def render(self, content: Any) -> bytes:
        try:
            return orjson.dumps(content)
        except TypeError:
            return json.dumps(content, separators=(",", ":"), ensure_ascii=True).encode("ascii")


class HttpError(Exception):
    """A request refused by the face itself (not by the core)."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


@dataclass(frozen=True, slots=True)
class HttpStatus:
    status: int
    code: str  # the error body's `code`, and an SSE `error` event's: always the class's `kind`


# The nearest class along an error's MRO decides (SessionNotFound answers as NotFound); the root
# catches a class someone forgot to map, as a 500, which the mapping test refuses.
HTTP_STATUSES: Final[dict[type[errors.ZocratesError], HttpStatus]] = {
    errors.ZocratesError: HttpStatus(500, "internal"),
    errors.NotFound: HttpStatus(404, "not_found"),
    errors.SessionBusy: HttpStatus(409, "session_busy"),
    errors.CheckpointNotPending: HttpStatus(409, "checkpoint_not_pending"),
    errors.InvalidInput: HttpStatus(422, "invalid_input"),
    errors.WriteRefused: HttpStatus(403, "write_refused"),
    errors.OnlineOff: HttpStatus(403, "online_off"),
    errors.OnlineFailed: HttpStatus(502, "online_failed"),  # Bad Gateway: the provider failed, not us
    errors.ModelError: HttpStatus(502, "model_error"),  # Bad Gateway: the model endpoint failed, not us
}


def http_status_of(cls: type[errors.ZocratesError]) -> HttpStatus:
    return errors.lookup(HTTP_STATUSES, cls)


def error_body(code: str, message: str, **data: Any) -> dict[str, Any]:
    return {"status": "error", "error": {"code": code, "message": message, **data}}


def error_response(status: int, code: str, message: str, headers: Mapping[str, str] | None = None, **data: Any) -> JSONResponse:
    return JSONResponse(error_body(code, message, **data), status_code=status, headers=headers)


def core_error_response(exc: errors.ZocratesError) -> JSONResponse:
    status = http_status_of(type(exc))
    return error_response(status.status, status.code, exc.message, **_jsonable(exc.data))


_HUMP = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake_case(key: str) -> str:
    """`pendingInvocationId` -> `pending_invocation_id`. The core names an error's data in the
    JSON-RPC face's camelCase (ACP's); this face's bodies are snake_case throughout."""
    return _HUMP.sub(r"_\1", key).lower()


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return {snake_case(k): v for k, v in data.items() if isinstance(v, (str, int, float, bool, type(None)))}
