"""The MCP tools' arguments: pydantic models whose constraints are the wire's.

Each argument that maps onto a daemon call's parameter takes that parameter's constraints, default
and description from its params model in rpc/models.py (`wire`), and the rest from limits.py, so
a limit is declared once. The tools' `inputSchema`s are generated from these models (`input_schema`)
and arguments are validated by them (`parse`); tool argument names are snake_case, as MCP tools'
commonly are, where the daemon's are camelCase.

The SDK's low-level server does not validate arguments: `parse` does, and words its refusal as a
tool error naming the argument, in JSON Schema's terms (the schema the client was shown).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import CoreSchema, ErrorDetails

from zocratesd.limits import ITEM_KEY_PATTERN, MAX_CREATORS, MAX_EXPORT_ITEMS, MAX_PROMPT_CHARS, MAX_WRITE_ITEMS, SESSION_ID_PATTERN
from zocratesd.logtext import escape_for_log
from zocratesd.rpc.models import (
    AddItemParams,
    CitationRef,
    CollectParams,
    ConfirmWriteParams,
    CreateCollectionParams,
    ExportCitationsParams,
    FindQuoteParams,
    LibraryCollectionsParams,
    LibraryItemParams,
    LibraryItemsParams,
    LibrarySearchParams,
    LibraryTagsParams,
    ListWritesParams,
    OnlineSearchParams,
    RenameSessionParams,
    ResumeAnswer,
    SaveNoteParams,
    TagItemsParams,
    UndoWriteParams,
)

# A page of list_tags or recent_items: a screenful for a model, smaller than the daemon's default.
DEFAULT_PAGE: Final = 20
# How much of a refusal's wording a tool error carries, and of the bad value it quotes: short
# enough that what is wrong with a long value (a pasted page) still fits after it.
MAX_ERROR_CHARS: Final = 300
MAX_SHOWN_CHARS: Final = 100


def wire(model: type[BaseModel], name: str, **change: Any) -> Any:
    """Parameter `name` of the wire model `model` as a tool argument: its constraints, default and
    description (`change` overrides the last two), without its camelCase wire alias."""
    info = model.model_fields[name]
    field = Field(change.pop("default", info.default), description=change.pop("description", info.description))
    if change:
        raise TypeError(f"wire() changes only default and description, not {sorted(change)}")
    field.metadata.extend(info.metadata)
    return field


# An item key inside a list (the wire's item-key lists check each key in the core).
ItemKey = Annotated[str, StringConstraints(pattern=ITEM_KEY_PATTERN), Field(description="A Zotero item key (8 characters A-Z, 0-9).")]
SessionId = Annotated[str, StringConstraints(pattern=SESSION_ID_PATTERN)]
SESSION_ID: Final = "A Zocrates session id (from ask or sessions)."
LIBRARY: Final = 'Only this library: "user" (My Library) or "groups/<groupID>" (a group library). Default: every library.'
COLLECTION: Final = 'A collection: its key, its name, or its "Parent / Child" path (subcollections included).'


class Args(BaseModel):
    """A tool's arguments: no unknown ones, no coercion (a "3" is not a number)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SearchLibraryArgs(Args):
    query: str = wire(LibrarySearchParams, "query")
    collection: str | None = wire(LibrarySearchParams, "collection", description=COLLECTION)
    item_keys: list[ItemKey] | None = wire(LibrarySearchParams, "item_keys", description="Only these items.")
    library: str | None = wire(LibrarySearchParams, "library", description=LIBRARY)
    top_k: int = wire(LibrarySearchParams, "top_k", description="How many passages.")


class GetItemArgs(Args):
    item_key: str = wire(LibraryItemParams, "item_key")
    library: str | None = wire(LibraryItemParams, "library", description=LIBRARY)
    fulltext: bool = wire(LibraryItemParams, "fulltext", description="Include a page of the full text.")
    fulltext_offset: int = wire(LibraryItemParams, "fulltext_offset",
                                description="Where the page starts (the previous page's next_offset).")


class FindQuoteArgs(Args):
    quote: str = wire(FindQuoteParams, "quote")
    library: str | None = wire(FindQuoteParams, "library", description=LIBRARY)
    limit: int = wire(FindQuoteParams, "limit")


class ListCollectionsArgs(Args):
    library: str | None = wire(LibraryCollectionsParams, "library", description=LIBRARY)


