"""The wire contract as pydantic models: params are validated with them, results documented by them.

`protocol/schema/*.json` is generated from these models (`python -m zocratesd.rpc.schema`), and a
test fails when the committed files drift from them. Each limit comes from `zocratesd/limits.py`,
which the core and the MCP face read too. Params models accept unknown fields (`extra="allow"`):
ACP grows optional fields and `_meta` over time, and an older daemon must not refuse a newer
editor. Results are built as plain dicts, not through these models: validating a long session's
history on every answer costs more than the answer (bench/PROFILE.md); tests validate real
results against these models instead.
"""

# No `from __future__ import annotations` here: pydantic would evaluate every annotation string
# when the classes are created, which makes importing this module slower (bench/PROFILE.md).
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from zocratesd.limits import (
    DEFAULT_LIST,
    DEFAULT_ONLINE_RESULTS,
    DEFAULT_QUOTE_MATCHES,
    DEFAULT_SEARCH_TOP_K,
    DEFAULT_SUGGESTIONS,
    ITEM_KEY_PATTERN,
    LIBRARY_PATTERN,
    MAX_ACTIVE_ITEMS,
    MAX_COLLECTION_NAME_CHARS,
    MAX_COLLECTION_REF_CHARS,
    MAX_CONFIG_ID_CHARS,
    MAX_CREATORS,
    MAX_EXPORT_ITEMS,
    MAX_FIELD_CHARS,
    MAX_FIND_QUOTE_CHARS,
    MAX_GUIDANCE_CHARS,
    MAX_INTERRUPT_ID_CHARS,
    MAX_ITEM_TITLE_CHARS,
    MAX_LIST,
    MAX_NOTE_CHARS,
    MAX_OFFSET,
    MAX_ONLINE_QUERY_CHARS,
    MAX_ONLINE_RESULTS,
    MAX_PROMPT_BLOCKS,
    MAX_PROTOCOL_VERSION,
    MAX_QUERY_CHARS,
    MAX_QUOTE_MATCHES,
    MAX_RESEARCH_BUDGET,
    MAX_SEARCH_TOP_K,
    MAX_SUGGESTIONS,
    MAX_TAG_FILTER_CHARS,
    MAX_TITLE_CHARS,
    MAX_WRITE_ITEMS,
    MAX_WRITE_TAGS,
    MIN_FIND_QUOTE_WORDS,
    SESSION_ID_PATTERN,
    WRITE_ID_PATTERN,
)
from zocratesd.writes import Writes
from zocratesd.writes import operations as ops
from zocratesd.writes.operations import Operation


class Model(BaseModel):
    """The base of every wire model. A model's validator is built on its first use, not when the
    module is imported: a connection uses a few of the dozens declared here, and building them all
    would delay the daemon's first answer (bench/PROFILE.md). Behaviour and schemas are the same."""

    model_config = ConfigDict(defer_build=True)


class Params(Model):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)

    meta: dict[str, Any] | None = Field(None, alias="_meta")


class Result(Model):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


SessionId = Field(pattern=SESSION_ID_PATTERN, description="A session id (as returned by session/new).")

# --- initialize ---------------------------------------------------------------------------------


class InitializeParams(Params):
    protocol_version: int = Field(ge=0, le=MAX_PROTOCOL_VERSION, description="The latest ACP version the client speaks.")
    client_capabilities: dict[str, Any] | None = None
    client_info: dict[str, Any] | None = None


class ZocratesMeta(Result):
    version: str = Field(description="The daemon's version; equals daemon.json's `version`.")
    protocol_version: int
    extensions: list[str] = Field(description="The `_zocrates/*` methods this daemon serves.")
    max_frame_bytes: int = Field(description="The longest line the daemon accepts; longer frames get -32600.")


class Supported(Result):
    """`{}`: ACP's way of saying a capability is there."""


class SessionCapabilities(Result):
    list: Supported = Field(default_factory=Supported)
    delete: Supported = Field(default_factory=Supported)
    resume: Supported = Field(default_factory=Supported)
    close: Supported = Field(default_factory=Supported)


class AgentCapabilities(Result):
    load_session: bool = True
    prompt_capabilities: dict[str, bool]
    mcp_capabilities: dict[str, bool]
    session_capabilities: SessionCapabilities
    meta: dict[str, ZocratesMeta] = Field(alias="_meta", description='`{"zocrates": ZocratesMeta}`')


class Implementation(Result):
    name: str
    title: str | None = None
    version: str


class InitializeResult(Result):
    protocol_version: int
    agent_capabilities: AgentCapabilities
    agent_info: Implementation
    auth_methods: list[Any] = Field(default_factory=list)


# --- sessions -----------------------------------------------------------------------------------


class NewSessionParams(Params):
    cwd: str = Field(description="Absolute path; recorded with the session (sessions are library-wide).")
    mcp_servers: list[Any] = Field(default_factory=list, description="Accepted and ignored: Zocrates has no MCP client.")


class ConfigChoice(Result):
    value: str
    name: str
    description: str | None = None


class ConfigOption(Result):
    """An ACP `SessionConfigOption`: `scope` (category mode), `model` (model), `research_budget`
    (model_config) and `compaction` (model_config; `boolean` for a client that advertised
    `session.configOptions.boolean`, else a select of "on"/"off")."""

    id: Literal["scope", "model", "research_budget", "compaction", "citation_style"]
    name: str
    description: str | None = None
    category: Literal["mode", "model", "model_config"]
    type: Literal["select", "boolean"]
    current_value: str | bool
    options: list[ConfigChoice] | None = Field(None, description="The choices of a select.")


class NewSessionResult(Result):
    session_id: str
    config_options: list[ConfigOption]


