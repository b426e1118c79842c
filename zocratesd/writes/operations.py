"""What zocratesd can write into Zotero: one typed struct per operation, as the journal stores it
and every face proposes it.

Each operation names the Zotero library it writes (`user` or `groups/N`) and what it touches by
Zotero keys. Creations carry the key the new object will have, chosen when the write is proposed:
applying the same write twice (a retry after a crash between Zotero's answer and the journal's
record) then reaches the same object instead of making a second one, and a write proposed with it
(file the papers in the collection being created) can name it before it exists. Where Zotero
chooses the key itself (its local API), the write records the key Zotero gave, and the writes that
name the chosen one are applied with Zotero's (`with_given_keys`).

`Retag`, `RemoveFromCollection` and `Trash`, the inverses, are operations too: an undo is a write like any other,
recorded, applied through the same path.
"""

from __future__ import annotations

import secrets
from typing import Literal, TypeAlias

import msgspec

from zocratesd.errors import InvalidInput
from zocratesd.limits import (
    ITEM_KEY_RE,
    LIBRARY_RE,
    MAX_COLLECTION_NAME_CHARS,
    MAX_CREATORS,
    MAX_FIELD_CHARS,
    MAX_NOTE_CHARS,
    MAX_TAG_CHARS,
    MAX_WRITE_ITEMS,
    MAX_WRITE_TAGS,
)

# Zotero's key alphabet (Zotero.DataObjectUtilities.generateKey: no 0, 1, I, O, so keys read aloud unambiguously).
KEY_ALPHABET = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"
KEY_LENGTH = 8


def new_key() -> str:
    """A fresh Zotero object key, drawn as Zotero draws its own."""
    return "".join(secrets.choice(KEY_ALPHABET) for _ in range(KEY_LENGTH))


class Citation(msgspec.Struct, frozen=True):
    """A source an answer cites: the note lists it with a link that selects it in Zotero."""

    key: str
    title: str = ""
    page: str | None = None
    library: str = "user"


class Creator(msgspec.Struct, frozen=True):
    creator_type: str = "author"
    first_name: str = ""
    last_name: str = ""
    name: str = ""  # a single-field name (an institution)


class ItemFields(msgspec.Struct, frozen=True):
    """A new item's metadata, in Zotero's own item type and field names."""

    item_type: str
    title: str
    creators: tuple[Creator, ...] = ()
    fields: dict[str, str] = {}  # date, DOI, url, abstractNote, publicationTitle, volume, issue, pages, ...


class SaveNote(msgspec.Struct, frozen=True, tag="save_note"):
    """A note (Markdown, rendered to Zotero's note HTML) on `parent`, or standalone (in `collection`)."""

    markdown: str
    new_key: str
    parent: str | None = None
    collection: str | None = None
    citations: tuple[Citation, ...] = ()
    library: str = "user"


class TagItems(msgspec.Struct, frozen=True, tag="tag_items"):
    items: tuple[str, ...]
    tags: tuple[str, ...]
    library: str = "user"


class UntagItems(msgspec.Struct, frozen=True, tag="untag_items"):
    items: tuple[str, ...]
    tags: tuple[str, ...]
    library: str = "user"


class AddToCollection(msgspec.Struct, frozen=True, tag="add_to_collection"):
    items: tuple[str, ...]
    collection: str
    library: str = "user"


class RemoveFromCollection(msgspec.Struct, frozen=True, tag="remove_from_collection"):
    """Only as an undo: take items out of a collection they were added to."""

    items: tuple[str, ...]
    collection: str
    library: str = "user"


class CreateCollection(msgspec.Struct, frozen=True, tag="create_collection"):
    name: str
    new_key: str
    parent: str | None = None
    library: str = "user"


class AddItem(msgspec.Struct, frozen=True, tag="add_item"):
    item: ItemFields
    new_key: str
    collection: str | None = None
    library: str = "user"


