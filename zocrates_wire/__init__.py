"""zocrates_wire: the wire both ends of a zocratesd connection speak, sans-IO.

- `framing`: NDJSON frames (bytes in, frames out; messages in, bytes out);
- `jsonrpc`: JSON-RPC 2.0 messages, error codes, replies;
- `connection`: one connection's endpoint core: our requests (ids, pending calls and their
  outcomes, `$/cancel_request`), the other side's requests in flight, and what to send when;
- `errors`: the exceptions a call can end with (an error answer, a lost connection, a message
  over the frame cap).

The daemon's connection peer (zocratesd/rpc/peer.py), the async client and the blocking client
(zocrates_client) each add only their I/O around `connection.Connection`. This package imports
neither zocratesd nor zocrates_client (tests/unit/test_import_rules.py), and nothing here reads,
writes, sleeps or starts a thread.
"""

from typing import Final

# The ACP protocol version this wire speaks (ACP `initialize`'s `protocolVersion`).
PROTOCOL_VERSION: Final = 1
