"""`zocrates`: the command-line client of zocratesd.

    zocrates ask [--session ID | --new] [--scope library | --collection KEY | --papers KEY[,KEY...]]
                 [--on-checkpoint extend|synthesize|leave] [--citation-style numbered|author-year|pandoc]
                 [--json] TEXT      (TEXT `-`: read stdin)
    zocrates chat [--session ID]                an interactive loop (/new /sessions /scope /rewind /quit)
    zocrates resume [ID] [--extend [GUIDANCE] | --synthesize]  answer a pending research checkpoint
    zocrates rewind ID [INVOCATION_ID]          undo a turn (default: the last) and every later one
    zocrates sessions list | show ID | rm ID | rename ID TITLE
    zocrates library status [--watch]           the library index; --watch follows it until it settles
    zocrates cite [SESSION] [--format bibtex|biblatex|csl-json|text] [--style NAME]  what a session cited
    zocrates find-quote [--limit N] TEXT        the item and page a quote comes from, with a link to the PDF there
    zocrates open [--print]                     the web UI of the running daemon, in a browser

Options (before or after the subcommand): `--zotero-data-dir D` picks the daemon (default:
$ZOTERO_DATA_DIR, else the data dir Zotero's settings name, else ~/Zotero, else the per-user data
dir); `--json` prints machine-readable JSON (for ask, chat's turns and resume: one object per
update, NDJSON, then a `{"type": "done"}` line);
`--no-start` never starts a daemon. Only `ask`, `chat` and `resume` start one when none runs (and
say so on stderr); every other command only talks to a running daemon and says how to start one.

An answer streams to stdout as it arrives; research progress and the session id go to stderr.
Everything printed for a terminal has the control characters of model and library text escaped.

Exit status: 0 on success; 1 on an error, with one line on stderr that says what to do next (never a
traceback); 2 for a usage error; 4 when a research checkpoint was left pending (its ids on stderr);
130 when interrupted (Ctrl-C cancels a running turn first; the session stays usable).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
import anyio.abc

from zocrates_client import cite_command, online_command, quote_command, write_commands
from zocrates_client._types import (
    Checkpoint,
    CheckpointAction,
    Mode,
    OnlineQuestion,
    PromptResult,
    SessionInfo,
    SessionUpdate,
    UiSession,
    last_progress_line,
)
from zocrates_client.client import Client, Turn, connect
from zocrates_client.errors import (
    ConnectionLost,
    DaemonNotRunning,
    RpcError,
    ZocratesClientError,
)
from zocrates_wire import jsonrpc
from zocratesd import __version__, locations
from zocratesd.logtext import escape_for_log, escape_for_terminal
from zocratesd.rpc import library_status
from zocratesd.weblink import CODE_TTL_WORDS, WebLinkError, open_in_browser, web_app_link

PROG: Final = "zocrates"
EXIT_ERROR: Final = 1
EXIT_USAGE: Final = 2
EXIT_CHECKPOINT_PENDING: Final = 4
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it
# Titles are up to 200 characters; the table cuts them so that a row fits a terminal.
MAX_TITLE_COLUMN: Final = 48
TIME_FORMAT: Final = "%Y-%m-%d %H:%M"
# Before a question, how long to wait for a library index that is still being built (a daemon
# just started indexes the demo library in about a second); a large library's first index takes
# minutes, and the question then goes on with what is indexed so far.
INDEX_WAIT_S: Final = 20.0
POLL_S: Final = 0.25
WATCH_POLL_S: Final = 0.5
PROGRESS_BAR_CELLS: Final = 30
SPINNER: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
# The terminal answer to a checkpoint: a letter, or any other text as guidance for the search.
CHECKPOINT_PROMPT: Final = "[Enter] search further · [a] answer now · [l] leave it pending · or type what to look for: "
CHECKPOINT_ONLINE_PROMPT: Final = ("[Enter] search further · [o] search online, then answer · [a] answer now · [l] leave it "
                                   "pending · or type what to look for: ")
ONLINE_PROMPT: Final = "[y] yes, this question · [a] always · [N] no, my library only · [never]: "
ON_CHECKPOINT: Final[dict[str, CheckpointAction | None]] = {
    "extend": "extend_budget", "synthesize": "synthesize", "online": "search_online", "leave": None,
}


class CliError(Exception):
    """An error already phrased for the user."""


class CheckpointLeft(Exception):
    """A research checkpoint was left pending (exit 4); the message says how to answer it."""


class Interrupted(Exception):
    """Ctrl-C: the turn was cancelled (exit 130)."""


def _q(value: object) -> str:
    return shlex.quote(str(value))


# --- arguments ------------------------------------------------------------------------------------


def _common_options(*, suppress: bool) -> argparse.ArgumentParser:
    # The same options on the top-level parser and on every subcommand, so they work in either
    # place; on the subcommands they default to SUPPRESS so they never overwrite a top-level value.
    default: Any = argparse.SUPPRESS if suppress else None
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--zotero-data-dir",
        metavar="D",
        default=default,
        help=(
            "the Zotero data dir whose daemon to ask (default: $ZOTERO_DATA_DIR, else the one Zotero's settings name,"
            " else ~/Zotero, else a per-user dir)"
        ),
    )
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False, help="print JSON")
    p.add_argument(
        "--no-start",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="never start a daemon (only ask, chat and resume would)",
    )
    return p


def _scope_options(p: argparse.ArgumentParser) -> None:
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--scope", choices=["library"], help="search the whole library (the default)")
    scope.add_argument("--collection", metavar="KEY", help="search one collection (with its subcollections)")
    scope.add_argument("--papers", metavar="KEY[,KEY...]", help="search these items only (Zotero item keys)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="The Zocrates command-line client.", parents=[_common_options(suppress=False)],
        epilog="exit status: 0 ok, 1 error, 2 usage, 4 a research checkpoint left pending, 130 interrupted",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    leaf = [_common_options(suppress=True)]

    ask = commands.add_parser("ask", help="ask a question; the answer streams to stdout", parents=leaf)
    which = ask.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="ID", help="continue this session (default: the most recent one)")
    which.add_argument("--new", action="store_true", help="start a new session")
    _scope_options(ask)
    ask.add_argument(
        "--on-checkpoint", choices=sorted(ON_CHECKPOINT), default=None,
        help="what to do when the research budget is spent with parts of the question left: search further, "
             "answer now, or leave the checkpoint pending and exit 4 (the default when stdin is not a terminal; "
             "on a terminal it asks)",
    )
    online = ask.add_mutually_exclusive_group()
    online.add_argument("--online", dest="online", action="store_true", default=None,
                        help="allow this question to search beyond your library (OpenAlex, arXiv, Crossref: only the "
                             "search terms leave the machine); needed when online.mode is ask")
    online.add_argument("--no-online", dest="online", action="store_false", help="search your library only, this time")
    ask.add_argument("--citation-style", choices=("numbered", "author-year", "pandoc"),
                     help="how answers cite, from now on in the session: [1], (Lewis et al., 2020) or [@citationkey]")
    ask.add_argument("text", metavar="TEXT", help="the question; - reads it from stdin")

    chat = commands.add_parser("chat", help="an interactive conversation", parents=leaf)
    chat.add_argument("--session", metavar="ID", help="continue this session (default: a new one)")
    _scope_options(chat)

    resume = commands.add_parser("resume", help="answer a session's pending research checkpoint", parents=leaf)
    resume.add_argument("session_id", metavar="ID", nargs="?", help="the session (default: the most recent one)")
    how = resume.add_mutually_exclusive_group()
    how.add_argument("--extend", nargs="?", const="", metavar="GUIDANCE", help="search further (first for GUIDANCE)")
    how.add_argument("--synthesize", action="store_true", help="answer now from what was found")
    how.add_argument("--search-online", action="store_true",
                     help="search beyond your library (OpenAlex, arXiv, Crossref) for what is left, then answer")

    rewind = commands.add_parser("rewind", help="undo a turn and every later one", parents=leaf)
    rewind.add_argument("session_id", metavar="ID")
    rewind.add_argument("invocation_id", metavar="INVOCATION_ID", nargs="?", help="the turn (default: the last)")

    sessions = commands.add_parser("sessions", help="list, show, rename and delete sessions", parents=leaf)
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="list every session", parents=leaf)
    show = actions.add_parser("show", help="print a session's messages", parents=leaf)
    show.add_argument("session_id", metavar="ID")
    rm = actions.add_parser("rm", help="delete a session", parents=leaf)
    rm.add_argument("session_id", metavar="ID")
    rename = actions.add_parser("rename", help="set a session's title", parents=leaf)
    rename.add_argument("session_id", metavar="ID")
    rename.add_argument("title", metavar="TITLE")

    library = commands.add_parser("library", help="the library index", parents=leaf)
    lib_actions = library.add_subparsers(dest="action", required=True, metavar="ACTION")
    lib_status = lib_actions.add_parser("status", help="the index's state and counts", parents=leaf)
    lib_status.add_argument("--watch", action="store_true", help="follow it (a progress bar) until it is ready")
    lib_actions.add_parser("refresh", help="look at Zotero for changes now, and wait until they are indexed", parents=leaf)

    write_commands.add_parsers(commands, leaf, PROG)
    online_command.add_parser(commands, leaf)
    cite_command.add_parser(commands, leaf)
    quote_command.add_parser(commands, leaf)

    open_ = commands.add_parser("open", help="open the web UI of the running daemon", parents=leaf)
    open_.add_argument("--print", action="store_true", dest="print_only", help="print the address, open no browser")
    return p


# --- output ---------------------------------------------------------------------------------------


def _time(epoch: float | None) -> str:
    return datetime.fromtimestamp(epoch).strftime(TIME_FORMAT) if epoch is not None else "-"


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())  # a title never breaks a row
    return text if len(text) <= width else text[: width - 1] + "…"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _session_json(info: SessionInfo) -> dict[str, Any]:
    return {
        "id": info.session_id,
        "title": info.title,
        "cwd": info.cwd,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
    }


def _print_list(sessions: list[SessionInfo], as_json: bool) -> None:
    if as_json:
        print(json.dumps([_session_json(s) for s in sessions], indent=2))
        return
    if not sessions:
        print("no sessions yet")
        return
    rows = [["ID", "TITLE", "CREATED", "UPDATED"]]
    rows += [
        [escape_for_log(s.session_id), _cut(escape_for_log(s.title or ""), MAX_TITLE_COLUMN), _time(s.created_at), _time(s.updated_at)]
        for s in sessions
    ]
    print(_table(rows))


def _print_session(session: UiSession, as_json: bool) -> None:
    if as_json:
        print(json.dumps(session, indent=2))
        return
    print(escape_for_log(session["title"]))
    print(f"{session['id']}  created {_time(session['created_at'])}  updated {_time(session['updated_at'])}")
    print()
    if not session["messages"]:
        print("(no messages)")
    for message in session["messages"]:
        # Continuation lines are indented so that each message still starts with its role. A
        # message with only a thought (the plan before a search) shows as one, never as a bare
        # "assistant:" line.
        raw, role = message["text"], str(message["role"])
        if not raw.strip():
            raw, role = message.get("thought") or "", f"{role} (thought)"
            if not raw.strip():
                continue
        text = escape_for_terminal(raw).replace("\n", "\n    ")
        print(f"{role}: {text}")
    hitl = session.get("pending_hitl")
    if hitl:
        print()
        print(f"(waiting for an answer: {escape_for_log(hitl.get('message') or 'a research checkpoint')})")
        print(f"(answer it: {PROG} resume {session['id']} --extend [GUIDANCE] | --synthesize)")


def _err(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


# --- turns ----------------------------------------------------------------------------------------


@dataclass
class Scope:
    mode: Mode | None = None
    collection: str | None = None
    items: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.collection:
            return f"collection {self.collection}"
        if self.items:
            return f"papers {','.join(self.items)}"
        return "the whole library"


def _scope_of(args: argparse.Namespace) -> Scope:
    if getattr(args, "collection", None):
        return Scope("collection", collection=args.collection)
    if getattr(args, "papers", None):
        keys = tuple(k.strip() for k in args.papers.split(",") if k.strip())
        if not keys:
            raise CliError("--papers needs at least one item key")
        return Scope("papers", items=keys)
    if getattr(args, "scope", None) == "library":
        return Scope("library")
    return Scope()


class Progress:
    """Research progress on stderr: one line redrawn in place on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.tty = stream.isatty()
        self.shown = ""  # the line on screen (a terminal), to clear before the answer
        self.frame = 0

    def say(self, text: str) -> None:
        text = escape_for_log(text, limit=200)
        if self.tty:
            self.frame = (self.frame + 1) % len(SPINNER)
            width = max(20, _columns(self.stream) - 3)
            line = f"{SPINNER[self.frame]} {text}"[:width]
            self.stream.write(f"\r\x1b[K{line}")
            self.shown = line
        else:
            self.stream.write(f"{PROG}: {text}\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = ""


def _columns(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        columns = 0
    # A terminal that reports no size (a fresh pty): $COLUMNS, else 80.
    return columns or shutil.get_terminal_size().columns


@dataclass
class TurnView:
    """Prints one turn: the answer to stdout, progress to stderr, or NDJSON to stdout."""

    session_id: str
    as_json: bool
    progress: Progress = field(default_factory=lambda: Progress(sys.stderr))
    answered: bool = False  # some answer text was printed
    ends_with_newline: bool = True

    def update(self, item: SessionUpdate) -> None:
        update = item.update
        if self.as_json:
            _ndjson({"type": "update", "session_id": item.session_id, "update": update})
            return
        kind = item.kind
        if kind == "agent_message_chunk":
            content = update.get("content") or {}
            text = content.get("text") if isinstance(content, dict) else None
            if isinstance(text, str) and text:
                self.progress.clear()
                sys.stdout.write(escape_for_terminal(text))
                sys.stdout.flush()
                self.answered = True
                self.ends_with_newline = text.endswith("\n")
        elif kind == "tool_call" and update.get("kind") == "search":
            self.progress.say("searching your library…")
        elif kind == "tool_call_update" and update.get("content"):
            last = last_progress_line(update["content"])
            if last:
                self.progress.say(last)

    def finish(self) -> None:
        self.progress.clear()
        if not self.as_json and self.answered and not self.ends_with_newline:
            sys.stdout.write("\n")
            sys.stdout.flush()


def _ndjson(obj: dict[str, Any]) -> None:
    # ensure_ascii: every control and non-ASCII character is a \u escape, so a line is one line.
    sys.stdout.write(json.dumps(obj, ensure_ascii=True) + "\n")
    sys.stdout.flush()


async def _read_stdin_line() -> str | None:
    """One line from the terminal, without blocking the event loop (cancellable); None at EOF."""
    fd = sys.stdin.fileno()
    data = b""
    while not data.endswith(b"\n"):
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 4096)
        if not chunk:
            return data.decode(errors="replace") if data else None
        data += chunk
    return data.decode(errors="replace").rstrip("\n")


async def _terminal_answer(question: str, prompt: str, cancelled: anyio.Event) -> str | None:
    """`question` and `prompt` on the terminal, and the line typed (None: cancelled, or stdin ended)."""
    sys.stderr.write(f"\n{escape_for_terminal(question)}\n{prompt}")
    sys.stderr.flush()
    line: str | None = None
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            nonlocal line
            line = await _read_stdin_line()
            tg.cancel_scope.cancel()

        async def watch() -> None:
            await cancelled.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(read)
        tg.start_soon(watch)
    return None if cancelled.is_set() else line


async def _ask_checkpoint(cp: Checkpoint, cancelled: anyio.Event) -> tuple[CheckpointAction, str | None] | None:
    """Ask on the terminal what to do at a checkpoint: (action, guidance), or None to leave it."""
    online = "search_online" in (cp.payload.get("actions") or ())
    line = await _terminal_answer(cp.question, CHECKPOINT_ONLINE_PROMPT if online else CHECKPOINT_PROMPT, cancelled)
    if line is None:
        return None
    answer = line.strip()
    if answer.lower() in ("", "e", "extend", "y", "yes"):
        return ("extend_budget", None)
    if answer.lower() in ("a", "answer", "s", "synthesize"):
        return ("synthesize", None)
    if online and answer.lower() in ("o", "online"):
        return ("search_online", None)
    if answer.lower() in ("l", "leave", "q", "n", "no"):
        return None
    return ("extend_budget", answer)


@dataclass
class TurnRunner:
    """Runs turns on one connection: streams them, answers checkpoints, turns Ctrl-C into a cancel."""

    as_json: bool
    interactive: bool  # checkpoints are asked on the terminal
    on_checkpoint: str | None = None  # extend | synthesize | leave (given: wins over asking)
    cancelled: anyio.Event = field(default_factory=anyio.Event)

    async def handle_request(self, method: str, params: dict[str, Any]) -> Any:
        """The connection's `on_request`: the daemon asks what to do at a research checkpoint, or
        whether the turn may search online (online.mode ask)."""
        if method != "session/request_permission":
            raise RpcError(jsonrpc.METHOD_NOT_FOUND, "Method not found", {"kind": "method_not_found", "detail": method})
        asked = OnlineQuestion.from_request(params)
        if asked is not None:
            return await self._answer_online(asked)
        cp = Checkpoint.from_request(params)
        decision: tuple[CheckpointAction, str | None] | None
        if self.cancelled.is_set():
            decision = None
        elif self.interactive and self.on_checkpoint is None:
            decision = await _ask_checkpoint(cp, self.cancelled)
        else:
            action = ON_CHECKPOINT[self.on_checkpoint or "leave"]
            if action == "search_online" and "search_online" not in (cp.payload.get("actions") or ()):
                action = "synthesize"  # online search is off: what is left is answering now
            decision = None if action is None else (action, None)
        if self.as_json:
            _ndjson({"type": "checkpoint", "session_id": cp.session_id, "invocation_id": cp.invocation_id,
                     "interrupt_id": cp.interrupt_id, "question": cp.question, "payload": cp.payload,
                     "answer": decision[0] if decision else "leave"})
        elif decision is not None and not self.interactive:
            _err(f"research checkpoint: {escape_for_log(cp.question)} -> {decision[0]}")
        return Checkpoint.answer(*decision) if decision else Checkpoint.answer(None)

    async def _answer_online(self, asked: OnlineQuestion) -> dict[str, object]:
        """Whether this turn may search online: asked on a terminal; a script's turn stays in the
        library (`--online` allows it beforehand), said in one line."""
        choice: str | None = None
        if self.interactive and not self.cancelled.is_set():
            line = await _terminal_answer(asked.question, ONLINE_PROMPT, self.cancelled)
            typed = (line or "").strip().lower()
            choice = {"y": "once", "yes": "once", "a": "always", "always": "always", "never": "never"}.get(typed, "no")
        if self.as_json:
            _ndjson({"type": "online_question", "session_id": asked.session_id, "terms": asked.terms,
                     "answer": choice or "no"})
        elif choice is None:
            _err(f"not searched online for “{escape_for_log(asked.terms)}”: online.mode is ask; "
                 "add --online to allow it for a question")
        return OnlineQuestion.answer(choice)

    async def run(self, client: Client, session_id: str, start: Callable[[], Turn]) -> PromptResult:
        """Stream one turn to the terminal; Ctrl-C sends `session/cancel` (twice: exit at once)."""
        view = TurnView(session_id, self.as_json)
        interrupted = False
        async with anyio.create_task_group() as tg:

            async def on_sigint() -> None:
                nonlocal interrupted
                with anyio.open_signal_receiver(signal.SIGINT) as signals:
                    async for _ in signals:
                        if interrupted:
                            os._exit(EXIT_INTERRUPTED)  # a second Ctrl-C: the user wants out now
                        interrupted = True
                        view.progress.clear()
                        _err("cancelling the turn… (Ctrl-C again to quit at once)")
                        self.cancelled.set()  # a checkpoint question on screen answers "cancelled"
                        await client.cancel(session_id)

            tg.start_soon(on_sigint)
            failure: Exception | None = None
            try:
                async with start() as turn:
                    async for item in turn:
                        view.update(item)
                result = turn.result
            except Exception as exc:
                failure = exc  # raised below, outside the task group: never as an ExceptionGroup
            finally:
                view.finish()
                tg.cancel_scope.cancel()
        if failure is not None:
            try:
                raise failure
            finally:
                failure = None
        if self.as_json:
            _ndjson({"type": "done", "session_id": session_id, "stop_reason": result.stop_reason,
                     "invocation_id": result.invocation_id, "pending_hitl": result.pending_hitl,
                     "citations": result.citations, "citation_keys": result.citation_keys})
        if interrupted:
            raise Interrupted(f"cancelled; session {session_id} is ready for the next question")
        return result


def _left_message(session_id: str, result: PromptResult) -> str:
    hitl: dict[str, Any] = dict(result.pending_hitl or {})
    return (
        f"research checkpoint left pending in session {session_id} (turn {hitl.get('invocation_id')}, "
        f"checkpoint {hitl.get('interrupt_id')}); answer it with `{PROG} resume {session_id} --extend [GUIDANCE]` "
        f"or `{PROG} resume {session_id} --synthesize`"
    )


async def _wait_for_index(client: Client, as_json: bool) -> None:
    """Before a question: a library still being indexed is waited for (a while), a missing one named."""
    try:
        status = await client.library_status()
    except RpcError:
        return  # an older daemon: nothing to wait for
    progress = Progress(sys.stderr)
    deadline = time.monotonic() + INDEX_WAIT_S
    while not library_status.settled(status) and time.monotonic() < deadline:
        if not as_json:
            progress.say(f"waiting for the library index: {library_status.headline(status)}")
        await anyio.sleep(POLL_S)
        status = await client.library_status()
    progress.clear()
    if not library_status.settled(status):
        _err(f"{library_status.headline(status)}; asking anyway (answers use what is indexed so far)")
    elif status.get("state") in ("unavailable", "error"):
        _err(library_status.headline(status))


async def _most_recent_session(client: Client) -> str | None:
    sessions = await client.list_sessions()
    if not sessions:
        return None
    latest = max(sessions, key=lambda s: (s.updated_at or s.created_at or 0.0, s.created_at or 0.0))
    return latest.session_id


async def _prompt_once(
    client: Client, runner: TurnRunner, session_id: str, text: str, scope: Scope, online: bool | None = None,
) -> PromptResult:
    def start() -> Turn:
        return client.stream_prompt(session_id, text, mode=scope.mode, items=scope.items, collection=scope.collection,
                                    online=online)

    return await runner.run(client, session_id, start)


def _after_turn(session_id: str, result: PromptResult, runner: TurnRunner) -> None:
    """What a finished turn means for the exit status: a left checkpoint is exit 4."""
    if result.pending_hitl is not None:
        raise CheckpointLeft(_left_message(session_id, result))
    if result.stop_reason == "cancelled":
        raise CliError(f"the turn was cancelled (by another client?); session {session_id} is ready for the next question")
    if not runner.as_json:
        _err(f"session {session_id}")


def _read_question(text: str) -> str:
    if text == "-":
        text = sys.stdin.read()
    text = text.strip()
    if not text:
        raise CliError("the question is empty")
    return text


async def _ask(client: Client, runner: TurnRunner, args: argparse.Namespace, text: str) -> None:
    scope = _scope_of(args)
    session_id: str | None = args.session
    if session_id is None and not args.new:
        session_id = await _most_recent_session(client)
    if session_id is None:
        session_id = await client.new_session()
    if args.citation_style:  # a session setting: it stays for the session's later turns
        await client.call("session/set_config_option", {"sessionId": session_id, "configId": "citation_style",
                                                        "value": args.citation_style})
    await _wait_for_index(client, args.json)
    started = time.time()
    result = await _prompt_once(client, runner, session_id, text, scope, args.online)
    await write_commands.consent_after_turn(client, session_id, started, interactive=runner.interactive, prog=PROG)
    _after_turn(session_id, result, runner)


async def _resume(client: Client, runner: TurnRunner, args: argparse.Namespace) -> None:
    session_id = args.session_id or await _most_recent_session(client)
    if session_id is None:
        raise CliError("there are no sessions yet")
    decision: tuple[CheckpointAction, str | None] | None
    if args.synthesize:
        decision = ("synthesize", None)
    elif args.search_online:
        decision = ("search_online", None)
    elif args.extend is not None:
        decision = ("extend_budget", args.extend or None)
    else:
        decision = None
    while True:
        session = await client.get_session(session_id)
        hitl = session.get("pending_hitl")
        if not hitl:
            raise CliError(f"session {session_id} has no research checkpoint waiting for an answer")
        if decision is None:
            if not runner.interactive:
                raise CliError(f"say how to answer it: `{PROG} resume {session_id} --extend [GUIDANCE]` or `--synthesize`")
            cp = Checkpoint(session_id, "", hitl.get("message") or "Search further, or answer now?",
                            hitl["invocation_id"], hitl["interrupt_id"], dict(hitl.get("payload") or {}))
            decision = await _ask_checkpoint(cp, runner.cancelled)
            if decision is None:
                raise CheckpointLeft(_left_message(session_id, PromptResult("cancelled", hitl["invocation_id"], hitl, {})))
        action, guidance = decision

        invocation_id, interrupt_id = hitl["invocation_id"], hitl["interrupt_id"]

        def start(
            action: CheckpointAction = action, guidance: str | None = guidance,
            invocation_id: str = invocation_id, interrupt_id: str = interrupt_id,
        ) -> Turn:
            return client.stream_resume(session_id, invocation_id, interrupt_id, action, guidance)

        result = await runner.run(client, session_id, start)
        if result.pending_hitl is not None and runner.interactive:
            decision = None  # paused again: ask again
            continue
        _after_turn(session_id, result, runner)
        return


async def _rewind(client: Client, args: argparse.Namespace) -> None:
    session_id: str = args.session_id
    invocation_id: str | None = args.invocation_id
    if invocation_id is None:
        session = await client.get_session(session_id)
        if not session["messages"]:
            raise CliError(f"session {session_id} has no turn to rewind")
        invocation_id = session["messages"][-1]["invocation_id"]
        if invocation_id is None:
            raise CliError(f"the last message of session {session_id} belongs to no turn: nothing to rewind")
    result = await client.rewind(session_id, invocation_id)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    asked = escape_for_log(result["restored"].get("text") or "", limit=200)
    left = len(result["session"]["messages"])
    print(f"rewound turn {invocation_id} of session {session_id} ({left} messages left); it asked: {asked}")


async def _sessions(client: Client, args: argparse.Namespace) -> None:
    session_id: str | None = getattr(args, "session_id", None)
    if args.action == "list":
        _print_list(await client.list_sessions(), args.json)
    elif args.action == "show":
        assert session_id is not None
        _print_session(await client.get_session(session_id), args.json)
    elif args.action == "rename":
        assert session_id is not None
        summary = await client.rename(session_id, args.title)
        if args.json:
            print(json.dumps(summary))
        else:
            print(f"renamed session {session_id}: {escape_for_log(summary['title'])}")
    else:
        assert session_id is not None
        # Read the title first so the confirmation names what was deleted.
        title = (await client.get_session(session_id))["title"]
        await client.delete_session(session_id)
        if args.json:
            print(json.dumps({"deleted": session_id, "title": title}))
        else:
            print(f"deleted session {session_id} ({escape_for_log(title)})")


async def _library(client: Client, args: argparse.Namespace) -> None:
    if args.action == "refresh":
        before = await client.library_status()
        status = await client.library_status(refresh=True)
        # A forced look always ends in a pass (`refreshes` counts them), or in a state that says why not.
        while status.get("refreshes", 0) <= before.get("refreshes", 0) and status.get("state") not in _NO_PASS_STATES:
            await anyio.sleep(WATCH_POLL_S)
            status = await client.library_status()
        args.watch = not library_status.settled(status)
    else:
        status = await client.library_status()
    if not args.watch:
        if args.json:
            print(json.dumps(status, indent=2))
        else:
            print("\n".join(library_status.describe(status)))
        return
    tty = sys.stdout.isatty() and not args.json
    last = None
    while True:
        line = library_status.headline(status)
        if args.json:
            if status != last:
                _ndjson(status)
        elif tty:
            sys.stdout.write("\r\x1b[K" + _bar(status) + line[: max(20, _columns(sys.stdout) - PROGRESS_BAR_CELLS - 10)])
            sys.stdout.flush()
        elif last is None or line != library_status.headline(last):
            print(line, flush=True)
        last = status
        if library_status.settled(status):
            break
        await anyio.sleep(WATCH_POLL_S)
        status = await client.library_status()
    if tty:
        sys.stdout.write("\r\x1b[K" + "\n".join(library_status.describe(status)) + "\n")


# Library states in which a look cannot end in a pass: `library refresh` stops waiting and says why.
_NO_PASS_STATES = frozenset({"unavailable", "error", "disabled", "stopped"})


def _bar(status: dict[str, Any]) -> str:
    if status.get("state") != "indexing":
        return ""
    filled = int(PROGRESS_BAR_CELLS * min(100.0, float(status.get("percent") or 0)) / 100)
    return "[" + "#" * filled + "." * (PROGRESS_BAR_CELLS - filled) + "] "


def _open(args: argparse.Namespace) -> int:
    data_dir = locations.resolve_data_dir(args.zotero_data_dir)
    live = locations.live_daemon(data_dir)
    if live is None:
        raise DaemonNotRunning(data_dir)
    http, token = live.raw.get("http"), live.raw.get("token")
    if not isinstance(http, dict) or not token:
        raise CliError(
            f"zocratesd (pid {live.pid}) runs without its web face (--no-http); restart it with "
            f"`zocratesd stop --zotero-data-dir {_q(data_dir)} && zocratesd serve --zotero-data-dir {_q(data_dir)}`"
        )
    try:
        link = web_app_link(live.raw, page_file=not args.print_only)
    except WebLinkError as exc:
        raise CliError(str(exc)) from None
    assert link is not None  # http and token were checked above
    print(link.url, flush=True)
    if args.print_only:
        _err(f"the address opens the web UI once, within {CODE_TTL_WORDS}")
    elif not open_in_browser(link):
        _err(f"no browser could be opened here; open the address above in one (it works once, within {CODE_TTL_WORDS})")
    return 0


# --- running --------------------------------------------------------------------------------------


def _rpc_message(exc: RpcError, session_id: str | None) -> str:
    if exc.code == jsonrpc.RESOURCE_NOT_FOUND and session_id is not None:
        if exc.method == "_zocrates/session/rewind":
            return f"session {session_id} has no such turn (already rewound?); `{PROG} sessions show {session_id}` shows it"
        return f"no session with id {session_id!r}; `{PROG} sessions list` shows the ids"
    if exc.code == jsonrpc.INVALID_PARAMS and session_id is not None and exc.kind == "invalid_params":
        return (
            f"{session_id!r} is not a session id (ids look like session-1733190000123-a1b2c3); "
            f"`{PROG} sessions list` shows them"
        )
    if exc.code == jsonrpc.SESSION_BUSY:
        return f"{exc.detail or 'the session is busy'}; try again when its turn has ended"
    return f"zocratesd refused {exc.method}: {exc.message}" + (f": {escape_for_log(exc.detail)}" if exc.detail else "")


async def _write(client: Client, args: argparse.Namespace) -> None:
    try:
        await write_commands.run(client, args, PROG)
    except write_commands.NotWritten as exc:
        raise CliError(str(exc)) from None


def _starts_daemon(args: argparse.Namespace) -> bool:
    return args.command in ("ask", "chat", "resume") and not args.no_start


async def _with_client(args: argparse.Namespace, body: Callable[[Client], Awaitable[None]], runner: TurnRunner | None = None) -> None:
    data_dir = locations.resolve_data_dir(args.zotero_data_dir)
    start = _starts_daemon(args)
    announce = _announcer(data_dir) if start else None
    async with connect(
        data_dir=data_dir, start_daemon=start, on_request=runner.handle_request if runner else None,
        on_daemon_start=announce,
    ) as client:
        await client.initialize(client_name=PROG, asks_about_writes=True)
        await body(client)


def _announcer(data_dir: Path) -> Callable[[int, Path], None]:
    def say(pid: int, log: Path) -> None:
        _err(
            f"started zocratesd (pid {pid}) for {data_dir}; it keeps running in the background "
            f"(log: {log}; stop it with `zocratesd stop --zotero-data-dir {_q(data_dir)}`)"
        )

    return say


def _not_running(exc: DaemonNotRunning) -> str:
    if exc.data_dir is None:
        return str(exc)
    d = _q(exc.data_dir)
    return (
        f"zocratesd is not running for {exc.data_dir}; start it with `zocratesd serve --zotero-data-dir {d}` "
        f"(or ask something: `{PROG} ask` starts one)"
    )


def _guarded(fn: Callable[[], int]) -> int:
    """Run a command and turn every failure into its exit status and one line on stderr."""
    try:
        return fn()
    except CliError as exc:
        return _fail(str(exc))
    except CheckpointLeft as exc:
        _err(str(exc))
        return EXIT_CHECKPOINT_PENDING
    except Interrupted as exc:
        _err(str(exc))
        return EXIT_INTERRUPTED
    except DaemonNotRunning as exc:
        return _fail(_not_running(exc))
    except ConnectionLost as exc:
        return _fail(f"lost the connection to zocratesd: {exc}; `zocratesd status` tells whether it still runs")
    except RpcError as exc:
        return _fail(_rpc_message(exc, None))
    except (ZocratesClientError, locations.RuntimeFileError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (`zocrates sessions list | head`): not an error. Point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _run_async(
    args: argparse.Namespace, body: Callable[[Client], Awaitable[None]], runner: TurnRunner | None = None,
    session_id: str | None = None,
) -> int:
    async def main() -> None:
        try:
            await _with_client(args, body, runner)
        except RpcError as exc:
            raise CliError(_rpc_message(exc, session_id)) from None

    anyio.run(main)
    return 0


def _run_command(args: argparse.Namespace) -> int:
    session_id: str | None = getattr(args, "session_id", None) or getattr(args, "session", None)
    interactive = sys.stdin.isatty()
    if args.command == "ask":
        text = _read_question(args.text)
        runner = TurnRunner(args.json, interactive=interactive and args.text != "-", on_checkpoint=args.on_checkpoint)
        return _run_async(args, lambda c: _ask(c, runner, args, text), runner, session_id)
    if args.command == "resume":
        runner = TurnRunner(args.json, interactive=interactive)
        return _run_async(args, lambda c: _resume(c, runner, args), runner, session_id)
    if args.command == "rewind":
        return _run_async(args, lambda c: _rewind(c, args), None, session_id)
    if args.command == "sessions":
        return _run_async(args, lambda c: _sessions(c, args), None, session_id)
    if args.command == "library":
        return _run_async(args, lambda c: _library(c, args))
    if args.command == online_command.COMMAND:
        return _run_async(args, lambda c: online_command.run(c, args))
    if args.command == cite_command.COMMAND:
        return _run_async(args, lambda c: cite_command.run(c, args, _most_recent_session), None, session_id)
    if args.command == quote_command.COMMAND:
        found: list[bool] = []
        code = _run_async(args, lambda c: quote_command.run(c, args, found))
        if not any(found):
            raise CliError(quote_command.NO_MATCH)
        return code
    if args.command in write_commands.COMMANDS:
        return _run_async(args, lambda c: _write(c, args))
    if args.command == "open":
        return _open(args)
    if args.command == "chat":
        return _chat(args)
    raise AssertionError(args.command)


# --- chat -----------------------------------------------------------------------------------------

CHAT_HELP: Final = """commands:
  /new                      start a new session (the next question opens it)
  /sessions [ID]            list the sessions, or continue session ID
  /scope [library | collection KEY | papers KEY[,KEY...]]   show or set what is searched
  /rewind [INVOCATION_ID]   undo the last turn (or that one, and every later one)
  /quit                     leave (Ctrl-D too); Ctrl-C cancels a running answer"""


def _history_file() -> Path:
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "zocrates"
    return state / "chat_history"


def _setup_readline() -> Callable[[], None]:
    """Line editing and a history kept across runs; returns what saves it."""
    try:
        import readline
    except ImportError:  # not on every platform: input() still works
        return lambda: None
    path = _history_file()
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            readline.write_history_file(path)
        except OSError:
            pass

    return save


def _parse_scope(words: list[str]) -> Scope:
    if words == ["library"]:
        return Scope("library")
    if len(words) == 2 and words[0] == "collection":
        return Scope("collection", collection=words[1])
    if len(words) == 2 and words[0] == "papers":
        keys = tuple(k.strip() for k in words[1].split(",") if k.strip())
        if keys:
            return Scope("papers", items=keys)
    raise CliError("usage: /scope library | collection KEY | papers KEY[,KEY...]")


@dataclass
class ChatState:
    session_id: str | None
    scope: Scope
    checked_index: bool = False


def _chat(args: argparse.Namespace) -> int:
    save_history = _setup_readline()
    state = ChatState(args.session, _scope_of(args))
    print(
        f"{PROG} chat: {'session ' + state.session_id if state.session_id else 'a new session'}, "
        f"searching {state.scope.describe()}. /help for commands, Ctrl-D to leave.",
        file=sys.stderr,
    )
    try:
        while True:
            try:
                line = input("you> ").strip()
            except EOFError:
                print(file=sys.stderr)
                return 0
            except KeyboardInterrupt:
                print(file=sys.stderr)
                continue
            if not line:
                continue
            if line.startswith("/"):
                word, *rest = line[1:].split()
                if word in ("quit", "exit", "q"):
                    return 0
                _guarded(lambda: _chat_command(args, state, word, rest))  # noqa: B023 (called at once)
                continue
            _guarded(lambda: _chat_turn(args, state, line))  # noqa: B023 (called at once)
            if not args.json:
                print()
    finally:
        save_history()


def _chat_turn(args: argparse.Namespace, state: ChatState, text: str) -> int:
    # Checkpoints are asked on the terminal; from a pipe they are left pending (the next line of
    # the pipe is the next question, not an answer).
    runner = TurnRunner(args.json, interactive=sys.stdin.isatty())

    async def turn(client: Client) -> None:
        if state.session_id is None:
            state.session_id = await client.new_session()
            _err(f"session {state.session_id}")
        if not state.checked_index:
            await _wait_for_index(client, args.json)
            state.checked_index = True
        started = time.time()
        result = await _prompt_once(client, runner, state.session_id, text, state.scope)
        await write_commands.consent_after_turn(client, state.session_id, started, interactive=runner.interactive, prog=PROG)
        if result.pending_hitl is not None:
            raise CheckpointLeft(_left_message(state.session_id, result))

    return _run_async(args, turn, runner, state.session_id)


def _chat_command(args: argparse.Namespace, state: ChatState, word: str, rest: list[str]) -> int:
    """One /command of the chat (not /quit)."""
    if word == "help":
        print(CHAT_HELP, file=sys.stderr)
    elif word == "new":
        state.session_id = None
        _err("the next question starts a new session")
    elif word == "sessions" and rest:
        state.session_id = rest[0]
        _err(f"continuing session {state.session_id}")
    elif word == "sessions":

        async def show(client: Client) -> None:
            _print_list(await client.list_sessions(), args.json)

        return _run_async(args, show)
    elif word == "scope":
        if rest:
            state.scope = _parse_scope(rest)
        _err(f"searching {state.scope.describe()}")
    elif word == "rewind":
        if not state.session_id:
            raise CliError("no session yet: nothing to rewind")
        rewind_args = argparse.Namespace(
            **{**vars(args), "session_id": state.session_id, "invocation_id": rest[0] if rest else None}
        )
        return _run_async(rewind_args, lambda c: _rewind(c, rewind_args), None, state.session_id)
    else:
        raise CliError(f"unknown command /{word}; /help lists them")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see the module docstring)."""
    args = _parser().parse_args(argv)
    return _guarded(lambda: _run_command(args))


def _fail(message: str) -> int:
    _err(message)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