class ListSessionsParams(Params):
    cwd: str | None = Field(None, description="Accepted; Zocrates sessions belong to the library, so it does not filter.")
    cursor: str | None = Field(None, description="Zocrates answers in one page; any cursor is refused.")


class SessionCreated(Result):
    created_at: float = Field(description="Epoch seconds.")


class SessionInfo(Result):
    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = Field(None, description="ISO 8601, UTC.")
    meta: dict[str, SessionCreated] | None = Field(None, alias="_meta", description='`{"zocrates": SessionCreated}`')


class ListSessionsResult(Result):
    sessions: list[SessionInfo]
    next_cursor: str | None = None


class LoadSessionParams(Params):
    session_id: str = SessionId
    cwd: str | None = None
    mcp_servers: list[Any] = Field(default_factory=list)


class LoadSessionResult(Result):
    """The session's settings; the history arrived as `session/update` notifications before this
    answer (and `available_commands_update` follows it)."""

    config_options: list[ConfigOption]


class ResumeSessionParams(Params):
    session_id: str = SessionId
    cwd: str | None = Field(None, description="Accepted; sessions belong to the library.")
    mcp_servers: list[Any] = Field(default_factory=list)


class ResumeSessionResult(Result):
    """The session's settings; no history is replayed (`available_commands_update` follows)."""

    config_options: list[ConfigOption]


class CloseSessionParams(Params):
    session_id: str = SessionId


class CloseSessionResult(Result):
    """Empty: this connection no longer hears the session (its turn, if it prompted one, is
    cancelled); the session stays stored."""


class SetConfigOptionParams(Params):
    session_id: str = SessionId
    config_id: str = Field(max_length=MAX_CONFIG_ID_CHARS, description="`scope`, `model`, `research_budget` or `compaction`.")
    type: Literal["boolean"] | str | None = Field(None, description='"boolean" with a boolean value; absent for a select.')
    value: str | bool = Field(description="A value id of the option's choices, or a boolean (`compaction`).")


class SetConfigOptionResult(Result):
    config_options: list[ConfigOption]


class DeleteSessionParams(Params):
    session_id: str = SessionId


class DeleteSessionResult(Result):
    """Empty on success."""


class PromptParams(Params):
    session_id: str = SessionId
    prompt: list[dict[str, Any]] = Field(
        max_length=MAX_PROMPT_BLOCKS,
        description="ContentBlocks: `text`, and `resource_link` (zotero://select/library/items/KEY adds the item to the scope).",
    )


class PromptResult(Result):
    stop_reason: Literal["end_turn", "cancelled"]
    meta: dict[str, Any] | None = Field(
        None, alias="_meta",
        description='`{"zocrates": {"invocationId": str, "pendingHitl": PendingHitl | null, "citations": '
        '[CitationCheck] | null}}`: the research checkpoint the turn stopped at, when the client did not answer it '
        "(resume it with _zocrates/chat/resume), and the answer's citations checked against their sources. "
        'For a slash command: `{"zocrates": {"command": {"name": str, "ok": bool, "errorKind"?: str}}}`. '
        '`citationKeys` (`{itemKey: citationKey}`): the citation key of each item the answer cites.',
    )


class CancelParams(Params):
    session_id: str = SessionId


# --- _zocrates/* extensions --------------------------------------------------------------------


class GetSessionParams(Params):
    session_id: str = SessionId


class RenameSessionParams(Params):
    session_id: str = SessionId
    title: str = Field(min_length=1, max_length=MAX_TITLE_CHARS)


class FoundIn(Model):
    item_key: str
    library: str
    title: str
    page: str | None
    link: str | None


class QuoteCheck(Model):
    """One quote or cited claim of an answer, checked against the cited item's text."""

    kind: Literal["quote", "claim"]
    text: str
    status: Literal["found", "supported", "misquoted", "not_found", "unsupported"] = Field(
        description="found: in the source word for word (whitespace, hyphenation, ligatures, quote marks aside); "
        "supported: a claim whose words are on one page; misquoted: a quote there with a few words changed "
        "(`source_reads`); not_found / unsupported: not in the cited source.")
    cited_page: str | None = Field(description="The page(s) the answer gives.")
    page: str | None = Field(description="The page the text is on (its label, else its number).")
    page_number: int | None = Field(description="The PDF's page number (1-based).")
    link: str | None = Field(description="`zotero://open-pdf/...?page=N`: the PDF at that page.")
    page_corrected: bool = Field(description="The text is on `page`, not on the page the answer gives.")
    source_reads: str | None = Field(description="A misquote: the source's own words there.")
    found_in: FoundIn | None = Field(description="A quote not in the cited item but in another item the answer cites or the search found.")


class CitationCheck(Model):
    """An answer's citation [n], checked (`verified`: true when every check passed, false when one
    failed, null when the item's text could not be checked)."""

    n: int
    item_key: str | None
    library: str
    verified: bool | None
    partial: str | None = Field(description="Why the item's text is incomplete (only the abstract, pages missing).")
    title: str | None
    citation_key: str | None = Field(None, description="The item's citation key (as `_zocrates/citations/export` gives it).")
    label: str | None = Field(None, description=(
        'How the answer cites the item when not by number: `[@key]`, `(Lewis et al., 2020)`, `Lewis et al. (2020)`.'))
    checks: list[QuoteCheck]


class UiMessage(Model):
    """One message of the UI schema (spec 2.2). Field names are the spec's (snake_case)."""

    id: str
    role: Literal["user", "assistant"]
    text: str
    thought: str | None
    author: str
    timestamp: float
    invocation_id: str
    citations: list[CitationCheck] | None = Field(
        None, description="An answer's citations checked against their sources (present on a checked answer).")


