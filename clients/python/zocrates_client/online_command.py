"""`zocrates online TERMS`: scholarly works beyond the library (OpenAlex, arXiv, Crossref), each
marked when the library already holds it. Only the terms leave the machine; `online.mode = off`
refuses (exit 1, nothing sent)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

from zocrates_client.client import Client
from zocratesd.logtext import escape_for_log, escape_for_terminal

COMMAND: Final = "online"
ABSTRACT_CHARS: Final = 400


def add_parser(commands: Any, leaf: list[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(COMMAND, help="search scholarly literature online (OpenAlex, arXiv, Crossref)", parents=leaf)
    p.add_argument("terms", metavar="TERMS", help="the search terms (only they leave this machine)")
    p.add_argument("--limit", type=int, default=10, help="works per provider, 1-25 (default 10)")
    p.add_argument("--from", dest="year_from", type=int, metavar="YEAR", help="published in or after YEAR")
    p.add_argument("--to", dest="year_to", type=int, metavar="YEAR", help="published in or before YEAR")


async def run(client: Client, args: argparse.Namespace) -> None:
    params: dict[str, Any] = {"query": args.terms, "limit": args.limit}
    if args.year_from is not None:
        params["yearFrom"] = args.year_from
    if args.year_to is not None:
        params["yearTo"] = args.year_to
    result: dict[str, Any] = await client.call("_zocrates/online/search", params)
    if args.json:
        print(json.dumps(result, ensure_ascii=True), flush=True)
    else:
        for n, w in enumerate(result["works"], start=1):
            who = ", ".join(w["authors"][:3]) + (" et al." if len(w["authors"]) > 3 else "")
            print(escape_for_terminal(f"[{n}] {w['title']} ({w['year'] or 'n.d.'})" + (f" — {who}" if who else "")))
            held = w.get("in_library")
            print("    " + (f"in your library: {held['link']}" if held else
                            escape_for_log(f"https://doi.org/{w['doi']}" if w["doi"] else w["url"] or "")))
            if w["abstract"]:
                text = w["abstract"] if len(w["abstract"]) <= ABSTRACT_CHARS else w["abstract"][:ABSTRACT_CHARS] + "…"
                print("    " + escape_for_terminal(text))
    if result.get("message"):
        sys.stderr.write(escape_for_log(result["message"]) + "\n")
