"""The Zotero plugin's XPI, built from the files the package carries (no Node, no clone).

An XPI is a zip. Which files of the plugin directory go in is said once, in its
`xpi-contents.json`, which `clients/zotero/plugin/build.mjs` (the repository's build) reads too: the
two builds hold the same entries with the same bytes (tests/e2e/test_install.py compares them).
Entries carry a fixed timestamp, so the same files give the same archive.
"""

from __future__ import annotations

import json
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

from zocratesd import __version__
from zocratesd.install import files

CONTENTS_FILE: Final = "xpi-contents.json"
MANIFEST: Final = "manifest.json"
# The zip epoch (1980-01-01 00:00), as build.mjs writes: reproducible archives.
ZIP_EPOCH: Final = (1980, 1, 1, 0, 0, 0)
# Readable like any download: Zotero reads it once, as the user.
XPI_MODE: Final = 0o644
# Zotero's words since 7 (6 said "Add-ons"; the plugin needs 7 or later).
INSTALL_CLICKS: Final = "In Zotero: Tools → Plugins, then the gear icon → Install Plugin From File…, and choose {path}"


# What to do about any of the errors below: they are in the installed package's own files.
REINSTALL: Final = "reinstall zocrates (`pipx reinstall zocrates`, or pip where you installed it)"


class PluginError(Exception):
    """The plugin's files are missing or broken in this installation: what is wrong (`problem`) and
    what to do (`fix`); the message says both."""

    def __init__(self, problem: str, fix: str = REINSTALL) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


@dataclass(frozen=True)
class PluginInfo:
    """The manifest's identity of the plugin this package carries."""

    id: str
    version: str


def plugin_dir() -> Traversable:
    """The plugin's files as this installation has them (the package's `zotero_plugin/`)."""
    return resources.files("zocratesd.install").joinpath("zotero_plugin")


def _walk(node: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    out: list[tuple[str, Traversable]] = []
    for child in node.iterdir():
        name = f"{prefix}{child.name}"
        if child.name.startswith(".") or child.name == "__pycache__":
            continue
        if child.is_dir():
            out += _walk(child, name + "/")
        elif child.is_file():
            out.append((name, child))
    return out


def _read_json(node: Traversable, what: str) -> dict[str, object]:
    try:
        value = json.loads(node.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginError(f"the plugin's {what} cannot be read ({exc})") from None
    if not isinstance(value, dict):
        raise PluginError(f"the plugin's {what} is not a JSON object")
    return value


def xpi_entries(root: Traversable | None = None) -> list[tuple[str, bytes]]:
    """(name, bytes) of every file that goes into the XPI: manifest.json first, the rest by name."""
    root = root or plugin_dir()
    if not root.joinpath(MANIFEST).is_file():
        raise PluginError("the Zotero plugin's files are missing from this installation")
    exclude = _read_json(root.joinpath(CONTENTS_FILE), CONTENTS_FILE).get("exclude")
    if not isinstance(exclude, list):
        raise PluginError(f"the plugin's {CONTENTS_FILE} has no exclude list")
    names = sorted((n, f) for n, f in _walk(root) if n not in exclude)
    names.sort(key=lambda pair: pair[0] != MANIFEST)  # stable: the rest stays sorted
    return [(name, node.read_bytes()) for name, node in names]


def plugin_info(root: Traversable | None = None) -> PluginInfo:
    manifest = _read_json((root or plugin_dir()).joinpath(MANIFEST), MANIFEST)
    apps = manifest.get("applications")
    zotero = apps.get("zotero") if isinstance(apps, dict) else None
    plugin_id = zotero.get("id") if isinstance(zotero, dict) else None
    version = manifest.get("version")
    if not isinstance(plugin_id, str) or not isinstance(version, str):
        raise PluginError("the plugin's manifest.json lacks its id or version")
    return PluginInfo(id=plugin_id, version=version)


def build_xpi(root: Traversable | None = None) -> bytes:
    """The XPI's bytes; PluginError when the package's plugin does not match this zocratesd."""
    info = plugin_info(root)
    if info.version != __version__:
        raise PluginError(f"the packaged plugin is {info.version} but zocratesd is {__version__}")
    entries = xpi_entries(root)
    with tempfile.SpooledTemporaryFile() as buf:
        with zipfile.ZipFile(buf, "w") as zf:
            for name, data in entries:
                zi = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
                zi.compress_type = zipfile.ZIP_DEFLATED
                zi.external_attr = 0o644 << 16
                zf.writestr(zi, data, compresslevel=9)
        buf.seek(0)
        return buf.read()


def default_xpi_name() -> str:
    return f"zocrates-{__version__}.xpi"


def write_xpi(out: Path) -> Path:
    """Write the XPI to `out` (a directory: the versioned name in it), atomically; the path written."""
    out = out.expanduser()
    if out.is_dir():
        out = out / default_xpi_name()
    files.write_atomically(out, build_xpi(), XPI_MODE)
    return out.absolute()


def install_clicks(path: Path) -> str:
    """How to install the XPI at `path`, in Zotero's words."""
    return INSTALL_CLICKS.format(path=path) + "; then restart Zotero if it asks."
