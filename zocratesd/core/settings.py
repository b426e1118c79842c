"""The settings a user may change while the daemon runs (the sidebar's preferences: `GET/PATCH
/settings`), written to zocrates_config.json and applied live where the code reads them live.

Only keys whose worst value is a policy the user chose are editable: retention (which sessions
are kept), compaction thresholds and the research budget. The model, HTTP, library and RPC
sections are not: an endpoint URL or an allowed origin set from a web page would be a way around
the shim's security. Values are checked by the daemon's own field definitions (config.py), the
same that check the file at start, so a value the daemon accepts now also loads at the next start.

Where a key applies (`APPLIES`): "now" keys are read by their users at each use (maintenance at
each pass, the compactor at each turn's end, the search tool at each search) from the very
objects this module updates; "next_start" keys are baked into an object at start (the decision
probe's HTTP timeout).
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from zocratesd.config import ZocratesConfig, describe_error, strict_convert
from zocratesd.errors import InvalidInput, ZocratesError

Applies = Literal["now", "next_start"]

APPLIES: Final[dict[str, Applies]] = {
    "session_retention_days": "now",
    "max_saved_sessions": "now",
    "compaction.min_turns": "now",
    "compaction.token_floor": "now",
    "compaction.hard_backstop_tokens": "now",
    "compaction.keep_recent_turns": "now",
    "compaction.decision_threshold": "now",
    "compaction.probe_timeout_s": "next_start",  # HttpDecisionProbe's timeout, fixed at start
    "research.initial_budget": "now",
    "research.max_extensions": "now",
    # Read at each search; the assistant's own online tool is offered by the mode at start.
    "online.mode": "now",
}
_SECTIONS: Final = ("compaction", "research", "online")
_ENV_PREFIX: Final = "ZOCRATES_"
# Integers beyond this are not exact in JavaScript (the sidebar's language) and mean nothing as a
# day count, a session count or a token count anyway.
MAX_SETTING_INT: Final = 2**53 - 1



@functools.cache
def _editable() -> type[msgspec.Struct]:
    """The editable part of the config, with the daemon's own field definitions (bounds included),
    validated strictly: a JSON `true` or `"90"` is refused rather than read as 1 or 90. Made at the
    first update, not at import: every start imports this module before its first reply."""
    names = ("session_retention_days", "max_saved_sessions", *_SECTIONS)
    fields = [
        (f.name, f.type, msgspec.field(default=f.default) if f.default_factory is msgspec.NODEFAULT
         else msgspec.field(default_factory=f.default_factory))
        for f in msgspec.structs.fields(ZocratesConfig) if f.name in names
    ]
    return msgspec.defstruct("EditableSettings", fields, forbid_unknown_fields=True)


def _get(config: Any, key: str) -> Any:
    obj: Any = config
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _nest(flat: Mapping[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    sections: dict[str, dict[str, object]] = {}
    for key, value in flat.items():
        head, _, tail = key.partition(".")
        if tail:
            if head not in sections:
                out[head] = sections[head] = {}
            sections[head][tail] = value
        else:
            out[head] = value
    return out


def _flatten(patch: Mapping[str, Any]) -> dict[str, object]:
    """`{"compaction": {"min_turns": 6}}` as `{"compaction.min_turns": 6}`; InvalidInput naming the
    first key that is not an editable setting or not a plain JSON number (or null)."""
    flat: dict[str, object] = {}
    for name, value in patch.items():
        if name in _SECTIONS:
            if not isinstance(value, dict):
                raise InvalidInput(f"{name!r} must be an object of settings", field=name)
            items = [(f"{name}.{sub}", v) for sub, v in value.items()]
        else:
            items = [(name, value)]
        for key, v in items:
            if key not in APPLIES:
                raise InvalidInput(f"{key!r} is not a setting that can be changed here", field=key)
            if isinstance(v, float) and not math.isfinite(v) or isinstance(v, int) and abs(v) > MAX_SETTING_INT:
                raise InvalidInput(f"{key!r} must be a finite number of at most {MAX_SETTING_INT}", field=key)
            flat[key] = v
    return flat


def env_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The editable keys a ZOCRATES_* variable sets ({key: variable}); config.env_values reads the
    variables case-insensitively, nested with `__`, or a whole section as JSON."""
    upper = {name.upper(): name for name in environ}
    out: dict[str, str] = {}
    for key in APPLIES:
        head, _, tail = key.partition(".")
        var = _ENV_PREFIX + key.upper().replace(".", "__")
        if var in upper:
            out[key] = upper[var]
        elif tail and (section := upper.get(_ENV_PREFIX + head.upper())) is not None:
            try:
                blob = json.loads(environ[section])
            except ValueError:
                continue
            if isinstance(blob, dict) and tail in blob:
                out[key] = section
    return out


