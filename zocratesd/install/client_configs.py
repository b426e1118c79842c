"""The MCP and ACP clients' config files: where each keeps it, our entry, and a merge that keeps theirs.

| client | file | entry |
|---|---|---|
| Claude Desktop | `~/.config/Claude/claude_desktop_config.json` (macOS: `~/Library/Application Support/Claude/`) | `mcpServers.zocrates` |
| Cursor | `~/.cursor/mcp.json` | `mcpServers.zocrates` |
| Zed | `~/.config/zed/settings.json` (`$XDG_CONFIG_HOME/zed/` on Linux) | `agent_servers.Zocrates` (ACP: `zocratesd stdio`) |
| Gemini CLI | `~/.gemini/settings.json` | `mcpServers.zocrates` |

A client is offered only when its config directory exists (the app was installed or run).

The merge changes our one entry and nothing else. A plain JSON file is parsed and written back with
every other key as it was. Zed's and Gemini's files may hold comments (JSON with comments): a
rewrite through a JSON parser would drop them, so there our entry is edited as text instead (its
value replaced, or the member inserted right after the opening brace of the object that holds it),
every other character left as it was; a file whose shape does not allow that (a top level that is
not an object) is left alone, and the user is shown what to paste. Before any write, the file is copied
beside itself (`<name>.zocrates-backup-<time>`); the write is atomic and keeps the file's mode.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from zocratesd.install import files

MCP_KEY: Final = "mcpServers"
MCP_NAME: Final = "zocrates"
ZED_KEY: Final = "agent_servers"
ZED_NAME: Final = "Zocrates"
# Our entry in a client's file: `command`, `args` and, for Zed, `type`.
Entry = dict[str, str | list[str]]
BACKUP_INFIX: Final = ".zocrates-backup-"
# Client config files are a few KB; one far larger is not a config file we should rewrite.
MAX_CONFIG_BYTES: Final = 4 * 1024 * 1024


@dataclass(frozen=True)
class Client:
    name: str
    path: Path
    key: str  # the top-level object that holds the servers
    entry_name: str
    face: Literal["mcp", "stdio"]  # the zocratesd subcommand the client runs

    def present(self) -> bool:
        return self.path.parent.is_dir()

    def entry(self, command: str, data_dir: Path) -> Entry:
        args = [self.face, "--zotero-data-dir", str(data_dir)]
        if self.face == "stdio":
            return {"type": "custom", "command": command, "args": args}
        return {"command": command, "args": args}


def known_clients(home: Path, environ: Mapping[str, str] | None = None, platform: str | None = None) -> list[Client]:
    env = os.environ if environ is None else environ
    platform = platform or sys.platform
    xdg = env.get("XDG_CONFIG_HOME", "")
    config = Path(xdg) if os.path.isabs(xdg) else home / ".config"
    if platform == "darwin":
        claude = home / "Library" / "Application Support" / "Claude"
        zed = home / ".config" / "zed"
    else:
        claude = config / "Claude"
        zed = config / "zed"
    return [
        Client("Claude Desktop", claude / "claude_desktop_config.json", MCP_KEY, MCP_NAME, "mcp"),
        Client("Cursor", home / ".cursor" / "mcp.json", MCP_KEY, MCP_NAME, "mcp"),
        Client("Zed", zed / "settings.json", ZED_KEY, ZED_NAME, "stdio"),
        Client("Gemini CLI", home / ".gemini" / "settings.json", MCP_KEY, MCP_NAME, "mcp"),
    ]


def zocratesd_command() -> str | None:
    """The absolute path of the `zocratesd` command of this installation (clients start servers with
    a short PATH, so a bare name may not be found)."""
    beside = Path(sys.executable).parent / "zocratesd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("zocratesd")
    return str(Path(found).absolute()) if found else None


# --- JSON with comments ---------------------------------------------------------------------------


class ConfigError(Exception):
    """A config file that cannot be merged into; the message says what to do."""


def _scan(text: str) -> tuple[str, list[tuple[int, str]], bool]:
    """`text` without comments and trailing commas (for json.loads), the significant characters
    outside strings with their offsets in `text` (for finding where to insert), and whether there
    was anything of the kind (a file a JSON rewrite would change beyond our entry)."""
    jsonc = False
    out: list[str] = []
    marks: list[tuple[int, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            marks.append((i, '"'))
            i = j + 1
        elif text.startswith("//", i):
            jsonc = True
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            jsonc = True
            end = text.find("*/", i + 2)
            if end < 0:
                raise ConfigError("a /* comment is never closed")
            i = end + 2
        else:
            if not c.isspace():
                marks.append((i, c))
            out.append(c)
            i += 1
    # Trailing commas (`, }`, `, ]`) are allowed in JSON with comments, not in JSON.
    plain = "".join(out)
    cleaned: list[str] = []
    k = 0
    while k < len(plain):
        ch = plain[k]
        if ch == '"':
            j = k + 1
            while j < len(plain) and plain[j] != '"':
                j += 2 if plain[j] == "\\" else 1
            cleaned.append(plain[k : j + 1])
            k = j + 1
            continue
        if ch == ",":
            rest = plain[k + 1 :].lstrip()
            if rest[:1] in ("}", "]"):
                jsonc = True
                k += 1
                continue
        cleaned.append(ch)
        k += 1
    return "".join(cleaned), marks, jsonc


def _has_comments(text: str) -> bool:
    return _scan(text)[2]


def parse_config(text: str) -> dict[str, Any]:
    """A config file's object (JSON, or JSON with comments); ConfigError when it is not one."""
    if not text.strip():
        return {}
    plain, _, _ = _scan(text)
    try:
        value = json.loads(plain)
    except ValueError as exc:
        raise ConfigError(f"it is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ConfigError("it does not hold a JSON object")
    return value


Marks = list[tuple[int, str]]


def _member(text: str, marks: Marks, open_idx: int, name: str) -> int | None:
    """The index (in `marks`) of the value of member `name` of the object opening at `open_idx`."""
    depth = 0
    for idx in range(open_idx, len(marks)):
        pos, ch = marks[idx]
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return None
        elif ch == '"' and depth == 1 and idx + 2 < len(marks) and marks[idx + 1][1] == ":":
            end = pos + 1
            while text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if json.loads(text[pos : end + 1]) == name:
                return idx + 2
    return None


def _closing(marks: Marks, open_idx: int) -> int:
    """The index of the bracket that closes the one at `open_idx`."""
    depth = 0
    for idx in range(open_idx, len(marks)):
        ch = marks[idx][1]
        depth += ch in "{["
        depth -= ch in "}]"
        if depth == 0:
            return idx
    raise ConfigError("an object is never closed")


def _edit_in_place(text: str, key: str, name: str, entry: Entry) -> str | None:
    """`text` with `key.name` set to `entry`, changing no other character (comments and layout
    kept): the entry's value replaced, or a member inserted right after the opening brace of the
    object that holds it (`key`'s, else the top level's). None when the file's shape does not allow
    it (a top level or a `key` that is not an object)."""
    _, marks, _ = _scan(text)
    if not marks or marks[0][1] != "{":
        return None
    holder = _member(text, marks, 0, key)
    if holder is None:
        holder, member = 0, json.dumps(key) + ": " + json.dumps({name: entry})
    elif marks[holder][1] != "{":
        return None
    else:
        value = _member(text, marks, holder, name)
        if value is not None:
            if marks[value][1] != "{":
                return None
            start, end = marks[value][0], marks[_closing(marks, value)][0] + 1
            return text[:start] + json.dumps(entry) + text[end:]
        member = json.dumps(name) + ": " + json.dumps(entry)
    offset = marks[holder][0] + 1
    outer = _indent_of(text, marks[holder][0])
    if marks[holder + 1][1] == "}":
        return text[:offset] + f"\n{outer}  {member}\n{outer}" + text[offset:]
    nxt = marks[holder + 1][0]
    inner = _indent_of(text, nxt) if "\n" in text[offset:nxt] else outer + "  "
    return text[:offset] + f"\n{inner}{member}," + text[offset:]


def _indent_of(text: str, pos: int) -> str:
    """The leading whitespace of the line `pos` is on (our member is indented as its neighbours)."""
    line_start = text.rfind("\n", 0, pos) + 1
    line = text[line_start:pos]
    return line[: len(line) - len(line.lstrip())]


# --- the plan for one client ---------------------------------------------------------------------

Action = Literal["create", "add", "update", "unchanged", "manual", "broken"]


@dataclass(frozen=True)
class ConfigPlan:
    client: Client
    action: Action
    entry: Entry
    new_text: str | None  # the whole file as it will be written (None: nothing to write)
    current: Any = None  # our entry as it is now, if any
    problem: str | None = None

    def entry_json(self) -> str:
        return json.dumps({self.client.key: {self.client.entry_name: self.entry}}, indent=2)


def plan(client: Client, command: str, data_dir: Path) -> ConfigPlan:
    """What merging our entry into `client`'s config file would do."""
    entry = client.entry(command, data_dir)
    try:
        with client.path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        text = json.dumps({client.key: {client.entry_name: entry}}, indent=2) + "\n"
        return ConfigPlan(client, "create", entry, text)
    except OSError as exc:
        return ConfigPlan(client, "broken", entry, None, problem=f"cannot read it ({exc.strerror})")
    if len(raw) > MAX_CONFIG_BYTES:
        return ConfigPlan(client, "broken", entry, None, problem=f"it is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
        config = parse_config(text)
    except (UnicodeDecodeError, ConfigError) as exc:
        return ConfigPlan(client, "broken", entry, None, problem=str(exc))
    servers = config.get(client.key, {})
    if not isinstance(servers, dict):
        return ConfigPlan(client, "broken", entry, None, problem=f"its {client.key!r} is not an object")
    current = servers.get(client.entry_name)
    if current == entry:
        return ConfigPlan(client, "unchanged", entry, None, current)
    action: Action = "update" if current is not None else "add"
    edited = _edit_in_place(text, client.key, client.entry_name, entry)
    if edited is None and not _has_comments(text):
        # A shape the text edit does not take (our entry is not an object): a plain JSON file can
        # be written back whole, every other key as it was.
        merged = dict(config)
        merged[client.key] = {**servers, client.entry_name: entry}
        edited = json.dumps(merged, indent=2) + "\n"
    if edited is None:
        return ConfigPlan(client, "manual", entry, None, current,
                          problem="it holds comments, which a rewrite would lose, and its shape is not one we can edit in place; "
                                  "add the entry below yourself")
    return ConfigPlan(client, action, entry, edited, current)


def apply(p: ConfigPlan, now: float | None = None) -> Path | None:
    """Write the plan (a backup of an existing file first); the backup's path, if one was made."""
    if p.new_text is None:
        return None
    path = p.client.path
    backup = None
    mode = 0o600
    if path.exists():
        mode = path.stat().st_mode & 0o777
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        backup = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}")
        n = 1
        while backup.exists():
            n += 1
            backup = path.with_name(f"{path.name}{BACKUP_INFIX}{stamp}-{n}")
        shutil.copy2(path, backup)
    files.write_atomically(path, p.new_text.encode("utf-8"), mode)
    return backup


@dataclass(frozen=True)
class ConfiguredEntry:
    """Our entry as a client's file holds it (for doctor)."""

    client: Client
    command: str | None
    args: list[str]
    problem: str | None = None


def read_entry(client: Client) -> ConfiguredEntry | None:
    """Our entry in `client`'s config file; None when the file or the entry is not there."""
    try:
        text = client.path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        return ConfiguredEntry(client, None, [], problem=f"cannot read {client.path} ({exc})")
    try:
        config = parse_config(text)
    except ConfigError as exc:
        return ConfiguredEntry(client, None, [], problem=f"{client.path}: {exc}")
    servers = config.get(client.key)
    entry = servers.get(client.entry_name) if isinstance(servers, dict) else None
    if not isinstance(entry, dict):
        return None
    command = entry.get("command")
    args = entry.get("args")
    return ConfiguredEntry(
        client, command if isinstance(command, str) else None, [str(a) for a in args] if isinstance(args, list) else []
    )
