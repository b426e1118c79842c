"""The architecture's import rules (DESIGN.md, Layout; README.md, Layout), checked on the source.

- the core (every package but the faces and the process layer) imports no face and no process code;
- a face (`rpc`, `shim`, `mcp`) never imports another face;
- no two packages of zocratesd import each other, directly or around a cycle; nor, inside a
  package, do two of its modules or subpackages (`engine.answer` and `engine.research`);
- the library (Zotero's data, our index, the retrieval types) imports nothing of the engine: the
  engine (ADK, the agent, the answerer) imports the types from the library;
- `zocratesd stdio` (an editor starts one per chat panel) never loads ADK, SQLAlchemy or pydantic;
- `zocratesd mcp` (an MCP client starts one per chat) never loads ADK, SQLAlchemy or the core;
- the wire (`zocrates_wire`: framing, JSON-RPC, the sans-IO connection, the errors) is the bottom
  both sides stand on: it imports neither the daemon nor the client library, and no I/O library;
  the client library uses the daemon's package only for the few things named below, and the
  daemon uses only the client library's public modules;
- `zocratesd serve` loads none of its start-up plan's stages (process/startup.py) before its first
  reply, and every module a stage names exists.

Every import counts, at module level or inside a function, `TYPE_CHECKING` blocks included: a
type-only import is still a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zocratesd.process.startup import ENGINE, SHIM, WIRE

PACKAGE = Path(__file__).resolve().parents[2] / "zocratesd"
WIRE_PACKAGE = PACKAGE.parent / "zocrates_wire"
CLIENT = PACKAGE.parent / "clients" / "python" / "zocrates_client"

FACES = frozenset({"rpc", "shim", "mcp"})
# The composition root: it builds the core and hands it to the faces.
PROCESS = frozenset({"process", "cli", "__main__"})
# Modules of zocratesd that `zocratesd stdio` may never load (it must start in milliseconds).
STDIO_FORBIDDEN = ("google.adk", "google.genai", "sqlalchemy", "pydantic", "starlette", "uvicorn", "httpx")


def _unit(module: str) -> str | None:
    """The package (or top-level module) a dotted zocratesd module belongs to; None for the root."""
    parts = module.split(".")
    if parts[0] != "zocratesd":
        return None
    return parts[1] if len(parts) > 1 else None


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every zocratesd import in one file, resolved to the imported module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from zocratesd import locations`, `from zocratesd.engine import telemetry`: a name that
            # is a module of the package is that module; any other name is the package's own.
            pkg_dir = PACKAGE.parent.joinpath(*mod.split("."))
            subs = [a.name for a in node.names if (pkg_dir / a.name).is_dir() or (pkg_dir / f"{a.name}.py").exists()]
            for name in subs:
                yield node.lineno, f"{mod}.{name}"
            if len(subs) < len(node.names) and mod != "zocratesd":
                yield node.lineno, mod


def _edges() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, where) for every import across two units of zocratesd."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _unit(_module_name(path))
        if src is None:
            continue
        for line, mod in _imports(path):
            dst = _unit(mod)
            if dst is not None and dst != src:
                out.append((src, dst, f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}"))
    return out


def test_the_rules_see_the_imports_they_judge() -> None:
    """A parser that found nothing would pass every rule below."""
    edges = {(a, b) for a, b, _ in _edges()}
    assert ("rpc", "core") in edges and ("shim", "core") in edges and ("core", "store") in edges
    assert ("process", "rpc") in edges


def test_the_core_imports_no_face_and_no_process_code() -> None:
    bad = [where for src, dst, where in _edges()
           if src not in FACES | PROCESS and dst in FACES | PROCESS]
    assert not bad, "the core must not import a face or the process layer:\n" + "\n".join(bad)


# The wire's models are the contract every face derives its shapes from (the MCP tools' arguments
# take their limits from the daemon's params models): shared, not another face's internals.
WIRE_CONTRACT = "zocratesd.rpc.models"


def test_a_face_never_imports_another_face() -> None:
    bad = [where for src, dst, where in _edges()
           if src in FACES and dst in FACES and not where.endswith(f" imports {WIRE_CONTRACT}")]
    assert not bad, "faces are independent adapters over the core:\n" + "\n".join(bad)


def test_the_library_imports_nothing_of_the_engine() -> None:
    """The retrieval types are made where passages are made (library/retrieval.py); the engine
    imports them from there, never the other way round."""
    edges = _edges()
    bad = [where for src, dst, where in edges if src == "library" and dst == "engine"]
    assert not bad, "the library must not depend on the engine:\n" + "\n".join(bad)
    assert ("engine", "library") in {(a, b) for a, b, _ in edges}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _packages() -> list[str]:
    """Every package of zocratesd, dotted: "zocratesd", "zocratesd.engine", "zocratesd.engine.answer", ..."""
    return sorted(_module_name(p.parent / "__init__.py") for p in PACKAGE.rglob("__init__.py"))


def _member(package: str, module: str) -> str | None:
    """The direct child of `package` (a module or subpackage) that `module` is or lies in; None
    for the package itself (its __init__: a package's face re-exports its children, and every child
    is loaded after it anyway) and for modules outside it."""
    if not module.startswith(package + "."):
        return None
    return module[len(package) + 1:].split(".")[0]


def _package_cycles(package: str) -> tuple[list[list[str]], list[str]]:
    """Import cycles among the direct children of `package`, each child standing for everything
    under it, and the imports that make them."""
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _member(package, _module_name(path))
        if src is None:
            continue
        for line, mod in _imports(path):
            dst = _member(package, mod)
            if dst is not None and dst != src:
                graph.setdefault(src, set()).add(dst)
                where.setdefault((src, dst), f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}")
    cycles = _cycles(graph)
    detail = []
    for comp in cycles:
        members = set(comp)
        detail += [w for (a, b), w in where.items() if a in members and b in members]
    return cycles, sorted(detail)


# What the wire may not import: either side, or anything that does I/O or runs a loop.
WIRE_FORBIDDEN = ("zocratesd", "zocrates_client", "anyio", "asyncio", "trio", "socket", "selectors", "threading")

# The daemon's modules the client library uses, and why: each is standard-library only.
CLIENT_USES_OF_DAEMON = {
    "zocratesd.locations": "finding the daemon: its runtime files and the rules for trusting them",
    "zocratesd.rpc.pump": "starting the daemon and connecting to it, as `zocratesd stdio` does",
    "zocratesd.logtext": "escaping the daemon's text for a terminal: one rule for the daemon and the CLI",
    "zocratesd.rpc.library_status": "the library status rendered as `zocratesd status` renders it",
    "zocratesd.weblink": "`zocrates open`: the web app's link, made as `zocratesd open` makes it",
}


def _imports_under(root: Path) -> list[tuple[str, str]]:
    """(module imported, where) for every import in the files under `root`."""
    return [(mod, f"{path.relative_to(PACKAGE.parent)}:{line} imports {mod}")
            for path in sorted(root.rglob("*.py")) for line, mod in _imports(path)]


def test_the_wire_imports_neither_side_and_does_no_io() -> None:
    imported = _imports_under(WIRE_PACKAGE)
    assert any(mod.startswith("zocrates_wire.") for mod, _ in imported)  # the parser sees the package
    bad = [where for mod, where in imported if mod.split(".")[0] in WIRE_FORBIDDEN]
    assert not bad, "the wire is the bottom layer, sans-IO:\n" + "\n".join(bad)


def test_the_client_uses_the_wire_and_only_named_daemon_modules() -> None:
    imported = _imports_under(CLIENT)
    assert any(mod.startswith("zocrates_wire.") for mod, _ in imported)
    bad = [where for mod, where in imported if mod.startswith("zocratesd.") and mod not in CLIENT_USES_OF_DAEMON]
    assert not bad, "the client library imports the daemon beyond what it needs of it:\n" + "\n".join(bad)


def test_the_daemon_uses_only_the_client_librarys_public_modules() -> None:
    imported = _imports_under(PACKAGE)
    assert any(mod.startswith("zocrates_client") for mod, _ in imported)
    bad = [where for mod, where in imported if mod.startswith("zocrates_client._")]
    assert not bad, "a private module of the client library is imported from outside it:\n" + "\n".join(bad)


def test_the_rules_see_every_package() -> None:
    assert {"zocratesd", "zocratesd.engine", "zocratesd.engine.answer", "zocratesd.library"} <= set(_packages())


def test_no_package_import_cycle() -> None:
    cycles, detail = _package_cycles("zocratesd")
    assert not cycles, f"package import cycles {cycles}:\n" + "\n".join(detail)


@pytest.mark.parametrize("package", [p for p in _packages() if p != "zocratesd"])
def test_no_import_cycle_inside_a_package(package: str) -> None:
    """The modules of one package, too: a cycle there makes the import order decide which of the
    two sees the other half-made, and the two cannot be understood apart."""
    cycles, detail = _package_cycles(package)
    assert not cycles, f"import cycles in {package}: {cycles}:\n" + "\n".join(detail)


def test_stdio_loads_no_adk_sqlalchemy_or_pydantic(tmp_path: Path) -> None:
    """Runs `zocratesd stdio`'s real dispatch up to the point where the pump starts, then lists
    what was imported."""
    probe = textwrap.dedent(
        """
        import sys
        from zocratesd import cli
        from zocratesd.rpc import pump

        def fake_run(data_dir, serve_args):
            print("\\n".join(sorted(sys.modules)))
            return 0

        pump.run = fake_run
        sys.exit(cli.main(["stdio", "--zotero-data-dir", sys.argv[1]]))
        """
    )
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.split()
    assert "zocratesd.rpc.pump" in loaded
    heavy = [m for m in loaded if m.startswith(STDIO_FORBIDDEN)]
    assert not heavy, f"`zocratesd stdio` loads {heavy[:10]}"


@pytest.mark.parametrize("module", ["zocratesd.rpc.pump"])
def test_stdio_modules_import_nothing_heavy_even_lazily(module: str) -> None:
    """Function-level imports of the pump (run only when it starts a daemon) stay light too."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    seen: set[str] = set()
    todo = [path]
    heavy: list[str] = []
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for line, mod in _imports(p):
            if mod.startswith(STDIO_FORBIDDEN):
                heavy.append(f"{p.relative_to(PACKAGE.parent)}:{line} imports {mod}")
            if mod.startswith(("zocratesd", "zocrates_wire")):
                target = PACKAGE.parent / (mod.replace(".", "/") + ".py")
                if not target.exists():
                    target = PACKAGE.parent / mod.replace(".", "/") / "__init__.py"
                if target.exists():
                    todo.append(target)
    assert not heavy, "\n".join(heavy)