class PendingHitl(Model):
    invocation_id: str
    interrupt_id: str
    message: str | None
    payload: Any


class ResumeAnswer(Model):
    """The user's answer to a research checkpoint."""

    model_config = ConfigDict(extra="forbid")
    action: Literal["extend_budget", "synthesize", "search_online"] = Field(
        description="`extend_budget`: search further (up to `research.max_extensions` times); `synthesize`: answer now; "
        "`search_online`: search beyond the library (OpenAlex, arXiv, Crossref) for what is left, then answer "
        "(offered when the checkpoint's `payload.actions` lists it)."
    )
    guidance: str | None = Field(None, max_length=MAX_GUIDANCE_CHARS, description="What to search next (extend_budget only).")


class ChatResumeParams(Params):
    session_id: str = SessionId
    invocation_id: str = Field(min_length=1, max_length=MAX_INTERRUPT_ID_CHARS, description="`pending_hitl.invocation_id`.")
    interrupt_id: str = Field(min_length=1, max_length=MAX_INTERRUPT_ID_CHARS, description="`pending_hitl.interrupt_id`.")
    response: ResumeAnswer


class ChatResumeResult(Result):
    """How the resumed turn ended: answered (`pendingHitl` null) or at a further checkpoint."""

    stop_reason: Literal["end_turn", "cancelled"]
    invocation_id: str | None
    pending_hitl: PendingHitl | None
    citations: list[CitationCheck] | None = Field(None, description="The answer's citations checked against their sources.")


class SessionSettingsView(Model):
    """A session's settings as the UI session shows them (the config options' current values)."""

    scope: str = Field(description='`library`, `papers` or `collection:<KEY>`.')
    model: str = Field(description="`offline`, or the configured model as `provider:name`.")
    research_budget: int = Field(ge=1, le=MAX_RESEARCH_BUDGET)
    compaction: bool


class UiSession(Model):
    """`_zocrates/session/get`: the spec's UI session object, as the Zotero sidebar renders it."""

    id: str
    title: str
    created_at: float = Field(description="Epoch seconds (float).")
    updated_at: float = Field(description="Epoch seconds (float) of the last stored event.")
    messages: list[UiMessage]
    pending_hitl: PendingHitl | None
    settings: SessionSettingsView | None = Field(
        None, description="The session's settings (absent in a rewind's answer, which is the stored view only)."
    )


class RewindParams(Params):
    session_id: str = SessionId
    invocation_id: str = Field(min_length=1, max_length=MAX_INTERRUPT_ID_CHARS, description="The turn to undo, with all after it.")


class ContextItem(Model):
    """A paper a turn was asked about."""

    item_key: str
    title: str


class ContextSnippet(Model):
    """A passage the user gave a turn (a selection in a PDF, an annotation); empty fields left out."""

    model_config = ConfigDict(extra="allow")
    kind: Literal["text", "image"]
    item_key: str
    text: str = ""
    title: str = ""
    page: int | None = None
    key: str | None = Field(None, description="The annotation's or attachment's key.")


class Restored(Model):
    """What the rewound turn was asked with, for an inline edit."""

    mode: Literal["papers", "collection", "library"]
    active_context_items: list[ContextItem] | None
    collection: str | None
    snippets: list[ContextSnippet]
    text: str


class RewindResult(Model):
    session: UiSession
    restored: Restored


class NoParams(Params):
    """No params (unknown fields are ignored)."""


class StorageStatsResult(Model):
    """`_zocrates/storage/stats` (the shim's StorageStatsResponse)."""

    db_path: str
    db_size_bytes: int
    wal_size_bytes: int
    page_size: int
    page_count: int
    freelist_count: int
    freelist_ratio: float
    session_count: int
    event_count: int


class VacuumResult(Model):
    ran: bool
    skipped_reason: Literal["not_needed", "chat_in_progress", "insufficient_disk", "busy", "error"] | None = Field(
        description="null exactly when VACUUM ran"
    )
    bytes_before: int = Field(description="sessions.db plus its -wal")
    bytes_after: int
    duration_ms: float


class MaintenanceResult(Model):
    """`_zocrates/storage/maintenance` (the shim's MaintenanceResponse)."""

    empty_deleted: int
    retention_deleted: int
    vacuum: VacuumResult
    duration_ms: float


class SessionSummary(Model):
    """A session without its messages (`_zocrates/session/rename` answers it)."""

    id: str
    title: str
    created_at: float
    updated_at: float


class LibraryStatusParams(Params):
    refresh: bool = Field(False, description="Check Zotero for changes now instead of at the next poll.")


class LibraryCounts(Model):
    """The library by Zotero's kinds, each counted once (library/_records.py, library_counts)."""

    items: int = Field(description="Regular items (papers, books, web pages...): not notes, attachments or annotations.")
    notes: int = Field(description="Notes, child and standalone.")
    annotations: int = Field(description="PDF annotations (highlights, underlines, comments).")
    attachments: int = Field(description="Attachments (PDFs, snapshots, linked files), child and standalone.")


class LibraryKinds(Model):
    """One library of the index, by kind (`_zocrates/library/status`'s `libraries`)."""

    model_config = ConfigDict(extra="allow")
    library: str = Field(description='"user" or "groups/<groupID>".')
    name: str
    items: int
    notes: int
    annotations: int
    texts: int = Field(description="Attachments with full text.")


