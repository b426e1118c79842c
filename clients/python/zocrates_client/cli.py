"""`zocrates`: the command-line client of zocratesd.

    zocrates sessions list             a table: id, title, created, updated
    zocrates sessions show ID          the title, then every message as "role: text"
    zocrates sessions rm ID            delete the session, and say so

Options (before or after the subcommand): `--zotero-data-dir D` picks the daemon (default:
$ZOTERO_DATA_DIR, else ~/Zotero, else the per-user data dir); `--json` prints machine-readable JSON
instead; `--no-start` fails when no daemon runs instead of starting one (as `zocratesd stdio` does).

Exit status: 0 on success, 1 on any error, with one line on stderr that says what to do next
(never a traceback), 2 for a usage error, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime
from typing import Any, Final

import anyio

from zocrates_client._errors import (
    ConnectionLost,
    RpcError,
    ZocratesClientError,
)
from zocrates_client._types import SessionInfo, UiSession
from zocrates_client.client import Client, connect
from zocratesd import __version__, locations
from zocratesd.rpc import jsonrpc

PROG: Final = "zocrates"
EXIT_ERROR: Final = 1
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as shells report it
# Titles are up to 200 characters; the table cuts them so that a row fits a terminal.
MAX_TITLE_COLUMN: Final = 48
TIME_FORMAT: Final = "%Y-%m-%d %H:%M"


class CliError(Exception):
    """An error already phrased for the user."""


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
        help="the Zotero data dir whose daemon to ask (default: $ZOTERO_DATA_DIR, else ~/Zotero, else a per-user dir)",
    )
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False, help="print JSON")
    p.add_argument(
        "--no-start",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="fail if no daemon is running instead of starting one",
    )
    return p


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The Zocrates command-line client.", parents=[_common_options(suppress=False)])
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sessions = commands.add_parser("sessions", help="list, show and delete sessions", parents=[_common_options(suppress=True)])
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    leaf = [_common_options(suppress=True)]
    actions.add_parser("list", help="list every session", parents=leaf)
    show = actions.add_parser("show", help="print a session's messages", parents=leaf)
    show.add_argument("session_id", metavar="ID")
    rm = actions.add_parser("rm", help="delete a session", parents=leaf)
    rm.add_argument("session_id", metavar="ID")
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
    rows += [[s.session_id, _cut(s.title or "", MAX_TITLE_COLUMN), _time(s.created_at), _time(s.updated_at)] for s in sessions]
    print(_table(rows))


def _print_session(session: UiSession, as_json: bool) -> None:
    if as_json:
        print(json.dumps(session, indent=2, ensure_ascii=False))
        return
    print(session["title"])
    print(f"{session['id']}  created {_time(session['created_at'])}  updated {_time(session['updated_at'])}")
    print()
    if not session["messages"]:
        print("(no messages)")
    for message in session["messages"]:
        # Continuation lines are indented so that each message still starts with its role.
        text = message["text"].replace("\n", "\n    ")
        print(f"{message['role']}: {text}")
    hitl = session.get("pending_hitl")
    if hitl:
        print()
        print(f"(waiting for an answer: {hitl.get('message') or 'a research checkpoint'})")


# --- commands -------------------------------------------------------------------------------------


def _rpc_message(exc: RpcError, session_id: str | None) -> str:
    if exc.code == jsonrpc.RESOURCE_NOT_FOUND and session_id is not None:
        return f"no session with id {session_id!r}; `{PROG} sessions list` shows the ids"
    if exc.code == jsonrpc.INVALID_PARAMS and session_id is not None:
        return (
            f"{session_id!r} is not a session id (ids look like session-1733190000123-a1b2c3); "
            f"`{PROG} sessions list` shows them"
        )
    if exc.code == jsonrpc.SESSION_BUSY:
        return f"{exc.detail or 'the session is busy'}"
    return f"zocratesd refused {exc.method}: {exc.message}" + (f": {exc.detail}" if exc.detail else "")


async def _sessions(client: Client, args: argparse.Namespace) -> None:
    session_id: str | None = getattr(args, "session_id", None)
    try:
        if args.action == "list":
            _print_list(await client.list_sessions(), args.json)
        elif args.action == "show":
            assert session_id is not None
            _print_session(await client.get_session(session_id), args.json)
        else:
            assert session_id is not None
            # Read the title first so the confirmation names what was deleted.
            title = (await client.get_session(session_id))["title"]
            await client.delete_session(session_id)
            if args.json:
                print(json.dumps({"deleted": session_id, "title": title}))
            else:
                print(f"deleted session {session_id} ({title})")
    except RpcError as exc:
        raise CliError(_rpc_message(exc, session_id)) from None


async def _run(args: argparse.Namespace) -> None:
    data_dir = locations.resolve_data_dir(args.zotero_data_dir)
    async with connect(data_dir=data_dir, start_daemon=not args.no_start) as client:
        await client.initialize(client_name=PROG)
        await _sessions(client, args)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see the module docstring)."""
    args = _parser().parse_args(argv)
    try:
        anyio.run(_run, args)
    except CliError as exc:
        return _fail(str(exc))
    except ConnectionLost as exc:
        return _fail(f"lost the connection to zocratesd: {exc}; `zocratesd status` tells whether it still runs")
    except (ZocratesClientError, locations.RuntimeFileError) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our output went away (`zocrates sessions list | head`): not an error. Point
        # stdout at /dev/null so the interpreter's final flush does not complain either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
