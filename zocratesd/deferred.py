"""`load(module)`: a module imported on first use, for the few places a module the first reply
needs names one it must not load (the store names ADK's session service, the model factory a
provider's client). The process imports those modules ahead of any use, in the background
(process/startup.py), so by the time `load` runs it is a lookup in `sys.modules`. (The other
way the daemon puts work off its first reply's path, a blocking call in a thread of its own, is
process/threads.py.)

Why the first reply must not wait for them, measured: bench/PROFILE.md, "Start-up". This module
imports nothing else: the indexer's embedding child (library/embedproc.py) imports it, and
asyncio would be a large part of the child's memory before its model.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def load(module: str) -> ModuleType:
    """`module`, imported now unless it was already (the start-up plan imports it ahead)."""
    return importlib.import_module(module)