class ListTagsArgs(Args):
    library: str | None = wire(LibraryTagsParams, "library", description=LIBRARY)
    contains: str | None = wire(LibraryTagsParams, "contains")
    limit: int = wire(LibraryTagsParams, "limit", default=DEFAULT_PAGE)
    offset: int = wire(LibraryTagsParams, "offset")


class RecentItemsArgs(Args):
    library: str | None = wire(LibraryItemsParams, "library", description=LIBRARY)
    order: Literal["added", "modified"] = wire(LibraryItemsParams, "order")
    limit: int = wire(LibraryItemsParams, "limit", default=DEFAULT_PAGE)
    offset: int = wire(LibraryItemsParams, "offset")


class AskArgs(Args):
    question: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    session_id: SessionId | None = Field(None, description=SESSION_ID)
    collection: str | None = wire(LibrarySearchParams, "collection", description=COLLECTION)
    item_keys: list[ItemKey] | None = wire(LibrarySearchParams, "item_keys", description="Only these items.")
    library: str | None = wire(LibrarySearchParams, "library", description=LIBRARY)
    online: bool | None = Field(None, description=(
        "true: the user allows this question to search beyond their library (OpenAlex, arXiv, Crossref; only the "
        "search terms leave the machine), which online.mode = ask needs; false: their library only; absent: online.mode."))
    citation_style: Literal["numbered", "author-year", "pandoc"] | None = Field(None, description=(
        "How the answer cites, from now on in this session: numbered [1]; author-year (Lewis et al., 2020); pandoc "
        "[@citationkey] for Markdown and LaTeX writers. Absent: as the session does (numbered unless changed)."))


class ResumeArgs(Args):
    session_id: SessionId = Field(description=SESSION_ID)
    # The checkpoint's answers as a user says them; the wire's are extend_budget, synthesize and search_online.
    action: Literal["extend", "synthesize", "search_online"]
    guidance: str | None = wire(ResumeAnswer, "guidance", description="What to search for next (extend only).")


class SessionsArgs(Args):
    action: Literal["list", "show", "rename", "delete"]
    session_id: SessionId | None = Field(None, description=SESSION_ID)
    title: str | None = wire(RenameSessionParams, "title", default=None, description="The new title (rename).")


# --- writes into Zotero: each tool's arguments are its daemon method's, snake_case ------------------

WRITE_LIBRARY: Final = 'The library written: "user" (My Library, the default) or "groups/<groupID>".'


class CitationArg(Args):
    key: ItemKey
    title: str = wire(CitationRef, "title")
    page: str | None = wire(CitationRef, "page", description="The page label cited.")


class SaveNoteArgs(Args):
    markdown: str = wire(SaveNoteParams, "markdown")
    parent_item: str | None = wire(SaveNoteParams, "parent_item")
    collection: str | None = wire(SaveNoteParams, "collection")
    citations: list[CitationArg] = Field(default_factory=list, max_length=MAX_WRITE_ITEMS,
                                         description="Sources to list under the note, with links that select them in Zotero.")
    library: str = wire(SaveNoteParams, "library", description=WRITE_LIBRARY)


class TagItemsArgs(Args):
    item_keys: list[ItemKey] = wire(TagItemsParams, "item_keys")
    tags: list[str] = wire(TagItemsParams, "tags")
    library: str = wire(TagItemsParams, "library", description=WRITE_LIBRARY)


class AddToCollectionArgs(Args):
    item_keys: list[ItemKey] = wire(CollectParams, "item_keys")
    collection: str = wire(CollectParams, "collection")
    library: str = wire(CollectParams, "library", description=WRITE_LIBRARY)


class CreateCollectionArgs(Args):
    name: str = wire(CreateCollectionParams, "name")
    parent: str | None = wire(CreateCollectionParams, "parent")
    library: str = wire(CreateCollectionParams, "library", description=WRITE_LIBRARY)


class AddItemArgs(Args):
    item_type: str | None = wire(AddItemParams, "item_type")
    title: str | None = wire(AddItemParams, "title")
    creators: list[dict[str, str]] = Field(
        default_factory=list, max_length=MAX_CREATORS,
        description='Each {"creator_type": "author", "first_name": ..., "last_name": ...} or {"name": ...} for an institution.')
    fields: dict[str, str] = Field(default_factory=dict, description=AddItemParams.model_fields["fields"].description)
    csl: dict[str, object] | None = wire(AddItemParams, "csl")
    doi: str | None = wire(AddItemParams, "doi")
    collection: str | None = wire(AddItemParams, "collection")
    library: str = wire(AddItemParams, "library", description=WRITE_LIBRARY)