class LibraryStatusResult(Model):
    """`_zocrates/library/status`: the library index (`zocrates-data/library.db`) and its progress."""

    state: Literal["starting", "indexing", "ready", "unavailable", "error", "stopped", "disabled"] = Field(
        description="`indexing` while a refresh writes; `unavailable`: no library found; `error`: see `message`."
    )
    source: Literal["local_api", "sqlite", "snapshot"] | None = Field(
        description="How the library was last read: Zotero's local API, zotero.sqlite read-only, or a snapshot copy."
    )
    zotero_schema_version: int | None = Field(description="`userdata` schema: 123 Zotero 7/8, 125 Zotero 9, 129 Zotero 10.")
    items_total: int = Field(
        description="Records read at the last read (trash excluded): regular items plus standalone notes and standalone "
        "attachments, each indexed as an item of its own; the unit of `items_to_index` and `items_done`. "
        "For what the library holds by kind, read `counts` (`counts.items` is the regular items alone)."
    )
    counts: LibraryCounts = Field(
        description="What the library held at the last read, by Zotero's kinds (trash and feeds excluded).",
    )
    items_to_index: int = Field(description="Items the current (or last) refresh (re)indexes.")
    items_done: int
    percent: float = Field(description="Progress of the current refresh, 0-100.")
    items_indexed: int = Field(description="Items in the index.")
    chunks_indexed: int
    attachments_with_text: int
    collections: int
    last_refresh: str | None = Field(description="ISO 8601, UTC, of the last completed refresh.")
    last_refresh_ms: float | None
    last_look: str | None = Field(default=None, description="ISO 8601, UTC, of the indexer's last look for changes in Zotero.")
    change_read_at: str | None = Field(
        default=None, description="ISO 8601, UTC: when a change it saw is read, while looks are spaced out to bound "
        "their cost (a library read through a private copy); null when nothing waits.")
    refreshes: int = Field(description="Completed refreshes since the daemon started.")
    message: str | None = Field(description="What went wrong, or why there is no library, and what to do.")
    warnings: list[str]
    index_path: str | None
    notes_indexed: int = Field(0, description="Notes in the index (child and standalone).")
    annotations_indexed: int = Field(0, description="PDF annotations (highlights, underlines, comments) in the index.")
    libraries: list[LibraryKinds] = Field(default_factory=list, description="Per library (feeds are never indexed).")
    kinds: dict[str, int] = Field(
        default_factory=dict,
        description="Totals over the libraries: `{items, notes, annotations, texts}` (texts: attachments with full text).",
    )
    data_dir: str | None = Field(None, description="The Zotero data directory the library is read from.")
    summary: str | None = Field(
        None,
        description='Where the library comes from and its state, in words ("indexing 1,204 of 9,921 items from …", '
        '"library ready: 9,921 items, 2,000 full texts (from …)", "no Zotero library found in D: … (what to do)"); '
        "logged at start and whenever it changes.",
    )


class LibrarySuggestionsParams(Params):
    limit: int = Field(
        DEFAULT_SUGGESTIONS, ge=1, le=MAX_SUGGESTIONS, strict=True,
        description=f"How many questions, at most (default {DEFAULT_SUGGESTIONS}).",
    )


class SuggestedItem(Model):
    item_key: str
    title: str


class SuggestedCollection(Model):
    key: str
    name: str


class LibrarySuggestion(Model):
    text: str = Field(description="The question, ready to ask.")
    kind: Literal["paper", "collection", "tag"] = Field(description="What of the library it was drawn from.")
    mode: Literal["papers", "collection", "library"] = Field(
        description="The scope to ask it in (`_meta.zocrates.mode`): the `items`, the `collection`, or the whole library."
    )
    library: str | None = Field(description='`"user"`, `"groups/<groupID>"`, or null for every library.')
    items: list[SuggestedItem] = Field(description='The papers of a `"papers"` question (else empty).')
    collection: SuggestedCollection | None = Field(description='The collection of a `"collection"` question (else null).')


class LibrarySuggestionsResult(Model):
    """`_zocrates/library/suggestions`: questions drawn from the user's own library (its most worked-on
    papers, largest collection, most used tag), for a client's first screen; empty without a library
    or before anything is indexed."""

    suggestions: list[LibrarySuggestion]
ItemKey = Field(pattern=ITEM_KEY_PATTERN, description="A Zotero item key (8 characters A-Z, 0-9).")
LibraryFilter = Field(
    None, pattern=LIBRARY_PATTERN,
    description='Only this library: "user" (My Library) or "groups/<groupID>"; absent: every library.',
)


class LibrarySearchParams(Params):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="A question or keywords.")
    top_k: int = Field(DEFAULT_SEARCH_TOP_K, ge=1, le=MAX_SEARCH_TOP_K, description="How many passages (best first).")
    collection: str | None = Field(
        None, min_length=1, max_length=MAX_COLLECTION_REF_CHARS,
        description='Only this collection and its subcollections: its key, name or "Parent / Child" path.',
    )
    item_keys: list[str] | None = Field(
        None, min_length=1, max_length=MAX_ACTIVE_ITEMS, description="Only these items (Zotero keys)."
    )
    library: str | None = LibraryFilter


class LibraryPassage(Model):
    """A passage as `search_library` cites it."""

    model_config = ConfigDict(extra="allow")
    item_key: str
    title: str
    text: str
    creators: list[str]
    year: int | None
    kind: Literal["metadata", "fulltext", "note", "annotation"] = Field(
        description="`metadata`: the item's header and abstract; `fulltext`: its attachment's text; a note; an annotation."
    )
    page: int | None = Field(description="The PDF page (1-based), when the passage is on one.")
    page_label: str | None = Field(description="The page label a reader shows (else the page number).")
    attachment_key: str | None
    source_key: str | None = Field(description="The note's or annotation's own key (for fulltext: the attachment's).")
    library: str = Field(description='"user" or "groups/<groupID>".')
    link: str | None = Field(description="`zotero://open-pdf/...?page=N` or `zotero://select/...`.")
    collections: list[str]
    score: float


