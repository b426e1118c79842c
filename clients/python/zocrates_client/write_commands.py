"""`zocrates note | tag | untag | collect | add | undo | writes`: writes into Zotero from a terminal.

Every write is shown before it is made: the daemon's preview goes to stderr and the terminal asks
(y: write it, a: write it and stop asking for this kind, anything else: nothing is written). With
`--yes` (scripts) the write is made without asking. Without a terminal and without `--yes`, the
write is left waiting for consent, and the message says how to confirm or discard it.
"""

from __future__ import annotations

import argparse
import calendar
import json
import sys
import time
from typing import Any, Final

from zocrates_client.client import Client
from zocratesd.logtext import escape_for_log, escape_for_terminal

EXIT_NOT_WRITTEN: Final = 1
CONSENT_PROMPT: Final = "Write this into Zotero? [y] yes · [a] yes, and always for this kind · [N] no: "
COMMANDS: Final = ("note", "tag", "untag", "collect", "add", "undo", "writes")
# A write's preview in `zocrates writes`: one line, cut where a terminal line would wrap twice.
LIST_PREVIEW_CHARS: Final = 160


class NotWritten(Exception):
    """A write the person declined, Zotero refused, or that waits for consent: exit 1, said on stderr."""


def add_parsers(commands: Any, leaf: list[argparse.ArgumentParser], prog: str) -> None:
    def write_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--yes", "-y", action="store_true", help="write without asking (for scripts)")
        p.add_argument("--library", default="user", metavar="LIB", help='"user" (My Library, the default) or "groups/ID"')
        p.add_argument("--session", metavar="ID", help="file the write under this session (its undo)")

    note = commands.add_parser("note", help="save a note into Zotero (Markdown)", parents=leaf)
    where = note.add_mutually_exclusive_group()
    where.add_argument("--on", metavar="KEY", help="the paper the note is a child of")
    where.add_argument("--in", dest="collection", metavar="COLLECTION", help="a standalone note in this collection")
    note.add_argument("text", metavar="TEXT", help="the note in Markdown; - reads it from stdin")
    write_options(note)

    for name, verb in (("tag", "add tags to"), ("untag", "remove tags from")):
        p = commands.add_parser(name, help=f"{verb} items", parents=leaf)
        p.add_argument("keys", metavar="KEY", nargs="+", help="item keys")
        p.add_argument("--tag", "-t", dest="tags", action="append", required=True, metavar="TAG", help="a tag (repeat for more)")
        write_options(p)

    collect = commands.add_parser("collect", help="add items to a collection (--create makes it first)", parents=leaf)
    collect.add_argument("collection", metavar="COLLECTION", help="its name, path (Parent / Child) or key")
    collect.add_argument("keys", metavar="KEY", nargs="*", help="item keys")
    collect.add_argument("--create", action="store_true", help="create the collection (under --parent) first")
    collect.add_argument("--parent", metavar="COLLECTION", help="with --create: the parent collection")
    write_options(collect)

    add = commands.add_parser("add", help="add a work to Zotero by its DOI (its metadata looked up at Crossref)", parents=leaf)
    add.add_argument("doi", metavar="DOI", help="10.1234/abc or https://doi.org/10.1234/abc (e.g. from zocrates online)")
    add.add_argument("--in", dest="collection", metavar="COLLECTION", help="file it in this collection")
    write_options(add)

    undo = commands.add_parser("undo", help="undo the last write into Zotero (or WRITE_ID)", parents=leaf)
    undo.add_argument("write_id", metavar="WRITE_ID", nargs="?")
    undo.add_argument("--session", metavar="ID", help="the last write of this session")

    writes = commands.add_parser("writes", help="list writes into Zotero; confirm or discard a waiting one", parents=leaf)
    writes.add_argument("--pending", action="store_true", help="only writes not applied yet")
    acts = writes.add_subparsers(dest="action", metavar="ACTION")
    for name, what in (("show", "one write in full"), ("confirm", "write a waiting write"), ("discard", "drop a waiting write")):
        a = acts.add_parser(name, help=what, parents=leaf)
        a.add_argument("write_id", metavar="WRITE_ID")


async def run(client: Client, args: argparse.Namespace, prog: str) -> None:
    if args.command == "undo":
        _report(await client.undo_write(args.write_id, session_id=args.session), args, prog)
    elif args.command == "writes":
        await _writes(client, args, prog)
    elif args.command == "collect" and args.create:
        made = await _propose(client, args, prog, "_zocrates/writes/create_collection",
                              {"name": args.collection, "parent": args.parent})
        if args.keys:
            await _propose(client, args, prog, "_zocrates/writes/add_to_collection",
                           {"itemKeys": args.keys, "collection": made["operation"]["new_key"]})
    elif args.command == "collect":
        if not args.keys:
            raise NotWritten("name the items to add: zocrates collect COLLECTION KEY [KEY ...]")
        await _propose(client, args, prog, "_zocrates/writes/add_to_collection", {"itemKeys": args.keys, "collection": args.collection})
    elif args.command == "add":
        params = {"doi": args.doi, "collection": args.collection}
        await _propose(client, args, prog, "_zocrates/writes/add_item", {k: v for k, v in params.items() if v})
    elif args.command == "note":
        text = sys.stdin.read() if args.text == "-" else args.text
        params = {"markdown": text, "parentItem": args.on, "collection": args.collection}
        await _propose(client, args, prog, "_zocrates/writes/save_note", {k: v for k, v in params.items() if v})
    else:
        await _propose(client, args, prog, f"_zocrates/writes/{args.command}", {"itemKeys": args.keys, "tags": args.tags})


