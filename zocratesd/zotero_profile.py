"""Zotero's own profile, read (never written): which data dir it uses, which Zotero ran it, its plugins.

Zotero keeps a Firefox-style profile apart from its data dir (research/zotero_ops.md 1.1):
- the profiles' root: `~/.zotero/zotero` (Linux), `~/Library/Application Support/Zotero` (macOS),
  holding `profiles.ini`, whose `[Install…]` section's `Default=` (Zotero 7+) or the `[Profile…]`
  with `Default=1` names the profile in use (`Path=`, relative to the root when `IsRelative=1`);
- in the profile: `prefs.js` (`user_pref("extensions.zotero.useDataDir", true)` and
  `user_pref("extensions.zotero.dataDir", "…")` for a data dir other than `~/Zotero`),
  `compatibility.ini` (`LastVersion=9.0.6_<build>/<build>`: the Zotero that last ran it) and
  `extensions.json` (the installed plugins, with id, version and whether they are active).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PREF_USE_DATA_DIR: Final = "extensions.zotero.useDataDir"
PREF_DATA_DIR: Final = "extensions.zotero.dataDir"
# Settings → Export → Item Format: "bibliography=<style id>" ("bibliography/html=..." with a content
# type), a JSON object {"mode": "bibliography", "id": ...} in newer profiles, or "export=<translator>".
PREF_QUICK_COPY: Final = "extensions.zotero.export.quickCopy.setting"
# One `user_pref("name", value);` per line, as Gecko writes prefs.js; the value is JSON-compatible
# (a string literal, true/false, an integer).
_USER_PREF = re.compile(r'^\s*user_pref\(\s*("(?:[^"\\]|\\.)*")\s*,\s*(.*?)\s*\)\s*;\s*$', re.MULTILINE)
# prefs.js of a long-used profile is ~100 KB; a bigger one is not Zotero's.
PrefValue = str | bool | int | float
MAX_PREFS_BYTES: Final = 16 * 1024 * 1024


def profiles_root(home: Path, platform: str | None = None) -> Path:
    platform = platform or sys.platform
    if platform == "darwin":
        return home / "Library" / "Application Support" / "Zotero"
    return home / ".zotero" / "zotero"


@dataclass(frozen=True)
class ZoteroProfile:
    path: Path

    @property
    def prefs_js(self) -> Path:
        return self.path / "prefs.js"

    @property
    def extensions_json(self) -> Path:
        return self.path / "extensions.json"


def default_profile(home: Path, platform: str | None = None) -> ZoteroProfile | None:
    """The profile Zotero starts with, or None when there is no (readable) profiles.ini."""
    root = profiles_root(home, platform)
    ini = configparser.RawConfigParser(strict=False)
    ini.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive here
    try:
        ini.read_string((root / "profiles.ini").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return None
    chosen: Path | None = None
    # Zotero 7+ (Gecko's dedicated profiles) records the install's profile in [Install<hash>]
    # Default=<path relative to the root>; it wins over [ProfileN] Default=1.
    for section in ini.sections():
        if section.startswith("Install") and ini[section].get("Default"):
            chosen = root / ini.get(section, "Default")
            break
    if chosen is None:
        profiles = [s for s in ini.sections() if s.startswith("Profile") and ini[s].get("Path")]
        marked = [s for s in profiles if ini.get(s, "Default", fallback="") == "1"]
        if not (marked or profiles):
            return None
        pick = (marked or profiles)[0]
        path = ini.get(pick, "Path")
        chosen = root / path if ini.get(pick, "IsRelative", fallback="1") == "1" else Path(path)
    return ZoteroProfile(chosen) if chosen.is_dir() else None


def read_prefs(prefs_js: Path) -> dict[str, PrefValue]:
    """The `user_pref` values of a prefs.js ({} when it is missing or unreadable)."""
    try:
        with prefs_js.open("rb") as f:
            text = f.read(MAX_PREFS_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return {}
    prefs: dict[str, PrefValue] = {}
    for m in _USER_PREF.finditer(text):
        try:
            value = json.loads(m.group(2))
        except ValueError:
            continue  # a value we do not read (never one of Zotero's data-dir prefs)
        if isinstance(value, str | bool | int | float):
            prefs[json.loads(m.group(1))] = value
    return prefs


def data_dir_from_profile(profile: ZoteroProfile) -> Path | None:
    """The data dir the profile's prefs.js sets, when it sets one (else Zotero uses `~/Zotero`)."""
    prefs = read_prefs(profile.prefs_js)
    value = prefs.get(PREF_DATA_DIR)
    if prefs.get(PREF_USE_DATA_DIR) is True and isinstance(value, str) and value:
        return Path(value).expanduser()
    return None