class SearchScope(Model):
    """Where a search looked."""

    model_config = ConfigDict(extra="allow")
    mode: Literal["library", "collection", "papers"]
    collection: str | None
    item_keys: list[str]
    library: str | None


class LibrarySearchResult(Model):
    """`_zocrates/library/search`: the passages a turn's search_library would find, best first."""

    query: str
    scope: SearchScope
    passages: list[LibraryPassage]
    library_state: str | None = Field(description="The index's state (as _zocrates/library/status); `indexing`: partial results.")
    library_message: str | None


class LibraryItemParams(Params):
    item_key: str = ItemKey
    library: str | None = LibraryFilter
    fulltext: bool = Field(False, description="Include one page of the item's full text.")
    fulltext_offset: int = Field(0, ge=0, le=MAX_OFFSET, description="The full-text chunk to start the page at (a page's `next_offset`).")


class ItemSummary(Model):
    model_config = ConfigDict(extra="allow")
    item_key: str
    library: str
    item_type: str | None
    title: str
    creators: list[str]
    year: int | None
    date_added: str | None = Field(description='"YYYY-MM-DD hh:mm:ss" (UTC), as Zotero stores it.')
    date_modified: str | None
    link: str = Field(description="`zotero://select/...`.")


class Child(Model):
    """What an item's answer shows of each of its children (extra fields may come)."""

    model_config = ConfigDict(extra="allow")
    key: str
    link: str = Field(description="`zotero://select/...` (a PDF: `zotero://open-pdf/...`).")


class ItemNote(Child):
    title: str
    text: str
    truncated: bool = Field(description="The text was cut (a long note is shown in part).")


class ItemAnnotation(Child):
    attachment_key: str
    type: str = Field(description="highlight, underline, note, text, image or ink.")
    text: str
    comment: str
    color: str | None
    page_label: str | None
    page: int | None = Field(description="1-based.")
    tags: list[str]


class ItemAttachment(Child):
    content_type: str | None
    link_mode: int | None
    has_text: bool
    indexed_pages: int | None = Field(None, description="A PDF's pages Zotero extracted text from (of `total_pages`; "
                                      "Zotero stops at fulltext.pdfMaxPages); absent when Zotero did not say.")
    total_pages: int | None = Field(None, description="The PDF's pages, as Zotero counted them.")


class CollectionRef(Model):
    model_config = ConfigDict(extra="allow")
    key: str
    name: str


class FulltextChunk(Model):
    model_config = ConfigDict(extra="allow")
    attachment_key: str
    page: int | None
    page_label: str | None
    text: str
    link: str


class FulltextPage(Model):
    """One page of an item's full text."""

    model_config = ConfigDict(extra="allow")
    offset: int
    chunks: list[FulltextChunk]
    total_chunks: int
    next_offset: int | None = Field(description="Where the next page starts; null: this is the last page.")


class LibraryItemResult(ItemSummary):
    """`_zocrates/library/item`: one item of the index with its children."""

    abstract: str
    doi: str | None
    url: str | None
    tags: list[str]
    collections: list[CollectionRef]
    notes: list[ItemNote] = Field(description="Child notes; a standalone note: itself.")
    annotations: list[ItemAnnotation]
    attachments: list[ItemAttachment]
    fulltext_chunks: int = Field(description="How many chunks its full text has (0: none indexed).")
    fulltext: FulltextPage | None = Field(None, description="With `fulltext`: one page of the full text.")


class ItemRef(Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
    item_key: str = ItemKey
    library: str = Field("user", pattern=LIBRARY_PATTERN, description='"user" (My Library) or "groups/<groupID>".')


class ExportCitationsParams(Params):
    """`_zocrates/citations/export`: the bibliography of what a session's answers cite (one
    answer's with `invocationId`), and of `items`."""

    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN, description="The session whose answers' sources are exported.")
    invocation_id: str | None = Field(None, max_length=MAX_INTERRUPT_ID_CHARS,
                                      description="Only this answer's sources (its invocation id).")
    items: list[ItemRef] = Field(default_factory=list, max_length=MAX_EXPORT_ITEMS, description="Items to add.")
    format: Literal["bibtex", "biblatex", "csl-json", "text"] = Field(
        "bibtex", description="BibTeX, BibLaTeX, CSL-JSON, or text formatted in a CSL style.")
    style: str | None = Field(None, max_length=200, description="With `text`: a CSL style of `<data dir>/styles/` by file "
                              "name or title (APA when absent).")


class CitedSource(Model):
    item_key: str
    library: str
    citation_key: str


class ExportCitationsResult(Model):
    """The bibliography and what is in it."""

    format: str
    text: str = Field(description="The bibliography: BibTeX or BibLaTeX entries, a CSL-JSON array, or formatted text.")
    count: int = Field(description="Entries in it.")
    keys: list[str] = Field(description="Their citation keys, in order.")
    missing: list[str] = Field(description="Cited item keys no longer in the library index (left out).")
    style: str | None = Field(description="With `text`: the style used (its file name).")
    sources: list[CitedSource] = Field(description="The entries' items, in order: which item has which citation key.")
class FindQuoteParams(Params):
    quote: str = Field(min_length=1, max_length=MAX_FIND_QUOTE_CHARS,
                       description=f"A sentence or more, as quoted (at least {MIN_FIND_QUOTE_WORDS} words).")
    library: str | None = LibraryFilter
    limit: int = Field(DEFAULT_QUOTE_MATCHES, ge=1, le=MAX_QUOTE_MATCHES, description="Matches at most.")


