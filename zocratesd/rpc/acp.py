"""The ACP method table: each route of the agent (rpc/agent.py) with its params validated by the
pydantic model its `params` annotation names (rpc/models.py), and core errors mapped.

A request's params that the model refuses answer -32602 with pydantic's errors; core errors become
JSON-RPC errors by the one table of this face (`rpc/errors.py`); every error's `data` has a stable
`kind` string (protocol/README.md, "Errors").
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from zocrates_wire import jsonrpc
from zocrates_wire.errors import RpcError
from zocratesd.core.daemon import Daemon
from zocratesd.errors import ZocratesError
from zocratesd.rpc import agent, models
from zocratesd.rpc.agent import NOTIFICATIONS, ROUTES, Agent, Route, connection
from zocratesd.rpc.errors import to_rpc_error
from zocratesd.rpc.peer import MethodTable, Peer

Handler = Callable[..., Awaitable[Any]]


def invalid_params(exc: ValidationError) -> RpcError:
    """-32602 with what pydantic found wrong, field by field."""
    errors = [
        {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()
    ]
    code = jsonrpc.ERROR_CODES[jsonrpc.INVALID_PARAMS]
    return RpcError(code.code, code.message, {"kind": code.kind, "errors": errors})


def params_model(route: Route) -> type[models.Params]:
    """The model the route's `params` argument is annotated with (agent.py names the wire models
    for the type checker only, so they are resolved here)."""
    hints = inspect.get_annotations(route.serve, globals={**vars(agent), "models": models}, eval_str=True)
    model = hints.get("params")
    if not (isinstance(model, type) and issubclass(model, models.Params)):
        raise TypeError(f"{route.serve.__qualname__}: `params` must be annotated with a models.Params")
    return model


# Resolved once, at import (this module is the wire stack: it loads before any request but the
# handshake is served).
PARAMS: dict[str, type[models.Params]] = {name: params_model(route) for name, route in ROUTES.items()}


def handler(acp: Agent, route: Route) -> Handler:
    """`route` as a handler of rpc/dispatch.py, called as `handler(peer, **params)`."""
    model = PARAMS[route.method]

    async def handle(peer: Peer, /, **raw: Any) -> Any:
        try:
            params = model.model_validate(raw)
        except ValidationError as exc:
            raise invalid_params(exc) from None
        try:
            return await route.serve(acp, connection(peer), params)
        except ZocratesError as exc:
            raise to_rpc_error(exc) from None

    handle.__name__ = handle.__qualname__ = route.serve.__name__
    return handle


def build_methods(daemon: Daemon) -> MethodTable:
    """The method table of one daemon; every face that speaks JSON-RPC serves this table."""
    acp = Agent(daemon)
    return MethodTable({name: handler(acp, route) for name, route in ROUTES.items()}, notifications=NOTIFICATIONS)
