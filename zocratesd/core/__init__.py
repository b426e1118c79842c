"""The core: the plain async API every face calls (`Daemon`), knowing nothing of JSON-RPC or HTTP.

`Daemon` is a facade over one service per concern (core/daemon.py lists them): sessions, turns,
the library catalogue, settings; faces (`zocratesd.rpc`, `zocratesd.shim`, `zocratesd.mcp`) adapt
it to their wire and subscribe to a session's updates with `Daemon.watch()`.
"""

from zocratesd.core.daemon import Daemon, TurnResult

__all__ = ["Daemon", "TurnResult"]
