"""The engine: ADK's Runner with the coordinator agent, its model and its tools, in-process
(engine/runner.py); the retrieval types it uses are the library's (library/retrieval.py).

This package's own import stays light: ADK is imported only with `engine.runner` (and agent.py,
tools.py, research.py, models/offline.py and models/openai.py, which the runner imports), so the
daemon can answer its first requests while the runner is built in the background. `Engine` and
`warm_up` are still importable from here; the first use imports the runner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zocratesd.engine.runner import Engine, warm_up

__all__ = ["Engine", "warm_up"]

# The session state key of a session's settings (core/session_config.py); the coordinator reads
# its `model`, the search tool its `research_budget`. Here, not in agent.py, so the core can name
# it without importing ADK.
SESSION_CONFIG_KEY = "session_config"


def __getattr__(name: str) -> Any:
    if name in ("Engine", "warm_up"):
        from zocratesd.engine import runner

        return getattr(runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
