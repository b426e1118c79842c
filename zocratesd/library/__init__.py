"""The user's Zotero library: a reader for Zotero's data, our FTS5 index, and the retriever
`search_library` uses.

- retrieval.py: the types every retriever speaks (`Passage`, `Scope`, `Hit`, `Retriever`,
  `tokens`) and `InMemoryRetriever`; the engine and the core import them from here, the library
  imports nothing of the engine (tests/unit/test_import_rules.py);
- `Library` (_library.py): the index, its background indexer and the `Retriever` over it.

This package's own import stays light: the core names a `Scope` before its first reply, and the
index (SQLite FTS5, the indexer's threads, the optional dense stage) loads only with `Library`,
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zocratesd.library._library import Library, disabled_status
    from zocratesd.library.index import INDEX_NAME
    from zocratesd.library.passages import PassagesFile
    from zocratesd.library.zotero_db import ZOTERO_DB

__all__ = ["INDEX_NAME", "ZOTERO_DB", "Library", "PassagesFile", "disabled_status"]

_LAZY = {"Library": "_library", "disabled_status": "_library", "INDEX_NAME": "index", "ZOTERO_DB": "zotero_db",
         "PassagesFile": "passages"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
