"""`zocrates find-quote TEXT`: the items and pages of the library that have a quote (exact
matches first, then near ones: a few words changed), each with a link that opens the PDF at that
page. Exit 1 when no item has it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from zocrates_client.client import Client
from zocratesd.logtext import escape_for_log, escape_for_terminal

NO_MATCH: Final = "no item of the library has this quote, word for word or nearly"

COMMAND: Final = "find-quote"


def add_parser(commands: Any, leaf: list[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(COMMAND, help="find the item and page a quote comes from", parents=leaf)
    p.add_argument("quote", metavar="TEXT", help="the quoted sentence (`-`: read stdin)")
    p.add_argument("--limit", type=int, default=5, help="matches at most, 1-20 (default 5)")
    p.add_argument("--library", help='only this library ("user" or "groups/<id>")')


async def run(client: Client, args: argparse.Namespace, found: list[bool]) -> None:
    """Prints the matches; `found` gets whether there was one."""
    quote = sys.stdin.read() if args.quote == "-" else args.quote
    params: dict[str, Any] = {"quote": quote, "limit": args.limit}
    if args.library:
        params["library"] = args.library
    result: dict[str, Any] = await client.call("_zocrates/library/find_quote", params)
    if args.json:
        print(json.dumps(result, ensure_ascii=True), flush=True)
    else:
        for m in result["matches"]:
            page = f", p. {m['page_label']}" if m.get("page_label") else ""
            how = "exact" if m["exact"] else f"near, {m['score']:.2f}"
            print(escape_for_terminal(f"{m['title']}{page} ({how})"))
            print("    " + escape_for_log(m["link"]))
    found.append(bool(result["matches"]))
