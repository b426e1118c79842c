"""Slash commands: a prompt whose text starts with `/NAME` (ACP's slash commands) runs a command
instead of a turn. The commands are plain calls on the core, so any face may offer them; the ACP
face advertises `COMMANDS` with `available_commands_update` and answers with `run()`'s text.

A command is not a turn: nothing of it is stored in the conversation (its effect is: a setting,
a compaction, a rewind). Text that starts with `/` but names no command is an ordinary prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from zocratesd.core.session_config import (
    CITATION_STYLE,
    COLLECTION_PREFIX,
    COMPACTION,
    LIBRARY,
    PAPERS,
    RESEARCH_BUDGET,
    SCOPE,
    SessionSettings,
)
from zocratesd.errors import InvalidInput, NotFound
from zocratesd.limits import ITEM_URI
from zocratesd.writes import operations as ops

if TYPE_CHECKING:
    from zocratesd.core.daemon import Daemon


class Command(msgspec.Struct, frozen=True):
    name: str
    description: str
    hint: str | None = None  # what to type after it, for a command that takes input


COMMANDS = (
    Command("library", "Search the whole library from now on"),
    Command("collection", "Search one collection (and its subcollections) from now on", "collection name"),
    Command("papers", "Search the papers the last prompt linked, from now on"),
    Command("research", "Search rounds per turn before a research checkpoint", "rounds, 1-10"),
    Command("compact", "Summarise the older turns now"),
    Command("rewind", "Undo the last turn"),
    Command("status", "The library index and the session store"),
    Command("note", "Save the last answer into Zotero as a note (on the paper it cites, when it cites one)"),
    Command("tag", "Tag the papers the last answer cited", "tag"),
    Command("undo", "Undo this session's last write into Zotero"),
    Command("writes", "This session's writes into Zotero that wait for your consent or for Zotero"),
    Command("bib", "The bibliography of what this session cited", "bibtex | biblatex | csl-json | text [STYLE]"),
    Command("cite", "How answers cite from now on", "numbered | author-year | pandoc"),
)
# The commands that propose a write: the face asks the person before it is made (rpc/agent.py).
WRITE_COMMANDS = frozenset({"note", "tag"})
_CITED_RE = re.compile(ITEM_URI)
_BY_NAME = {c.name: c for c in COMMANDS}
_COMMAND_RE = re.compile(r"^\s*/([a-z][a-z_-]*)(?:\s+(.*))?$", re.DOTALL)


def parse(text: str) -> tuple[str, str] | None:
    """`(name, argument)` when the prompt is one of our commands; None for an ordinary prompt."""
    m = _COMMAND_RE.match(text)
    if m is None or m.group(1) not in _BY_NAME:
        return None
    return m.group(1), (m.group(2) or "").strip()


async def run(daemon: Daemon, session_id: str, name: str, arg: str) -> str:
    """Run a command on a session; the text to show the user. Errors are the core's own
    (InvalidInput with what to type instead, SessionBusy, SessionNotFound)."""
    if name == "library":
        await daemon.set_config_option(session_id, SCOPE, LIBRARY)
        return "Scope: the whole library."
    if name == "papers":
        await daemon.set_config_option(session_id, SCOPE, PAPERS)
        return "Scope: the papers the last prompt linked (link papers to a prompt to change them)."
    if name == "collection":
        key = await daemon.session_config.find_collection(arg)
        await daemon.set_config_option(session_id, SCOPE, f"{COLLECTION_PREFIX}{key}")
        names = await daemon.session_config.collection_names()
        return f"Scope: the collection {names.get(key, key)} and its subcollections."
    if name in _SETTING_COMMANDS:
        return await _show_or_set(daemon, session_id, name, arg)
    if name == "compact":
        done = await daemon.compact_now(session_id)
        if done["compacted"]:
            return f"Compacted: older turns are summarised ({done['turns']} turns in the session)."
        return "Nothing to compact yet: the recent turns are kept as they are."
    if name == "rewind":
        return await _rewind_last(daemon, session_id)
    if name == "status":
        return await _status(daemon, session_id)
    if name == "bib":
        fmt, _, style = arg.partition(" ")
        done = await daemon.export_citations(session_id=session_id, format=fmt.strip() or "bibtex",
                                             style=style.strip() or None)
        missing = done["missing"] if isinstance(done["missing"], list) else []
        return f"{done['text']}\n({len(missing)} cited items are no longer in the library)" if missing else str(done["text"])
    if name in ("note", "tag", "undo", "writes"):
        return await _write_command(daemon, session_id, name, arg)
    raise InvalidInput(f"unknown command /{name}")  # pragma: no cover - parse() admits only COMMANDS


# The commands that show a setting (no argument) or set it: the setting, what is said of its value
# and of a new one.
_SETTING_COMMANDS: dict[str, tuple[str, Callable[[SessionSettings], str], Callable[[str], str]]] = {
    "research": (RESEARCH_BUDGET, lambda s: f"Research budget: {s.research_budget} rounds per turn. Change it with /research N.",
                 lambda v: f"Research budget: {int(v)} round{'s' if int(v) > 1 else ''} per turn."),
    "cite": (CITATION_STYLE, lambda s: f"Citation style: {s.citation_style}. Change it with /cite numbered, author-year or pandoc.",
             lambda v: f"Citation style: {v}."),
}


async def _show_or_set(daemon: Daemon, session_id: str, name: str, arg: str) -> str:
    config_id, shown, done = _SETTING_COMMANDS[name]
    if not arg:
        return shown(await daemon.session_config.settings(session_id))
    await daemon.set_config_option(session_id, config_id, arg)
    return done(arg)


async def _rewind_last(daemon: Daemon, session_id: str) -> str:
    live = await daemon.live_session(session_id)
    last = next(
        (ev for ev in reversed(live.live) if ev.get("author") == "user" and ev.get("invocation_id")
         and any(p.get("text") for p in ((ev.get("content") or {}).get("parts") or ()))),
        None,
    )
    if last is None:
        raise NotFound("this session has no turn to rewind", sessionId=session_id)
    done = await daemon.turns.rewind(session_id, last["invocation_id"])
    asked = " ".join(done.restored.text.split())
    shown = asked if len(asked) <= 80 else asked[:79] + "…"
    return (f"Rewound the last turn (\u201c{shown}\u201d). The editor still shows it; "
            "load the session again to see the conversation without it.")


async def _last_answer(daemon: Daemon, session_id: str) -> tuple[str, list[tuple[str, str]]]:
    """The session's last answer and the items it cites (library, key), in order."""
    view = await daemon.get_session(session_id)
    answer = next((m["text"] for m in reversed(view["messages"]) if m["role"] == "assistant" and m["text"].strip()), None)
    if answer is None:
        raise InvalidInput("there is no answer in this session yet")
    cited = list(dict.fromkeys((lib if lib != "library" else "user", key) for lib, key in _CITED_RE.findall(answer)))
    return answer, cited


