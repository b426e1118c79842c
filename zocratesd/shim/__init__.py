"""The HTTP face of zocratesd, for the Zotero plugin (protocol/http.md).

A Starlette app served by uvicorn inside the daemon's event loop, on 127.0.0.1 only. Like the
JSON-RPC face (rpc/acp.py), every route is a thin adapter over the core `Daemon`:
- `guard.py`: loopback Host, Origin refusal, bearer token, body cap (pure ASGI, before any route);
- `routes.py`: the REST routes of spec section 6, `/register` and `/health`;
- `turns.py`: `POST /chat` as Server-Sent Events, the turn running apart from the request;
- `server.py`: port choice, the accept loop, the uvicorn server and its shutdown;
- `protocol.py`: each connection under the cap and the request-head deadline (another local user's flood).
"""

from zocratesd.shim.server import HttpFace, preferred_port

__all__ = ["HttpFace", "preferred_port"]
