"""The engine: ADK's Runner with the coordinator agent, its model and its tools, in-process
(engine/runner.py `Engine`); the retrieval types it uses are the library's (library/retrieval.py).

The package itself imports nothing: the core names `SESSION_CONFIG_KEY` and the model choices
(engine/models) before the process has loaded ADK, which `engine.runner` imports
(process/startup.py, `ENGINE`).
"""

# The session state key of a session's settings (core/session_config.py); the coordinator reads
# its `model`, the search tool its `research_budget`. Here, not in agent.py, so the core can name
# it without importing ADK.
SESSION_CONFIG_KEY = "session_config"