class Settings:
    """The editable settings of one running daemon, its config file, and the live config objects
    (`config` is the daemon's: maintenance, the compactor and the search tool hold its sections)."""

    def __init__(self, config: ZocratesConfig, path: Path, environ: Mapping[str, str] | None = None):
        self._config = config
        self.path = path
        self._saved = {key: _get(config, key) for key in APPLIES}  # what the next start reads too
        self._env = env_keys(os.environ if environ is None else environ)
        self._lock: asyncio.Lock | None = None

    def view(self) -> dict[str, Any]:
        running = {key: _get(self._config, key) for key in APPLIES}
        return {
            "settings": _nest(self._saved),
            "applies": dict(APPLIES),
            "restart_needed": [key for key in APPLIES if self._saved[key] != running[key]],
            "environment": sorted(self._env),
            "config_path": str(self.path),
        }

    async def update(self, patch: Any) -> dict[str, Any]:
        """Validate `patch` (a part of `view()["settings"]`), write it to the file, apply what applies
        now; the view plus `changed`. InvalidInput (nothing changes) naming the offending key."""
        if not isinstance(patch, dict):
            raise InvalidInput("settings are a JSON object")
        flat = _flatten(patch)
        for key in flat:
            if key in self._env:
                raise InvalidInput(
                    f"{key!r} is set by ${self._env[key]}, which wins over the config file: change or unset it there",
                    field=key,
                )
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one writer of the file at a time; each merges into the latest
            merged = {**self._saved, **flat}
            try:
                checked = strict_convert(_nest(merged), _editable())
            except msgspec.ValidationError as exc:
                path, msg = describe_error(exc)
                key = ".".join(str(p) for p in path)
                raise InvalidInput(f"{key}: {msg}", field=key) from None
            values = {key: _get(checked, key) for key in flat}
            changed = [key for key, value in values.items() if value != self._saved[key]]
            if changed:
                await asyncio.to_thread(_write_keys, self.path, {key: values[key] for key in changed})
                for key in changed:
                    self._saved[key] = values[key]
                    if APPLIES[key] == "now":
                        obj: Any = self._config
                        *parents, last = key.split(".")
                        for part in parents:
                            obj = getattr(obj, part)
                        setattr(obj, last, values[key])
        return {**self.view(), "changed": changed}


def _write_keys(path: Path, values: Mapping[str, Any]) -> None:
    """Set `values` (dotted keys) in the JSON file at `path`, keeping every other key as it is, by
    writing a temp file beside it and renaming it over the file (a crash leaves the old or the new
    file, never half of one). The file keeps its mode; a new one is 0600 like the rest of the dir."""
    try:
        text = path.read_text(encoding="utf-8")
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        text, mode = "", 0o600
    except OSError as exc:
        raise ZocratesError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ZocratesError(f"{path} is no longer a JSON object (edited since the daemon started?); not overwritten")
    for key, value in values.items():
        *parents, last = key.split(".")
        node = data
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                if child is not None:
                    raise ZocratesError(f"{path}: {part!r} is not an object; not overwritten")
                child = node[part] = {}
            node = child
        node[last] = value
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)  # O_CREAT's mode is masked by the umask
            f.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ZocratesError(f"cannot write {path}: {exc.strerror}") from None
