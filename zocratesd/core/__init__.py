"""The core: the plain async API every face calls (`Daemon`), knowing nothing of JSON-RPC or HTTP.

`Daemon` holds sessions, turns, checkpoints, cancel, rewind and replay over the store, the engine,
the library, compaction and maintenance; faces (`zocratesd.rpc`, `zocratesd.shim`) adapt it to their
wire and subscribe to a session's updates with `Daemon.watch()`.
"""

from zocratesd.core.daemon import Daemon, TurnResult

__all__ = ["Daemon", "TurnResult"]
