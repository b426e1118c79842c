"""The JSON-RPC face: NDJSON framing and message parsing (sans-IO), the connection peer, the ACP
methods over the core, and the stdio byte pump. Nothing here is imported by the core.

This package's __init__ stays empty: `zocratesd stdio` imports `rpc.pump` and must stay light.
"""
