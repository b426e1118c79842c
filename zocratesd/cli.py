"""`zocratesd serve|stdio|mcp|status|stop|open|service|demo|setup|doctor|plugin`.

Each subcommand imports what it runs, in its own function: `zocratesd stdio` (an editor starts one
per chat panel) and `zocratesd mcp` must start in milliseconds, without the daemon's modules
(tests/unit/test_import_rules.py); `serve` hands over to the process layer (process/startup.py).
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zocratesd import __version__, locations

STOP_TIMEOUT_S = 30.0
EXIT_NOT_RUNNING = 3  # LSB: "program is not running"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zocratesd", description="The Zocrates research-assistant daemon.")
    p.add_argument("--version", action="version", version=f"zocratesd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def data_dir_arg(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--zotero-data-dir",
            metavar="D",
            help=(
                "the Zotero data dir (default: $ZOTERO_DATA_DIR, else the one Zotero's settings name, else ~/Zotero,"
                " else a per-user data dir)"
            ),
        )

    serve = sub.add_parser("serve", help="run the daemon in the foreground")
    data_dir_arg(serve)
    serve.add_argument("--socket", metavar="PATH", help="Unix socket path (default: in the user runtime dir)")
    serve.add_argument("--http-port", type=int, metavar="N", help="HTTP shim port (0: any free port)")
    serve.add_argument("--no-http", action="store_true", help="do not serve the HTTP shim")
    serve.add_argument("--model", metavar="M", help="offline | openai[:NAME] | gemini[:NAME]")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.add_argument(
        "--idle-exit-after",
        type=_positive_seconds,
        metavar="SECONDS",
        help="when socket-activated (systemd, launchd): exit once no connection has been open this long",
    )

    stdio = sub.add_parser("stdio", help="speak ACP on stdin/stdout (for editors)")
    data_dir_arg(stdio)
    stdio.add_argument("--standalone", action="store_true", help="run the core in this process instead of a daemon")
    stdio.add_argument("--model", metavar="M", help="with --standalone, or for a daemon this starts")
    stdio.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    mcp = sub.add_parser("mcp", help="an MCP server on stdin/stdout (Claude Desktop, Claude Code, Cursor, ...)")
    data_dir_arg(mcp)
    mcp.add_argument("--standalone", action="store_true", help="run the core in this process instead of a daemon")
    mcp.add_argument("--model", metavar="M", help="with --standalone, or for a daemon this starts")
    mcp.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    status = sub.add_parser("status", help="is a daemon serving this data dir?")
    data_dir_arg(status)
    status.add_argument("--json", action="store_true", help="print daemon.json plus liveness as JSON")

    stop = sub.add_parser("stop", help="stop the daemon of this data dir (SIGTERM, then wait)")
    data_dir_arg(stop)

    demo = sub.add_parser("demo", help="write a small demo Zotero library to try Zocrates on")
    demo.add_argument("--dir", metavar="D", help="where (default: ~/Zotero-demo); never an existing Zotero library")

    open_ = sub.add_parser("open", help="print (and open in a browser) the sidebar web app's URL, with a one-time code")
    data_dir_arg(open_)
    open_.add_argument("--no-browser", action="store_true", help="only print the URL")

    service = sub.add_parser(
        "service", help="start the daemon on demand through systemd (Linux) or launchd (macOS)"
    )
    actions = service.add_subparsers(dest="action", required=True)
    install = actions.add_parser("install", help="install and enable the socket-activated service")
    uninstall = actions.add_parser("uninstall", help="stop, disable and remove the service")
    service_status = actions.add_parser("status", help="what is installed, enabled and running")
    for sp in (install, uninstall, service_status):
        data_dir_arg(sp)
    for sp in (install, uninstall):
        sp.add_argument("--dry-run", action="store_true", help="print the files and commands; change nothing")
    install.add_argument(
        "--idle-exit-after",
        type=_positive_seconds,
        metavar="SECONDS",
        help="let the daemon exit after this long without a connection (it restarts on the next one)",
    )

    setup = sub.add_parser("setup", help="set up zocratesd for your Zotero: the service, the plugin, your MCP/ACP clients")
    data_dir_arg(setup)
    setup.add_argument("--yes", action="store_true", help="answer yes to every question (for scripts)")
    setup.add_argument("--dry-run", action="store_true", help="print everything it would do; change nothing")
    setup.add_argument("--plugin-out", metavar="PATH", help="where to write the plugin's XPI (default: ~/Downloads, else ~)")

    doctor = sub.add_parser("doctor", help="check every piece: Zotero, the daemon, the service, the plugin, clients, model")
    data_dir_arg(doctor)
    doctor.add_argument("--json", action="store_true", help="the report as JSON")

    plugin = sub.add_parser("plugin", help="write the Zotero plugin (an XPI) that matches this zocratesd")
    plugin.add_argument("--out", metavar="PATH", help="a file or a directory (default: ~/Downloads, else ~)")
    return p


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds: {text!r}")
    return value


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    o: dict[str, Any] = {}
    if getattr(args, "model", None):
        provider, _, name = args.model.partition(":")
        o["model"] = {"provider": provider, **({"name": name} if name else {})}
    http: dict[str, Any] = {}
    if getattr(args, "no_http", False):
        http["enabled"] = False
    if getattr(args, "http_port", None) is not None:
        http["port"] = args.http_port
    if http:
        o["http"] = http
    return o


def _serve(args: argparse.Namespace, data_dir: Path, before_stage: Callable[[str], None] | None) -> int:
    # Off until the engine is up: the objects a start makes live as long as the daemon, and the
    # collector's passes over them cost a quarter of the engine's import and find almost nothing
    # (process/lifecycle.py freeze_startup_heap, which turns it on, has the numbers).
    gc.disable()
    # pydantic looks for plugins (a scan of every installed package's entry points) when it makes
    # its first model; the daemon uses none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    import anyio

    from zocratesd.process.boot import ServeOptions, serve, serve_face_standalone, serve_stdio_standalone

    opts = ServeOptions(
        data_dir=data_dir,
        socket_path=Path(args.socket).expanduser().absolute() if getattr(args, "socket", None) else None,
        overrides=_overrides(args),
        log_level=args.log_level,
        idle_exit_after=getattr(args, "idle_exit_after", None),
        before_stage=before_stage,
    )
    if args.command == "mcp":
        from zocratesd import mcp

        main: Any = functools.partial(serve_face_standalone, face=functools.partial(mcp.serve_standalone_face, data_dir))
    else:
        main = serve_stdio_standalone if args.command == "stdio" else serve
    try:
        return int(anyio.run(main, opts))
    finally:
        gc.enable()  # a start that failed before the engine was up left it off


def _library_status(socket_path: str) -> dict[str, Any] | str:
    """The running daemon's `_zocrates/library/status`, or why it could not be had."""
    from zocratesd.rpc import library_status

    try:
        return library_status.fetch(socket_path)
    except (OSError, ValueError) as exc:
        return f"could not ask the daemon ({exc})"