async def _write_command(daemon: Daemon, session_id: str, name: str, arg: str) -> str:
    writes = daemon.writes
    if name == "undo":
        done = await writes.undo(session_id=session_id, face="slash-command")
        return f"Undone: {done.preview.removeprefix('Undo ')}" if done.state == "applied" else f"Undo {done.state}: {done.error or ''}"
    if name == "writes":
        pending = await writes.list(pending=True, session_id=session_id)
        if not pending:
            return "No write into Zotero is waiting in this session."
        return "\n".join(f"{r.id} ({r.state.replace('_', ' ')}): {r.preview.splitlines()[0]}" for r in pending)
    answer, cited = await _last_answer(daemon, session_id)
    op: ops.Operation
    if name == "note":
        parents = {key for _, key in cited}
        op = await writes.save_note(answer, parent=next(iter(parents)) if len(parents) == 1 else None,
                                    library=cited[0][0] if cited else "user")
    else:
        if not arg:
            raise InvalidInput("name the tag: /tag NAME")
        if not cited:
            raise InvalidInput("the last answer cites no paper to tag")
        op = ops.tag_items([key for _, key in cited], [arg], library=cited[0][0])
    record = await writes.propose(op, session_id=session_id, face="slash-command")
    if record.state == "awaiting_consent":
        return f"Proposed ({record.id}): {record.preview.splitlines()[0]}"
    return f"{record.state.capitalize()} ({record.id}): {record.preview.splitlines()[0]}"


async def _status(daemon: Daemon, session_id: str) -> str:
    lib = daemon.library_status()
    stats = await daemon.storage_stats()
    settings = await daemon.session_config.settings(session_id)
    options = {o.id: o for o in await daemon.session_config.options(settings)}
    scope = options[SCOPE]
    scope_name = next((c.name for c in scope.choices if c.value == scope.current), str(scope.current))
    lines = [
        f"Library: {lib.get('state')}, {lib.get('items_indexed', 0)} items indexed "
        f"({lib.get('chunks_indexed', 0)} passages, {lib.get('collections', 0)} collections)"
        + (f"; {lib['message']}" if lib.get("message") else ""),
        f"Storage: {stats['session_count']} sessions, {stats['event_count']} events, "
        f"{(stats['db_size_bytes'] + stats['wal_size_bytes']) / 1_048_576:.1f} MiB in {stats['db_path']}",
        f"This session: scope {scope_name}; model {settings.model}; research budget {settings.research_budget}; "
        f"compaction {'on' if options[COMPACTION].current else 'off'}",
    ]
    return "\n".join(lines)