class Retag(msgspec.Struct, frozen=True, tag="retag"):
    """Only as an undo: per item, the tags to put back and the tags to take off again."""

    add: dict[str, tuple[str, ...]] = {}
    remove: dict[str, tuple[str, ...]] = {}
    library: str = "user"


class Trash(msgspec.Struct, frozen=True, tag="trash"):
    """Only as an undo: move what a write created to Zotero's trash (the user can restore it there)."""

    items: tuple[str, ...] = ()
    collections: tuple[str, ...] = ()
    library: str = "user"


Operation: TypeAlias = (
    SaveNote | TagItems | UntagItems | AddToCollection | RemoveFromCollection | CreateCollection | AddItem | Retag | Trash
)
# The kinds a user or a model may propose; the others exist only as undos.
Kind = Literal["save_note", "tag_items", "untag_items", "add_to_collection", "create_collection", "add_item"]
PROPOSABLE: tuple[Kind, ...] = ("save_note", "tag_items", "untag_items", "add_to_collection", "create_collection", "add_item")

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Operation)


def kind_of(op: Operation) -> str:
    return type(op).__struct_config__.tag  # type: ignore[return-value]


def encode(op: Operation) -> bytes:
    return _encoder.encode(op)


def decode(raw: bytes | str) -> Operation:
    return _decoder.decode(raw)


def item_keys(op: Operation) -> tuple[str, ...]:
    """The existing items the operation touches (not the ones it creates)."""
    match op:
        case TagItems() | UntagItems() | AddToCollection() | RemoveFromCollection() | Trash():
            return op.items
        case Retag():
            return tuple(dict.fromkeys([*op.add, *op.remove]))
        case SaveNote():
            return (op.parent,) if op.parent else ()
        case CreateCollection() | AddItem():
            return ()


# --- checks: every face's input passes these before an operation exists ---------------------------


def _key(value: str, what: str) -> str:
    if not isinstance(value, str) or not ITEM_KEY_RE.match(value):
        raise InvalidInput(f"{what} must be a Zotero key: 8 characters, A-Z and 0-9 (got {str(value)[:40]!r})")
    return value


def _library(value: str) -> str:
    if not LIBRARY_RE.match(value):
        raise InvalidInput(f"library must be 'user' or 'groups/N' (got {value[:40]!r})")
    return value


