"""`zocratesd setup`: the one command after the install.

In order: find the Zotero data dir (the flag, $ZOTERO_DATA_DIR, Zotero's own prefs.js, `~/Zotero`)
and say which Zotero made it; install the service (`zocratesd service install`'s installer, asked
first); write the plugin's XPI and say how to install it; offer each MCP/ACP client found its entry,
shown in full and written only on yes (a backup first, the file merged, never replaced).

`--yes` answers yes to every question (scripts); `--dry-run` prints everything it would do, writes
nothing and runs nothing but read-only queries. Without a terminal and without `--yes`, a question
is answered no, and the output says how to accept.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import platformdirs

from zocratesd import locations
from zocratesd.install import client_configs, doctor, plugin
from zocratesd.logtext import escape_for_terminal
from zocratesd.service_manager import installer

Ask = Callable[[str], bool]


@dataclass(frozen=True)
class Options:
    home: Path
    data_dir_flag: str | None
    yes: bool = False
    dry_run: bool = False
    plugin_out: Path | None = None
    environ: Mapping[str, str] | None = None


def default_plugin_dir(home: Path) -> Path:
    """Where the XPI goes unless told: the Downloads folder (a file dialog shows it first), else home."""
    downloads = Path(platformdirs.user_downloads_dir())
    return downloads if downloads.is_dir() and downloads.is_relative_to(home) else home


def terminal_ask(out: IO[str]) -> Ask:
    def ask(question: str) -> bool:
        if not sys.stdin.isatty():
            print(f"{question} [y/N] no (no terminal to ask on; run with --yes to accept)", file=out)
            return False
        out.flush()
        try:
            answer = input(f"{question} [y/N] ")
        except EOFError:
            return False
        return answer.strip().lower() in ("y", "yes")

    return ask


class SetupError(Exception):
    """Set-up cannot go on; the message says what to do."""


def run(opts: Options, out: IO[str] | None = None, ask: Ask | None = None) -> int:
    out = out or sys.stdout
    environ = dict(os.environ if opts.environ is None else opts.environ)
    asker = ask or terminal_ask(out)

    def confirm(question: str) -> bool:
        if opts.dry_run:
            print(f"{question} (dry run: nothing is done)", file=out)
            return True  # show what a yes would do
        if opts.yes:
            print(f"{question} yes (--yes)", file=out)
            return True
        return asker(question)

    ctx = doctor.context(opts.home, opts.data_dir_flag, environ)
    print(f"Zotero data dir: {ctx.data_dir} (from {ctx.data_dir_source})", file=out)
    data = doctor.check_data_dir(ctx)
    if data.status == "fail":
        raise SetupError(f"{data.summary}; {data.fix}")
    made = doctor.check_schema(ctx)
    print(f"Zotero: {made.summary}" + (f"; {made.fix}" if made.fix else ""), file=out)
    if made.status == "fail":
        raise SetupError(f"{made.summary}; {made.fix}")

    _service(ctx, opts, confirm, out)
    _plugin(ctx, opts, out)
    written = _clients(ctx, opts, confirm, out)
    print("", file=out)
    verb = "Would be done" if opts.dry_run else "Done"
    print(f"{verb}. Restart Zotero once the plugin is installed"
          + (f", and restart {', '.join(written)} to load zocrates" if written else "")
          + "; `zocratesd doctor` checks every piece.", file=out)
    return 0


def _already(title: str, current: doctor.Check, out: IO[str]) -> bool:
    """Start a step's section; True when doctor finds the step done already (said so)."""
    print("", file=out)
    print(f"== {title}", file=out)
    if current.status == "ok":
        print(f"already {current.summary}", file=out)
    return current.status == "ok"


def _service(ctx: doctor.Context, opts: Options, confirm: Callable[[str], bool], out: IO[str]) -> None:
    if _already("The service: zocratesd starts when Zotero or a client first asks for it", doctor.check_service(ctx), out):
        return
    if not confirm(f"Install zocratesd as a service for {ctx.data_dir}?"):
        print("skipped: `zocratesd service install` does it later", file=out)
        return
    manager = installer.manager_for(installer.Settings(data_dir=ctx.data_dir, home=ctx.home), environ=ctx.environ)
    try:
        installer.install(manager, dry_run=opts.dry_run, out=out)
    except (installer.ServiceError, locations.RuntimeFileError) as exc:
        print(f"the service was not installed: {exc}", file=out)


def _plugin(ctx: doctor.Context, opts: Options, out: IO[str]) -> None:
    if _already("The Zotero plugin (the chat pane in Zotero)", doctor.check_plugin(ctx), out):
        return
    target = opts.plugin_out or default_plugin_dir(ctx.home)
    path = target / plugin.default_xpi_name() if target.is_dir() else target
    if opts.dry_run:
        print(f"would write the plugin to {path.absolute()}", file=out)
        print(plugin.install_clicks(path.absolute()), file=out)
        return
    try:
        written = plugin.write_xpi(path)
    except (plugin.PluginError, OSError) as exc:
        print(f"the plugin could not be written: {exc}", file=out)
        return
    print(f"wrote the plugin to {written}", file=out)
    print(plugin.install_clicks(written), file=out)


def _clients(ctx: doctor.Context, opts: Options, confirm: Callable[[str], bool], out: IO[str]) -> list[str]:
    written: list[str] = []
    command = client_configs.zocratesd_command()
    clients = [c for c in client_configs.known_clients(ctx.home, ctx.environ) if c.present()]
    print("", file=out)
    print("== Assistants that can use your library (MCP/ACP clients)", file=out)
    if not clients:
        print("none found (Claude Desktop, Cursor, Zed, Gemini CLI); README.md, \"MCP clients\", shows the entry for others",
              file=out)
        return written
    if command is None:
        print("cannot tell where the zocratesd command is (not beside this Python, not on PATH); "
              "the clients are left as they are", file=out)
        return written
    for client in clients:
        p = client_configs.plan(client, command, ctx.data_dir)
        print("", file=out)
        if p.action == "unchanged":
            print(f"{client.name}: {client.path} already runs zocrates", file=out)
            continue
        if p.action == "broken":
            print(f"{client.name}: {client.path} is left alone: {p.problem}", file=out)
            continue
        if p.action == "manual":
            print(f"{client.name}: {client.path} is left alone: {p.problem}:", file=out)
            print(p.entry_json(), file=out)
            continue
        what = {"create": "create", "add": "add zocrates to", "update": "update the zocrates entry in"}[p.action]
        print(f"{client.name}: would {what} {client.path}; the file would read, in full:", file=out)
        shown = escape_for_terminal(p.new_text or "")  # the user's own file, but never raw escapes on a terminal
        out.write(shown if shown.endswith("\n") else shown + "\n")
        if p.action == "update":
            print(f"(the entry it replaces: {p.current!r})", file=out)
        if p.action != "create":
            print(f"(a copy of the file as it is now is kept beside it: {client.path.name}{client_configs.BACKUP_INFIX}<time>)",
                  file=out)
        if not confirm(f"Write {client.path}?"):
            continue
        if opts.dry_run:
            continue
        try:
            backup = client_configs.apply(p)
        except OSError as exc:
            print(f"{client.path} was not written: {exc}", file=out)
            continue
        print(f"wrote {client.path}" + (f" (the previous file: {backup})" if backup else ""), file=out)
        written.append(client.name)
    return written