# What `zocratesd serve` may not load before its first reply: every module of the start-up plan's
# stages (process/startup.py: the wire stack, the HTTP shim's server stack, the engine), loaded in
# the background once the socket serves; and besides them, the library index (loaded with the
# engine; the library's retrieval types are allowed) and xml.sax (core/context.py escapes by itself).
FIRST_REPLY_FORBIDDEN = (*STDIO_FORBIDDEN[:4], *WIRE.modules, *SHIM.modules, *ENGINE.modules, "starlette", "h11",
                         "click", "zocratesd.library.", "zocratesd.shim.routes", "zocratesd.rpc.models", "xml.sax")
# The catalogue's helpers (core/catalogue.py imports them at its top) use the standard library alone:
# the SQL of browsing the index, the suggestions' limits, the dense stage's switch (its model loads
# on first use), the records' keys, the status's shape. The index itself (`Library`, FTS5, the indexer) stays out.
FIRST_REPLY_ALLOWED = frozenset({"zocratesd.library.retrieval", "zocratesd.library.catalog", "zocratesd.library.suggestions",
                                 "zocratesd.library.dense", "zocratesd.library._records",
                                 "zocratesd.library.status"})


def test_the_first_reply_loads_no_wire_stack_shim_server_or_library_index(tmp_path: Path) -> None:
    """Builds what process/boot.py builds before it serves (the core without its engine, the
    staged method table and connections, the HTTP shim bound), answers an `initialize` through the
    dispatcher, then lists what was imported. The shim's port is bound (daemon.json names it) but
    not yet served."""
    probe = textwrap.dedent(
        """
        import sys, anyio
        from pathlib import Path
        from zocratesd import cli  # noqa: F401
        from zocratesd.process import boot, lifecycle, transports  # noqa: F401
        from zocratesd.process.connections import Connections
        from zocratesd.config import load_config
        from zocratesd.core.daemon import Daemon
        from zocratesd.rpc import dispatch, peer  # noqa: F401
        from zocratesd.rpc.handshake import StagedMethods
        from zocratesd.shim import HttpFace

        class Peer:  # what the ACP face keeps of a connection: its state, name and close callbacks
            state, name, on_close = {}, "probe", []

        async def main():
            data_dir = Path(sys.argv[1])
            config = load_config(data_dir, {"http": {"port": 0}})
            daemon = Daemon(data_dir, config, load_engine=False)
            methods = StagedMethods(daemon.version, config.rpc.max_frame_bytes, daemon.library_status)
            Connections(methods, max_frame_bytes=config.rpc.max_frame_bytes)
            face = HttpFace(daemon, config.http)
            face.bind(data_dir)
            assert face.port > 0
            reply = await dispatch.call(methods, Peer(), "initialize", {"protocolVersion": 1, "clientInfo": {}})
            assert reply["result"]["agentInfo"]["version"] == daemon.version, reply
            status = await dispatch.call(methods, Peer(), "_zocrates/library/status", {})
            assert status["result"]["state"] == "starting", status
            await daemon.aclose()
        anyio.run(main)
        print("\\n".join(sorted(sys.modules)))
        """
    )
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = out.stdout.split()
    assert "zocratesd.shim.server" in loaded and "zocratesd.core.daemon" in loaded
    early = [m for m in loaded if m.startswith(FIRST_REPLY_FORBIDDEN) and m not in FIRST_REPLY_ALLOWED]
    assert not early, f"the daemon loads {early[:10]} before its first reply"