class QuoteMatch(Model):
    item_key: str
    library: str
    title: str
    exact: bool = Field(description="The page has the quote word for word (line breaks, hyphenation, ligatures, quote marks aside).")
    score: float = Field(description="1.0 exact; else how well the quote's words align with the page's (0.8 and up).")
    page: int | None = Field(description="The PDF's page number (1-based).")
    page_label: str | None = Field(description="The page as a reader cites it: its label, else its number.")
    link: str = Field(description="`zotero://open-pdf/...?page=N` (the PDF at that page), else `zotero://select/...`.")
    text: str = Field(description="The source's words where the quote is (folded).")
    kind: str = Field(description="fulltext | metadata (the abstract) | note | annotation")


class FindQuoteResult(Model):
    """`_zocrates/library/find_quote`: where a quote comes from, exact matches first."""

    quote: str
    matches: list[QuoteMatch]


class LibraryCollectionsParams(Params):
    library: str | None = LibraryFilter


class CollectionInfo(Model):
    model_config = ConfigDict(extra="allow")
    key: str
    name: str
    path: str = Field(description='"Parent / Child".')
    parent_key: str | None
    library: str
    library_name: str
    items: int
    items_with_subcollections: int


class LibraryCollectionsResult(Model):
    """`_zocrates/library/collections`."""

    collections: list[CollectionInfo] = Field(description="Sorted by library then path.")


class LibraryTagsParams(Params):
    library: str | None = LibraryFilter
    limit: int = Field(DEFAULT_LIST, ge=1, le=MAX_LIST)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    contains: str | None = Field(None, max_length=MAX_TAG_FILTER_CHARS, description="Only tags containing this (case-insensitive).")


class TagCount(Model):
    tag: str
    items: int = Field(description="How many items carry it.")


class LibraryTagsResult(Model):
    """`_zocrates/library/tags`: tags by how many items carry them."""

    tags: list[TagCount]
    total: int
    offset: int
    next_offset: int | None


class LibraryItemsParams(Params):
    library: str | None = LibraryFilter
    limit: int = Field(DEFAULT_LIST, ge=1, le=MAX_LIST)
    offset: int = Field(0, ge=0, le=MAX_OFFSET)
    order: Literal["added", "modified"] = Field("added", description="Newest first by date added, or by date modified.")


class LibraryItemsResult(Model):
    """`_zocrates/library/items`: item summaries, newest first."""

    items: list[ItemSummary]
    total: int
    offset: int
    next_offset: int | None


# --- writes into Zotero (zocratesd/writes) --------------------------------------------------------

WriteLibrary = Field("user", pattern=LIBRARY_PATTERN, description='The library written: "user" (My Library) or "groups/<groupID>".')
ItemKeys = Field(min_length=1, max_length=MAX_WRITE_ITEMS, description="Zotero item keys (8 characters A-Z, 0-9).")
WriteId = Field(pattern=WRITE_ID_PATTERN, description="A write's id (as a write method returned it).")


class WriteParams(Params):
    """What every method that proposes a write takes besides the operation. Each subclass makes its
    operation (`operation`): one place for every face that takes these params (JSON-RPC, HTTP)."""

    session_id: str | None = Field(
        None, pattern=SESSION_ID_PATTERN, description="The session the write belongs to (`undo` per session).")
    confirm: bool = Field(False, description=(
        "The person already said yes to this exact write in this client (a terminal's --yes, a card's button): written "
        "without asking again. False: the write waits in `awaiting_consent` for `_zocrates/writes/confirm`, unless "
        "writes.mode is `allow` or its kind was allowed always."))
    library: str = WriteLibrary

    async def operation(self, writes: Writes) -> Operation:
        raise NotImplementedError


class CitationRef(Model):
    key: str = Field(pattern=ITEM_KEY_PATTERN)
    title: str = Field("", max_length=MAX_ITEM_TITLE_CHARS)
    page: str | None = Field(None, max_length=40)
    library: str = WriteLibrary


class SaveNoteParams(WriteParams):
    markdown: str = Field(min_length=1, max_length=MAX_NOTE_CHARS, description="The note, in Markdown (raw HTML is shown as text).")
    parent_item: str | None = Field(None, pattern=ITEM_KEY_PATTERN, description="The paper the note is a child of.")
    collection: str | None = Field(
        None, max_length=MAX_COLLECTION_REF_CHARS, description="A standalone note's collection (key, name or path).")
    citations: list[CitationRef] = Field(default_factory=list, max_length=MAX_WRITE_ITEMS,
                                         description="Sources listed under the note with links that select them in Zotero.")

    async def operation(self, writes: Writes) -> Operation:
        citations = [ops.Citation(c.key, c.title, c.page, c.library) for c in self.citations]
        return await writes.save_note(self.markdown, parent=self.parent_item, collection=self.collection,
                                      citations=citations, library=self.library)


class TagItemsParams(WriteParams):
    item_keys: list[str] = ItemKeys
    tags: list[str] = Field(min_length=1, max_length=MAX_WRITE_TAGS)

    async def operation(self, writes: Writes) -> Operation:
        return ops.tag_items(self.item_keys, self.tags, library=self.library)


class UntagItemsParams(TagItemsParams):
    async def operation(self, writes: Writes) -> Operation:
        return ops.untag_items(self.item_keys, self.tags, library=self.library)


class CollectParams(WriteParams):
    item_keys: list[str] = ItemKeys
    collection: str = Field(max_length=MAX_COLLECTION_REF_CHARS, description='The collection: its key, name or "Parent / Child" path.')

    async def operation(self, writes: Writes) -> Operation:
        return await writes.add_to_collection(self.item_keys, self.collection, library=self.library)


