"""zocratesd: the local daemon behind Zocrates.

Importing this package is cheap on purpose: `zocratesd stdio` (the editor-facing byte pump) must
answer at once, so nothing here imports ADK, pydantic or the event loop machinery.
"""

__version__ = "0.1.0"
