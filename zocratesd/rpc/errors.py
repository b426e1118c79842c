"""Core errors as JSON-RPC errors: this face's one table, keyed by error class.

A core error answers with its class's code and that code's standard message, and `data` is
`{"kind": exc.kind, "message": exc.message, **exc.data}`; so InvalidInput shares -32602 with a
schema failure but keeps its own kind, `invalid_input`. protocol/README.md ("Errors") documents
the same table for clients; tests/unit/test_error_mapping.py keeps the three in step.
"""

from __future__ import annotations

from typing import Any, Final

from zocrates_wire import jsonrpc
from zocrates_wire.errors import RpcError
from zocratesd import errors

# The nearest class along an error's MRO decides (SessionNotFound answers as NotFound); the root
# catches a class someone forgot to map, as an internal error, which the mapping test refuses.
RPC_CODES: Final[dict[type[errors.ZocratesError], int]] = {
    errors.ZocratesError: jsonrpc.INTERNAL_ERROR,
    errors.NotFound: jsonrpc.RESOURCE_NOT_FOUND,
    errors.SessionBusy: jsonrpc.SESSION_BUSY,
    errors.InvalidInput: jsonrpc.INVALID_PARAMS,
    errors.ModelError: jsonrpc.MODEL_ERROR,
    errors.CheckpointNotPending: jsonrpc.CHECKPOINT_NOT_PENDING,
    errors.WriteRefused: jsonrpc.WRITE_REFUSED,
    errors.OnlineOff: jsonrpc.ONLINE_OFF,
    errors.OnlineFailed: jsonrpc.ONLINE_FAILED,
}


def code_of(cls: type[errors.ZocratesError]) -> jsonrpc.ErrorCode:
    """The code record a core error class answers with."""
    return jsonrpc.ERROR_CODES[errors.lookup(RPC_CODES, cls)]


def rpc_error_data(exc: errors.ZocratesError) -> dict[str, Any]:
    return {"kind": exc.kind, "message": exc.message, **exc.data}


def to_rpc_error(exc: errors.ZocratesError) -> RpcError:
    code = code_of(type(exc))
    return RpcError(code.code, code.message, rpc_error_data(exc))