async def _propose(client: Client, args: argparse.Namespace, prog: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    params = {**params, "library": args.library, "confirm": args.yes}
    if args.session:
        params["sessionId"] = args.session
    record = await client.write(method, params)
    if record["state"] == "awaiting_consent":
        record = await _ask_consent(client, record, prog)
    _report(record, args, prog)
    return record


async def consent_after_turn(client: Client, session_id: str, since: float, *, interactive: bool, prog: str) -> None:
    """Ask about the writes the assistant proposed during the turn (oldest first): on a terminal,
    one question each; otherwise they stay waiting, and stderr says how to answer them."""
    listing = await client.list_writes(pending=True, session_id=session_id)
    proposed = [w for w in reversed(listing["writes"]) if w["state"] == "awaiting_consent"
                and w["proposed_by"] == "model" and _epoch(w["created_at"]) >= int(since)]
    for record in proposed:
        sys.stderr.write("\nThe assistant proposes a change to your Zotero library.")
        try:
            _report(await _ask_consent(client, record, prog, interactive=interactive), argparse.Namespace(json=False), prog)
        except NotWritten as exc:
            sys.stderr.write(f"{exc}\n")


def _epoch(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))


async def _ask_consent(client: Client, record: dict[str, Any], prog: str, *, interactive: bool | None = None) -> dict[str, Any]:
    if not (sys.stdin.isatty() if interactive is None else interactive):
        raise NotWritten(f"not written yet: write {record['id']} waits for your consent. `{prog} writes confirm {record['id']}` "
                         f"writes it, `{prog} writes discard {record['id']}` drops it (or run with --yes)")
    sys.stderr.write(f"\n{escape_for_terminal(record['preview'])}\n\n{CONSENT_PROMPT}")
    sys.stderr.flush()
    answer = sys.stdin.readline().strip().lower()
    if answer in ("y", "yes", "a", "always"):
        return await client.confirm_write(record["id"], always=answer.startswith("a"))
    await client.discard_write(record["id"])
    raise NotWritten("nothing was written")


def _report(record: dict[str, Any], args: argparse.Namespace, prog: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(record, ensure_ascii=True), flush=True)
    state, wid = record["state"], record["id"]
    if state == "applied":
        made = f" (created {', '.join(record['created'])})" if record.get("created") else ""
        if not getattr(args, "json", False):
            print(f"written: {wid}{made}", flush=True)
        sys.stderr.write(f"{prog} undo {wid} reverts it\n")
    elif state == "undone":
        sys.stderr.write(f"{wid} is undone\n")
    elif state == "queued":
        why = escape_for_log(record.get("error") or "Zotero is not reachable")
        sys.stderr.write(f"waiting: {wid} is written as soon as Zotero can take it ({why}); `{prog} writes --pending` lists it\n")
    elif state == "failed":
        raise NotWritten(f"not written: {escape_for_log(record.get('error') or 'Zotero refused it')}")
    elif state == "discarded":
        raise NotWritten(f"{wid} was discarded: nothing was written")


async def _writes(client: Client, args: argparse.Namespace, prog: str) -> None:
    if args.action == "confirm":
        _report(await client.confirm_write(args.write_id), args, prog)
        return
    if args.action == "discard":
        record = await client.discard_write(args.write_id)
        sys.stderr.write(f"{record['id']} discarded: nothing was written\n")
        return
    if args.action == "show":
        record = await client.write("_zocrates/writes/get", {"writeId": args.write_id})
        print(json.dumps(record, ensure_ascii=True, indent=2) if args.json else escape_for_terminal(_describe(record, full=True)))
        return
    listing = await client.list_writes(pending=args.pending)
    if args.json:
        print(json.dumps(listing, ensure_ascii=True), flush=True)
        return
    for record in listing["writes"]:
        print(escape_for_log(_describe(record, full=False)))
    if listing.get("waiting_for") and any(r["state"] == "queued" for r in listing["writes"]):
        sys.stderr.write(f"queued writes wait: {escape_for_log(listing['waiting_for'])}\n")


def _describe(record: dict[str, Any], *, full: bool) -> str:
    head = (f"{record['id']}  {record['updated_at']}  {record['state']:<16} {record['kind']:<18} "
            f"{record['proposed_by']} via {record['face']}")
    if not full:  # the preview on one line: what it does, then the items it touches
        lines = [line.strip().removeprefix("- ") for line in str(record["preview"]).splitlines() if line.strip()]
        summary = " ".join(lines[:1]) + (" " + "; ".join(lines[1:]) if len(lines) > 1 else "")
        return f"{head}  {summary[:LIST_PREVIEW_CHARS]}"
    return f"{head}\n\n{record['preview']}" + (f"\n\n{record['error']}" if record.get("error") else "")