@pytest.mark.parametrize("stage", [WIRE, SHIM, ENGINE], ids=lambda s: s.name)
def test_every_module_of_the_start_up_plan_exists(stage: Any) -> None:
    """A stage that named a module moved away would fail the daemon's start only at run time."""
    missing = [m for m in stage.modules if importlib.util.find_spec(m) is None]
    assert not missing, f"the start-up plan's {stage.name!r} stage names {missing}"


# What `zocratesd mcp` may not load: it is a client of the daemon (zocratesd/mcp/), not the daemon.
MCP_FORBIDDEN = ("google.adk", "google.genai", "sqlalchemy", "zocratesd.core", "zocratesd.engine", "zocratesd.library",
                 "zocratesd.store", "zocratesd.shim")


def test_mcp_loads_no_adk_and_no_core(tmp_path: Path) -> None:
    """Runs `zocratesd mcp`'s real dispatch up to serving stdio, then lists what was imported."""
    probe = textwrap.dedent(
        """
        import sys
        from zocratesd import cli, mcp

        async def fake_serve(server, wire_in, wire_out, **options):
            print("\\n".join(sorted(sys.modules)), file=sys.stderr)

        mcp.stdio.serve = fake_serve
        sys.exit(cli.main(["mcp", "--zotero-data-dir", sys.argv[1]]))
        """
    )
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = out.stderr.split()
    assert "zocratesd.mcp.server" in loaded and "mcp.server.lowlevel.server" in loaded
    heavy = [m for m in loaded if m.startswith(MCP_FORBIDDEN)]
    assert not heavy, f"`zocratesd mcp` loads {heavy[:10]}"