def quick_copy_style(profile: ZoteroProfile | None) -> str | None:
    """The id of the CSL style Zotero's Quick Copy is set to, or None (not set, or set to an
    export format rather than a style)."""
    value = read_prefs(profile.prefs_js).get(PREF_QUICK_COPY) if profile is not None else None
    if not isinstance(value, str):
        return None
    if value.startswith("{"):
        try:
            setting = json.loads(value)
        except ValueError:
            return None
        chosen = setting.get("id") if isinstance(setting, dict) and setting.get("mode") == "bibliography" else None
        return chosen if isinstance(chosen, str) and chosen else None
    mode, sep, style_id = value.partition("=")
    return style_id.strip() or None if sep and mode.split("/", 1)[0] == "bibliography" else None


def last_zotero_version(profile: ZoteroProfile) -> str | None:
    """The version of the Zotero that last ran the profile (compatibility.ini), or None."""
    ini = configparser.RawConfigParser(strict=False)
    try:
        ini.read_string((profile.path / "compatibility.ini").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return None
    value = ini.get("Compatibility", "LastVersion", fallback="")
    version = value.split("_", 1)[0].strip()
    return version or None


@dataclass(frozen=True)
class InstalledAddon:
    id: str
    version: str
    active: bool


def installed_addon(profile: ZoteroProfile, addon_id: str) -> InstalledAddon | None:
    """The plugin `addon_id` as the profile's extensions.json lists it, or None."""
    try:
        data = json.loads(profile.extensions_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    addons = data.get("addons") if isinstance(data, dict) else None
    for addon in addons if isinstance(addons, list) else []:
        if isinstance(addon, dict) and addon.get("id") == addon_id:
            active = addon.get("active") is True and not addon.get("userDisabled") and not addon.get("appDisabled")
            return InstalledAddon(id=addon_id, version=str(addon.get("version", "")), active=active)
    return None


@dataclass(frozen=True)
class DataDirChoice:
    """The data dir zocratesd should serve, and where that answer came from (said to the user)."""

    path: Path
    source: str
    profile: ZoteroProfile | None


ZOTERO_DEFAULT: Final = "Zotero's default"


def find_data_dir(home: Path, flag: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> DataDirChoice:
    """The flag, else $ZOTERO_DATA_DIR, else the data dir Zotero's profile sets, else `~/Zotero`.

    The one rule for which data dir is served: the daemon, its clients, setup and doctor all use it,
    so a library Zotero keeps outside `~/Zotero` is found without a flag everywhere."""
    env = os.environ if environ is None else environ
    profile = default_profile(home)
    if flag:
        return DataDirChoice(Path(flag).expanduser().resolve(), "--zotero-data-dir", profile)
    if env.get("ZOTERO_DATA_DIR"):
        return DataDirChoice(Path(env["ZOTERO_DATA_DIR"]).expanduser().resolve(), "$ZOTERO_DATA_DIR", profile)
    if profile is not None and (custom := data_dir_from_profile(profile)) is not None:
        return DataDirChoice(custom.resolve(), f"Zotero's settings ({profile.prefs_js})", profile)
    return DataDirChoice((home / "Zotero").resolve(), ZOTERO_DEFAULT, profile)