class CreateCollectionParams(WriteParams):
    name: str = Field(min_length=1, max_length=MAX_COLLECTION_NAME_CHARS)
    parent: str | None = Field(None, max_length=MAX_COLLECTION_REF_CHARS, description="The parent collection (key, name or path).")

    async def operation(self, writes: Writes) -> Operation:
        return await writes.create_collection(self.name, parent=self.parent, library=self.library)


class CreatorModel(Model):
    creator_type: str = Field("author", max_length=40)
    first_name: str = Field("", max_length=MAX_ITEM_TITLE_CHARS)
    last_name: str = Field("", max_length=MAX_ITEM_TITLE_CHARS)
    name: str = Field("", max_length=MAX_ITEM_TITLE_CHARS, description="A single-field name (an institution).")


class AddItemParams(WriteParams):
    item_type: str | None = Field(None, max_length=40, description="Zotero's item type (journalArticle, book, ...).")
    title: str | None = Field(None, max_length=MAX_FIELD_CHARS)
    creators: list[CreatorModel] = Field(default_factory=list, max_length=MAX_CREATORS)
    fields: dict[str, str] = Field(
        default_factory=dict, description="Zotero field names and values (date, DOI, url, abstractNote, ...).")
    csl: dict[str, object] | None = Field(
        None, description="The item as CSL-JSON instead of the fields above (what Crossref and citation tools give).")
    doi: str | None = Field(None, max_length=300, description=(
        "Instead of the fields or CSL-JSON: a DOI, whose metadata is looked up at Crossref (only the DOI leaves the "
        "machine; online.mode must not be off)."))
    collection: str | None = Field(None, max_length=MAX_COLLECTION_REF_CHARS, description="A collection to file it in (key, name or path).")

    async def operation(self, writes: Writes) -> Operation:
        fields = None
        if self.item_type or self.title:
            creators = tuple(ops.Creator(c.creator_type, c.first_name, c.last_name, c.name) for c in self.creators)
            fields = ops.ItemFields(self.item_type or "journalArticle", self.title or "", creators, dict(self.fields))
        return await writes.add_item(item=fields, csl=self.csl, doi=self.doi, collection=self.collection, library=self.library)


class WriteIdParams(Params):
    write_id: str = WriteId


class ConfirmWriteParams(WriteIdParams):
    always: bool = Field(False, description="Also write later writes of this kind without asking.")


class UndoWriteParams(Params):
    write_id: str | None = Field(
        None, pattern=WRITE_ID_PATTERN, description="The write to undo; absent: the newest applied one (of `sessionId` when given).")
    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN)


class ListWritesParams(Params):
    pending: bool = Field(False, description="Only writes not yet applied (awaiting consent, or waiting for Zotero).")
    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN)
    limit: int = Field(DEFAULT_LIST, ge=1, le=MAX_LIST)


class WriteResult(Model):
    """A write into Zotero as the journal holds it."""

    model_config = ConfigDict(extra="allow")
    id: str
    kind: str
    state: Literal["awaiting_consent", "queued", "applied", "failed", "discarded", "undone"]
    preview: str = Field(description="What the write does, in words a person can check before saying yes.")
    created_at: str
    updated_at: str
    session_id: str | None
    face: str
    proposed_by: Literal["user", "model"]
    operation: dict[str, object] = Field(description="The operation as recorded (`type` names it).")
    undoes: str | None = None
    undone_by: str | None = None
    path: Literal["plugin", "local_api", "connector"] | None = Field(None, description="How it reached Zotero.")
    created: list[str] | None = Field(None, description="Keys of what it created (a note, an item, a collection).")
    error: str | None = Field(None, description="Why it failed, or (queued) what it waits for.")


class ListWritesResult(Model):
    writes: list[WriteResult]
    waiting_for: str | None = Field(description="Why queued writes are not applied yet (Zotero closed, ...).")


# --- search beyond the library (zocratesd/online) -----------------------------------------------------


class OnlineSearchParams(Params):
    query: str = Field(min_length=1, max_length=MAX_ONLINE_QUERY_CHARS, description="The search terms (only they leave the machine).")
    limit: int = Field(DEFAULT_ONLINE_RESULTS, ge=1, le=MAX_ONLINE_RESULTS, description="Works per provider, at most.")
    year_from: int | None = Field(None, ge=1000, le=2999)
    year_to: int | None = Field(None, ge=1000, le=2999)


class OnlineWorkResult(Model):
    model_config = ConfigDict(extra="allow")
    title: str
    authors: list[str]
    year: int | None
    venue: str | None
    abstract: str | None
    doi: str | None = Field(description="Bare and lower-case: 10.1234/abc.")
    url: str | None
    oa_url: str | None = Field(description="A free full text, when one is known.")
    arxiv_id: str | None
    providers: list[Literal["openalex", "arxiv", "crossref"]]
    in_library: dict[str, str] | None = Field(
        None, description="The library item it is (same DOI, or title and year): {library, item_key, link}.")


class OnlineSearchResult(Model):
    query: str
    works: list[OnlineWorkResult]
    failures: list[str] = Field(description="One line per provider that failed (it says why); the others' works still count.")
    offline: bool = Field(description="No provider could be reached.")
    cached: bool
    message: str | None


# --- notifications ------------------------------------------------------------------------------


class SessionUpdateParams(Model):
    """`session/update` (daemon -> client). `update.sessionUpdate` names the kind; see the README."""

    model_config = ConfigDict(extra="allow")
    sessionId: str
    update: dict[str, Any]