class ListWritesArgs(Args):
    pending: bool = wire(ListWritesParams, "pending", default=True)
    session_id: SessionId | None = Field(None, description="Only this Zocrates session's writes.")
    limit: int = wire(ListWritesParams, "limit", default=DEFAULT_PAGE)


class ExportCitationsArgs(Args):
    session_id: SessionId | None = Field(None, description="The Zocrates session whose answers' cited sources are exported.")
    invocation_id: str | None = wire(ExportCitationsParams, "invocation_id")
    item_keys: list[ItemKey] | None = Field(None, max_length=MAX_EXPORT_ITEMS, description="Items to export (My Library's) "
                                            "besides, or instead of, a session's sources.")
    format: Literal["bibtex", "biblatex", "csl-json", "text"] = wire(ExportCitationsParams, "format")
    style: str | None = wire(ExportCitationsParams, "style")


class SearchOnlineArgs(Args):
    query: str = wire(OnlineSearchParams, "query")
    limit: int = wire(OnlineSearchParams, "limit")
    year_from: int | None = wire(OnlineSearchParams, "year_from")
    year_to: int | None = wire(OnlineSearchParams, "year_to")


class UndoArgs(Args):
    write_id: str | None = wire(UndoWriteParams, "write_id", description="The write to undo; absent: the newest applied one.")


class ConfirmWriteArgs(Args):
    write_id: str = wire(ConfirmWriteParams, "write_id")
    decision: Literal["write", "discard"] = Field(description="write: the user agreed to the preview; discard: they did not.")


class _ToolSchema(GenerateJsonSchema):
    """JSON Schema as MCP clients take it: an optional argument is one that may be left out, not
    a null (clients that map tool schemas onto a one-type dialect refuse `anyOf` with null), and
    no generated titles."""

    def nullable_schema(self, schema: CoreSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def input_schema(model: type[Args]) -> dict[str, Any]:
    """A tool's `inputSchema`, generated from its arguments' model."""
    schema = model.model_json_schema(schema_generator=_ToolSchema)
    schema.pop("title", None)
    schema.pop("description", None)
    for prop in schema.get("properties", {}).values():
        if prop.get("default", 0) is None:
            del prop["default"]
    return schema


A = TypeVar("A", bound=Args)


class BadArguments(Exception):
    """Arguments a tool's model refused; the message names the argument and what is wrong."""


def parse(model: type[A], tool: str, arguments: dict[str, Any]) -> A:
    """`arguments` as `model`; BadArguments (the first problem, by argument name) otherwise."""
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        first = min(exc.errors(include_url=False), key=lambda e: [str(p) for p in e["loc"]])
        where = "arguments" if first["type"] in ("missing", "extra_forbidden") else ".".join(map(str, first["loc"]))
        raise BadArguments(f"invalid arguments for {tool}: {where}: {escape_for_log(_wording(first))[:MAX_ERROR_CHARS]}") from None


# pydantic's type errors, as the JSON Schema type the tool's schema names.
_JSON_TYPES: Final = {"string_type": "string", "int_type": "integer", "bool_type": "boolean", "list_type": "array",
                      "dict_type": "object", "model_type": "object"}


def _wording(error: ErrorDetails) -> str:
    """A refusal in the words of the JSON Schema keyword it broke (as jsonschema words them)."""
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    shown = repr(value)
    if len(shown) > MAX_SHOWN_CHARS:
        shown = shown[: MAX_SHOWN_CHARS - 3] + "..."
    name = repr(error["loc"][-1]) if error["loc"] else "arguments"
    wording = {
        "missing": f"{name} is a required property",
        "extra_forbidden": f"Additional properties are not allowed ({name} was unexpected)",
        "less_than_equal": f"{shown} is greater than the maximum of {ctx.get('le')}",
        "greater_than_equal": f"{shown} is less than the minimum of {ctx.get('ge')}",
        "string_too_short": f"{shown} is too short",
        "string_too_long": f"{shown} is too long",
        "too_short": f"{shown} is too short",
        "too_long": f"{shown} is too long",
        "string_pattern_mismatch": f"{shown} does not match {ctx.get('pattern')!r}",
        "literal_error": f"{shown} is not one of {ctx.get('expected')}",
    }.get(kind)
    if wording is None and kind in _JSON_TYPES:
        wording = f"{shown} is not of type {_JSON_TYPES[kind]!r}"
    return wording or error["msg"]