def _status(args: argparse.Namespace, data_dir: Path) -> int:
    from zocratesd.rpc import library_status

    info = locations.read_daemon_info(data_dir)
    live = locations.live_daemon(data_dir)
    library = _library_status(live.socket) if live is not None else None
    if args.json:
        extra = {"library": library} if library is not None else {}
        print(json.dumps({"running": live is not None, "data_dir": str(data_dir), **(info.raw if info else {}), **extra}))
    elif live is None:
        print(f"zocratesd is not running for {data_dir}")
        print(f"start it with `zocratesd serve --zotero-data-dir {data_dir}` (or ask a question: `zocrates ask TEXT`)")
    else:
        print(f"zocratesd {live.version} is running for {data_dir}")
        print(f"  pid        {live.pid}")
        print(f"  socket     {live.socket}")
        print(f"  started at {live.raw.get('started_at')}")
        http = live.raw.get("http")
        url = f"http://{http['host']}:{http['port']}" if http else "off"
        print(f"  http       {url}")
        if isinstance(library, dict):
            for line in library_status.describe(library):
                print(f"  {line}")
        else:
            print(f"  library    {library}")
    return 0 if live is not None else EXIT_NOT_RUNNING


def _has_display() -> bool:
    """Whether a graphical browser can open here; without one, `webbrowser` would start a text
    browser in this terminal (lynx, w3m) or fail."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _open(args: argparse.Namespace, data_dir: Path) -> int:
    live = locations.live_daemon(data_dir)
    if live is None:
        print(f"zocratesd is not running for {data_dir}; start it with `zocratesd serve` "
              "(or `zocratesd service install`)", file=sys.stderr)
        return EXIT_NOT_RUNNING
    from zocratesd.weblink import CODE_TTL_WORDS, WebLinkError, open_in_browser, web_app_link

    browse = not args.no_browser and _has_display()
    try:
        link = web_app_link(live.raw, page_file=browse)
    except WebLinkError as exc:
        print(f"zocratesd open: {exc}", file=sys.stderr)
        return 1
    if link is None:
        print("this daemon serves no HTTP (started with --no-http or http.enabled false)", file=sys.stderr)
        return 1
    print(link.url, flush=True)
    if browse:
        if not open_in_browser(link):
            print(f"no browser could be started; open the URL above yourself (it works once, within {CODE_TTL_WORDS})",
                  file=sys.stderr)
    else:
        print(f"the URL opens the web app once, within {CODE_TTL_WORDS}", file=sys.stderr)
    return 0


def _stop(args: argparse.Namespace, data_dir: Path) -> int:
    live = locations.live_daemon(data_dir)
    if live is None:
        print(f"zocratesd is not running for {data_dir}")
        return 0
    os.kill(live.pid, signal.SIGTERM)
    lock = locations.state_dir(data_dir) / locations.LOCK_NAME
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        if not locations.lock_is_held(lock):
            print(f"stopped zocratesd (pid {live.pid})")
            return 0
        time.sleep(0.05)
    print(f"zocratesd (pid {live.pid}) did not stop within {STOP_TIMEOUT_S:.0f} s", file=sys.stderr)
    return 1


def _service(args: argparse.Namespace, data_dir: Path) -> int:
    from zocratesd.service_manager import installer

    settings = installer.Settings(
        data_dir=data_dir, home=Path.home(), idle_exit_after=getattr(args, "idle_exit_after", None)
    )
    manager = installer.manager_for(settings)
    try:
        if args.action == "install":
            return installer.install(manager, dry_run=args.dry_run)
        if args.action == "uninstall":
            return installer.uninstall(manager, dry_run=args.dry_run)
        return installer.status(manager)
    except (installer.ServiceError, locations.RuntimeFileError) as exc:
        print(f"zocratesd service {args.action}: {exc}", file=sys.stderr)
        return 1


def _demo(args: argparse.Namespace) -> int:
    from zocratesd import demo

    target = Path(args.dir).expanduser().absolute() if args.dir else demo.default_dir()
    try:
        wrote = demo.write_demo(target)
    except (demo.DemoError, OSError) as exc:
        print(f"zocratesd demo: {exc}", file=sys.stderr)
        return 1
    print(("wrote" if wrote else "already there:") + f" a demo Zotero library in {target}")
    print(demo.next_steps(target))
    return 0


def _setup(args: argparse.Namespace) -> int:
    from zocratesd.install import setup

    opts = setup.Options(
        home=Path.home(), data_dir_flag=args.zotero_data_dir, yes=args.yes, dry_run=args.dry_run,
        plugin_out=Path(args.plugin_out).expanduser().absolute() if args.plugin_out else None,
    )
    try:
        return setup.run(opts)
    except setup.SetupError as exc:
        print(f"zocratesd setup: {exc}", file=sys.stderr)
        return 1


def _doctor(args: argparse.Namespace) -> int:
    import msgspec

    from zocratesd.install import doctor
    from zocratesd.rpc import library_status

    report = doctor.run(doctor.context(Path.home(), args.zotero_data_dir), library_status.fetch)
    print(json.dumps(msgspec.to_builtins(report), indent=2) if args.json else doctor.render(report))
    return 0 if report.passed else 1


def _plugin(args: argparse.Namespace) -> int:
    from zocratesd.install import plugin, setup

    target = Path(args.out).expanduser().absolute() if args.out else setup.default_plugin_dir(Path.home())
    try:
        path = plugin.write_xpi(target)
    except (plugin.PluginError, OSError) as exc:
        print(f"zocratesd plugin: {exc}", file=sys.stderr)
        return 1
    print(f"wrote the Zocrates plugin {__version__} to {path}")
    print(plugin.install_clicks(path))
    return 0


def main(argv: list[str] | None = None, *, before_stage: Callable[[str], None] | None = None) -> int:
    """The console script. `before_stage` is called before each stage of a daemon's start-up plan
    loads (process/startup.py): a test's hook, none in production."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    if args.command in ("setup", "doctor", "plugin"):
        # They say where their data dir came from, so they read the choice itself (zotero_profile.py).
        return {"setup": _setup, "doctor": _doctor, "plugin": _plugin}[args.command](args)
    data_dir = locations.resolve_data_dir(args.zotero_data_dir)
    if args.command == "stdio" and not args.standalone:
        from zocratesd.rpc import pump

        serve_args = ["--model", args.model] if args.model else []
        return pump.run(data_dir, serve_args)
    if args.command == "mcp" and not args.standalone:
        from zocratesd import mcp

        return int(mcp.run(data_dir, serve_args=["--model", args.model] if args.model else [], log_level=args.log_level))
    if args.command in ("serve", "stdio", "mcp"):
        return _serve(args, data_dir, before_stage)
    if args.command == "status":
        return _status(args, data_dir)
    if args.command == "service":
        return _service(args, data_dir)
    if args.command == "open":
        return _open(args, data_dir)
    return _stop(args, data_dir)


if __name__ == "__main__":
    sys.exit(main())
