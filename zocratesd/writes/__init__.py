"""Writes into Zotero: notes, tags, collections and new items, always through Zotero itself (the
plugin inside it, Zotero 10's local API, the connector), never into `zotero.sqlite`; each one
consented to by the person, recorded in `zocrates-data/writes.db`, and undoable.

- operations.py: what can be written, one typed struct per operation, and its undo;
- service.py: `Writes`, the core's calls (propose, confirm, discard, undo, list) and the applier;
- journal.py: writes.db, the record of every write and what it changed;
- paths.py: what a path into Zotero does; plugin.py, local_api.py, connector.py: the three paths;
- notes.py: a note's Markdown as Zotero's note HTML.
"""

from __future__ import annotations

from pathlib import Path

from zocratesd import deferred
from zocratesd.writes.journal import WriteRecord
from zocratesd.writes.paths import WritePath
from zocratesd.writes.plugin import PluginChannel
from zocratesd.writes.service import Writes

__all__ = ["PluginChannel", "WritePath", "WriteRecord", "Writes", "write_json", "zotero_paths"]


def write_json(record: WriteRecord, waiting_for: str | None) -> dict[str, object]:
    """A write as every face sends it; a queued one says what it waits for."""
    out = record.to_json()
    if record.state == "queued" and waiting_for:
        out["error"] = waiting_for
    return out


def zotero_paths(plugin: PluginChannel, base_url: str, state_dir: Path) -> list[WritePath]:
    """The paths into Zotero, in the order they are tried: the plugin (any Zotero 7-10, every
    operation), Zotero 10's local API (every operation), the connector (new items only). Their
    HTTP client is loaded here, when the applier first runs, not with the daemon."""
    local_api = deferred.load("zocratesd.writes.local_api")
    connector = deferred.load("zocratesd.writes.connector")
    return [plugin, local_api.ZoteroLocalApi(base_url, state_dir), connector.ZoteroConnector(base_url)]