METHODS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "initialize": (InitializeParams, InitializeResult),
    "session/new": (NewSessionParams, NewSessionResult),
    "session/list": (ListSessionsParams, ListSessionsResult),
    "session/load": (LoadSessionParams, LoadSessionResult),
    "session/delete": (DeleteSessionParams, DeleteSessionResult),
    "session/resume": (ResumeSessionParams, ResumeSessionResult),
    "session/close": (CloseSessionParams, CloseSessionResult),
    "session/set_config_option": (SetConfigOptionParams, SetConfigOptionResult),
    "_zocrates/session/get": (GetSessionParams, UiSession),
    "_zocrates/session/rename": (RenameSessionParams, SessionSummary),
    "session/prompt": (PromptParams, PromptResult),
    "_zocrates/session/rewind": (RewindParams, RewindResult),
    "_zocrates/chat/resume": (ChatResumeParams, ChatResumeResult),
    "_zocrates/storage/stats": (NoParams, StorageStatsResult),
    "_zocrates/storage/maintenance": (NoParams, MaintenanceResult),
    "_zocrates/library/status": (LibraryStatusParams, LibraryStatusResult),
    "_zocrates/library/suggestions": (LibrarySuggestionsParams, LibrarySuggestionsResult),
    "_zocrates/library/search": (LibrarySearchParams, LibrarySearchResult),
    "_zocrates/library/item": (LibraryItemParams, LibraryItemResult),
    "_zocrates/library/find_quote": (FindQuoteParams, FindQuoteResult),
    "_zocrates/library/collections": (LibraryCollectionsParams, LibraryCollectionsResult),
    "_zocrates/library/tags": (LibraryTagsParams, LibraryTagsResult),
    "_zocrates/library/items": (LibraryItemsParams, LibraryItemsResult),
    "_zocrates/citations/export": (ExportCitationsParams, ExportCitationsResult),
    "_zocrates/writes/save_note": (SaveNoteParams, WriteResult),
    "_zocrates/writes/tag": (TagItemsParams, WriteResult),
    "_zocrates/writes/untag": (UntagItemsParams, WriteResult),
    "_zocrates/writes/add_to_collection": (CollectParams, WriteResult),
    "_zocrates/writes/create_collection": (CreateCollectionParams, WriteResult),
    "_zocrates/writes/add_item": (AddItemParams, WriteResult),
    "_zocrates/writes/confirm": (ConfirmWriteParams, WriteResult),
    "_zocrates/writes/discard": (WriteIdParams, WriteResult),
    "_zocrates/writes/undo": (UndoWriteParams, WriteResult),
    "_zocrates/writes/get": (WriteIdParams, WriteResult),
    "_zocrates/writes/list": (ListWritesParams, ListWritesResult),
    "_zocrates/online/search": (OnlineSearchParams, OnlineSearchResult),
}
NOTIFICATIONS: dict[str, type[BaseModel]] = {"session/update": SessionUpdateParams, "session/cancel": CancelParams}


# --- requests from the daemon (daemon -> client) -------------------------------------------------
# Not in protocol/schema/ (which holds what the daemon accepts and answers); documented in
# protocol/README.md ("Requests from the daemon"), and tests check what the daemon sends, and the
# README's examples, against these models.


class PermissionOption(Model):
    model_config = ConfigDict(extra="allow")
    optionId: str
    name: str
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class CheckpointToolCall(Model):
    """The research checkpoint asked about: the `tool_call` the turn streamed just before."""

    model_config = ConfigDict(extra="allow")
    toolCallId: str = Field(description="`<interrupt_id>@<invocation_id>` (rpc/updates.py, checkpoint_call_id).")
    title: str
    kind: Literal["think"]
    status: Literal["pending"]
    rawInput: Any


class RequestPermissionParams(Model):
    """`session/request_permission`: a research checkpoint, put to the connection that prompted."""

    model_config = ConfigDict(extra="allow")
    sessionId: str
    toolCall: CheckpointToolCall
    options: list[PermissionOption] = Field(min_length=1)


class SelectedOutcome(Model):
    model_config = ConfigDict(extra="allow")
    outcome: Literal["selected"]
    optionId: str


class CancelledOutcome(Model):
    model_config = ConfigDict(extra="allow")
    outcome: Literal["cancelled"]


class RequestPermissionResult(Model):
    """The client's answer; `_meta.zocrates.guidance` (text) may go with `extend`."""

    model_config = ConfigDict(extra="allow")
    outcome: SelectedOutcome | CancelledOutcome = Field(discriminator="outcome")
    meta: dict[str, Any] | None = Field(None, alias="_meta")


class ElicitationParams(Model):
    """`elicitation/create` (form mode): a research checkpoint, put to a prompting connection whose
    client advertised `elicitation.form`, instead of `session/request_permission`."""

    model_config = ConfigDict(extra="allow")
    sessionId: str
    toolCallId: str = Field(description="The checkpoint's tool call, as for session/request_permission.")
    mode: Literal["form"]
    message: str
    requestedSchema: dict[str, Any] = Field(
        description='`{"type": "object", "properties": {"action": enum "extend"|"synthesize", "guidance": string}, '
        '"required": ["action"]}`'
    )


class ElicitationResult(Model):
    """`accept` with `content.action` ("extend" or "synthesize") and optional `content.guidance`;
    `decline` or `cancel` leave the checkpoint pending (the turn ends as cancelled)."""

    model_config = ConfigDict(extra="allow")
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


DAEMON_REQUESTS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "session/request_permission": (RequestPermissionParams, RequestPermissionResult),
    "elicitation/create": (ElicitationParams, ElicitationResult),
}
