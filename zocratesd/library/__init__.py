"""The user's Zotero library: a reader for Zotero's data, our FTS5 index, and the retriever
`search_library` uses.

- retrieval.py: the types every retriever speaks (`Passage`, `Scope`, `Hit`, `Retriever`,
  `tokens`) and `InMemoryRetriever`; the engine and the core import them from here, the library
  imports nothing of the engine (tests/unit/test_import_rules.py);
- service.py: `Library`, the index, its background indexer and the `Retriever` over it.

The package itself imports nothing: the core names a `Scope` before its first reply, and the
index (SQLite FTS5, the indexer's threads, the optional dense stage) is loaded with the engine
(process/startup.py).
"""