def _items(keys: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    unique = tuple(dict.fromkeys(_key(k, "each item") for k in keys))
    if not unique:
        raise InvalidInput("name at least one item")
    if len(unique) > MAX_WRITE_ITEMS:
        raise InvalidInput(f"at most {MAX_WRITE_ITEMS} items per write (got {len(unique)}); split it")
    return unique


def _tags(tags: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    clean = []
    for tag in tags:
        text = " ".join(str(tag).split())
        if not text:
            raise InvalidInput("a tag cannot be empty")
        if len(text) > MAX_TAG_CHARS:
            raise InvalidInput(f"a tag is at most {MAX_TAG_CHARS} characters (got {len(text)})")
        clean.append(text)
    unique = tuple(dict.fromkeys(clean))
    if not unique:
        raise InvalidInput("name at least one tag")
    if len(unique) > MAX_WRITE_TAGS:
        raise InvalidInput(f"at most {MAX_WRITE_TAGS} tags per write (got {len(unique)})")
    return unique


def save_note(
    markdown: str, *, parent: str | None = None, collection: str | None = None,
    citations: tuple[Citation, ...] = (), library: str = "user",
) -> SaveNote:
    if not isinstance(markdown, str) or not markdown.strip():
        raise InvalidInput("the note is empty")
    if len(markdown) > MAX_NOTE_CHARS:
        raise InvalidInput(f"a note is at most {MAX_NOTE_CHARS} characters (got {len(markdown)})")
    if parent and collection:
        raise InvalidInput("a note goes on a paper (parent) or into a collection, not both: Zotero files a child note with its paper")
    for c in citations:
        _key(c.key, "a citation")
        _library(c.library)
    return SaveNote(markdown, new_key(), parent and _key(parent, "parent"), collection and _key(collection, "collection"),
                    tuple(citations), _library(library))


def tag_items(items: list[str] | tuple[str, ...], tags: list[str] | tuple[str, ...], *, library: str = "user") -> TagItems:
    return TagItems(_items(items), _tags(tags), _library(library))


def untag_items(items: list[str] | tuple[str, ...], tags: list[str] | tuple[str, ...], *, library: str = "user") -> UntagItems:
    return UntagItems(_items(items), _tags(tags), _library(library))


def add_to_collection(items: list[str] | tuple[str, ...], collection: str, *, library: str = "user") -> AddToCollection:
    return AddToCollection(_items(items), _key(collection, "collection"), _library(library))


def create_collection(name: str, *, parent: str | None = None, library: str = "user") -> CreateCollection:
    text = " ".join(str(name).split())
    if not text:
        raise InvalidInput("name the collection")
    if len(text) > MAX_COLLECTION_NAME_CHARS:
        raise InvalidInput(f"a collection's name is at most {MAX_COLLECTION_NAME_CHARS} characters")
    return CreateCollection(text, new_key(), parent and _key(parent, "parent collection"), _library(library))


def add_item(item: ItemFields, *, collection: str | None = None, library: str = "user") -> AddItem:
    if not item.title.strip():
        raise InvalidInput("a new item needs a title")
    if len(item.creators) > MAX_CREATORS:
        raise InvalidInput(f"at most {MAX_CREATORS} creators")
    for name, value in item.fields.items():
        if len(value) > MAX_FIELD_CHARS:
            raise InvalidInput(f"the field {name} is longer than {MAX_FIELD_CHARS} characters")
    return AddItem(item, new_key(), collection and _key(collection, "collection"), _library(library))


class Change(msgspec.Struct, frozen=True):
    """What applying a write changed, read from Zotero before it was sent: only this is undone.
    A tag an item already had, or a collection it was already in, is left alone by the undo."""

    tags_added: dict[str, tuple[str, ...]] = {}
    tags_removed: dict[str, tuple[str, ...]] = {}
    collection_added: tuple[str, ...] = ()
    created_items: tuple[str, ...] = ()
    created_collections: tuple[str, ...] = ()
    # Zotero's library version when a creation was planned, where Zotero chooses the new object's key
    # (its local API): a retry looks only at what changed after it for what an earlier attempt made.
    library_version: int | None = None


# The fields by which an operation names existing objects (not the key it gives a new one).
_REFERENCES = ("items", "collection", "parent")


def with_given_keys(op: Operation, given: dict[str, str]) -> Operation:
    """`op` naming, instead of the key another write chose for an object it created, the key Zotero
    gave that object (`given`: chosen key to Zotero's), where the two differ."""
    changes: dict[str, object] = {}
    for name in _REFERENCES:
        value = getattr(op, name, None)
        if isinstance(value, str) and value in given:
            changes[name] = given[value]
        elif isinstance(value, tuple) and any(v in given for v in value):
            changes[name] = tuple(given.get(v, v) for v in value)
    return msgspec.structs.replace(op, **changes) if changes else op


def inverse(op: Operation, change: Change) -> Operation | None:
    """The write that undoes `op` given what it changed; None when it changed nothing."""
    match op:
        case TagItems() | UntagItems() | Retag():
            if not change.tags_added and not change.tags_removed:
                return None
            return Retag(add=change.tags_removed, remove=change.tags_added, library=op.library)
        case AddToCollection():
            return RemoveFromCollection(change.collection_added, op.collection, op.library) if change.collection_added else None
        case RemoveFromCollection():
            return AddToCollection(op.items, op.collection, op.library)
        case SaveNote() | AddItem() | CreateCollection():
            if not change.created_items and not change.created_collections:
                return None
            return Trash(change.created_items, change.created_collections, op.library)
        case Trash():
            return None


def note_title(markdown: str) -> str:
    """What Zotero shows as a note's title: its first line of text."""
    for line in markdown.splitlines():
        text = line.strip().lstrip("#>-*+ ").strip()
        if text:
            return text[:120]
    return ""
