"""`zocrates cite [SESSION] --format bibtex|biblatex|csl-json|text --style NAME`: the bibliography of
what a session's answers cite (the most recent session when none is named), on stdout, ready for a
.bib file, a CSL-JSON file or a document. `--json` prints the daemon's whole result."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final

from zocrates_client.client import Client
from zocratesd.logtext import escape_for_log, escape_for_terminal

COMMAND: Final = "cite"
FORMATS: Final = ("bibtex", "biblatex", "csl-json", "text")


def add_parser(commands: Any, leaf: list[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(COMMAND, help="print the bibliography of what a session cited", parents=leaf)
    p.add_argument("session_id", nargs="?", metavar="SESSION", help="the session (default: the most recent one)")
    p.add_argument("--format", choices=FORMATS, default="bibtex", help="bibtex (default), biblatex, csl-json or text")
    p.add_argument("--style", metavar="NAME", help="with --format text: a CSL style installed in Zotero (default: APA)")
    p.add_argument("--answer", metavar="INVOCATION_ID", help="only this answer's sources")


async def run(client: Client, args: argparse.Namespace, most_recent: Callable[[Client], Awaitable[str | None]]) -> None:
    session_id = args.session_id or await most_recent(client)
    if session_id is None:
        raise SystemExit("zocrates cite: there is no session yet; ask a question first")
    params: dict[str, Any] = {"sessionId": session_id, "format": args.format}
    if args.style:
        params["style"] = args.style
    if args.answer:
        params["invocationId"] = args.answer
    result: dict[str, Any] = await client.call("_zocrates/citations/export", params)
    if args.json:
        print(json.dumps(result, ensure_ascii=True), flush=True)
    else:
        sys.stdout.write(escape_for_terminal(result["text"]))
        sys.stdout.flush()
    if result.get("missing"):
        sys.stderr.write(escape_for_log(f"{len(result['missing'])} cited items are no longer in the library and are left out: "
                                        + ", ".join(result["missing"][:20])) + "\n")
