"""Run one inbound request's handler and shape its reply: method lookup, arity check, error mapping.

A handler is called as `handler(context, **params)` (the peer is the context) and returns its
result; it answers with an error by raising `RpcError`. What a client can get here:

- the method is not in the table: -32601, `data.detail` the method name;
- the params do not bind to the handler's signature: -32602, `data.detail` Python's reason
  ("missing a required argument: 'b'"); the ACP handlers take `**params` and validate with
  pydantic themselves (rpc/acp.py, `adapter`), so this catches only a table's plainer handlers;
- the handler raised `RpcError`: that error;
- the handler raised anything else: -32603, `data.detail` the exception's text; it is logged.

Replies put `"id"` last, the order clients have always seen (tests/unit/rpc/test_dispatch.py pins
the bytes). A notification's outcome is never sent (the caller drops it), and a handler runs in
the caller's task, so a cancel of the request reaches the handler directly and its cleanup ends
before the request is answered.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from zocrates_wire import jsonrpc
from zocrates_wire.errors import RpcError
from zocrates_wire.jsonrpc import Params, Reply
from zocratesd.logtext import escape_for_log

log = logging.getLogger(__name__)

Handler = Callable[..., Awaitable[Any]]


# Each handler's signature, read once (reading it costs more than most calls); weak, so a dropped
# method table (a test's daemon, whose handlers close over it) is not kept alive by this cache.
_signatures: weakref.WeakKeyDictionary[Handler, inspect.Signature] = weakref.WeakKeyDictionary()


def _signature(handler: Handler) -> inspect.Signature:
    try:
        return _signatures[handler]
    except KeyError:
        sig = _signatures[handler] = inspect.signature(handler)
        return sig
    except TypeError:  # a callable that takes no weak reference: read it each time
        return inspect.signature(handler)


async def call(methods: Mapping[str, Handler], context: Any, method: str, params: Params) -> Reply:
    """Run `method`'s handler; the reply's outcome: `{"result": ...}` or `{"error": {...}}`.
    A table still loading (rpc/handshake.py `StagedMethods`) names the table to use, maybe after a wait."""
    table_for = getattr(methods, "table_for", None)
    if table_for is not None:
        methods = await table_for(method, params)
    handler = methods.get(method)
    if handler is None:
        return {"error": jsonrpc.error_object(jsonrpc.METHOD_NOT_FOUND, data=method)}
    try:
        _signature(handler).bind(context, **params)
    except TypeError as exc:
        return {"error": jsonrpc.error_object(jsonrpc.INVALID_PARAMS, data=str(exc))}
    try:
        result = await handler(context, **params)
    except RpcError as exc:
        return {"error": exc.to_wire()}
    except Exception as exc:
        log.exception("method %s failed", escape_for_log(method, 100))
        return {"error": jsonrpc.error_object(jsonrpc.INTERNAL_ERROR, data=str(exc))}
    return {"result": result}


def reply(request_id: jsonrpc.Id, outcome: Reply) -> Reply:
    """The response to send for `outcome` (`id` last)."""
    return {"jsonrpc": "2.0", **outcome, "id": request_id}
