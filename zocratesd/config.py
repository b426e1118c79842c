"""Configuration: `<zotero-data-dir>/zocrates-data/zocrates_config.json`, then `ZOCRATES_*`, then flags.

Precedence, lowest first: the defaults below (the spec's), the JSON file, environment variables
(`ZOCRATES_SESSION_RETENTION_DAYS=30`, nested with `__`: `ZOCRATES_COMPACTION__MIN_TURNS=6`), and
the command-line flags; a section or a list may be one variable holding JSON
(`ZOCRATES_HTTP__ALLOWED_ORIGINS='["http://localhost:3000"]'`). A missing file means defaults. A
file that is not JSON, has an unknown key or a value of the wrong type stops the daemon with a
message that names the file and the key: a silent default would quietly keep (or delete) the
user's conversations under a policy they did not choose.
"""


import functools
import ipaddress
import json
import os
import re
import reprlib
import threading
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Final, Literal, TypeVar, Union, get_args, get_origin
from urllib.parse import urlsplit

import msgspec
from msgspec import Meta, field

from zocratesd import locations
from zocratesd.limits import DEFAULT_POLL_INTERVAL_S, ORIGIN_PATTERN
from zocratesd.logtext import redact_credentials, redact_url

CONFIG_NAME = "zocrates_config.json"
# The variables' names and how they are read are pydantic-settings' (`env_values`), the convention
# users of pydantic-based tools know.
ENV_PREFIX: Final = "ZOCRATES_"
ENV_NESTED_DELIMITER: Final = "__"


# Values are taken as pydantic's lax mode takes them, the convention of settings files and
# variables (pydantic-settings): `_lax` converts them, then msgspec checks types and bounds
# strictly. The config is msgspec, not pydantic, because it is read before the first reply and
# pydantic is not (bench/PROFILE.md, "Start-up"). msgspec's own lax mode differs (it reads
# "null" as null, which would quietly lift a retention limit, and refuses " 5 ").
_TRUE: Final = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE: Final = frozenset({"0", "off", "f", "false", "n", "no"})

# Set while msgspec builds a config from data (`_convert`): it has just checked every field, so a
# section's `__post_init__` need not check them again.
_converting = threading.local()
_S = TypeVar("_S", bound=msgspec.Struct)


def strict_convert(data: Any, cls: type[_S]) -> _S:
    """`data` as `cls`, every field's type and bound checked and every `__post_init__` run."""
    outer = getattr(_converting, "on", False)
    _converting.on = True
    try:
        return msgspec.convert(data, cls, strict=True)
    finally:
        _converting.on = outer


class _Section(msgspec.Struct, forbid_unknown_fields=True):
    def __post_init__(self) -> None:
        if not getattr(_converting, "on", False):
            # Made in code (`HttpConfig(port=0)`, the tests): msgspec checks types and bounds only
            # when it converts, so convert the values given to refuse what a file could not say.
            strict_convert(msgspec.structs.asdict(self), type(self))
        self._check()

    def _check(self) -> None:
        """The section's checks beyond its fields' types and bounds (ValueError: what is wrong)."""


def _field_error(name: str, message: str) -> ValueError:
    """A `_check`'s error about one field: msgspec places it at the section, `_explain` at the field."""
    return ValueError(f"{_FIELD_MARK}{name}: {message}")


_FIELD_MARK: Final = "field "


class CompactionConfig(_Section):
    """Post-turn adaptive compaction (spec section 4)."""

    min_turns: Annotated[int, Meta(ge=0)] = 4
    token_floor: Annotated[int, Meta(ge=0)] = 30000
    hard_backstop_tokens: Annotated[int, Meta(ge=1)] = 100000
    keep_recent_turns: Annotated[int, Meta(ge=0)] = 2
    decision_threshold: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.75
    probe_timeout_s: Annotated[float, Meta(gt=0)] = 10.0
    probe_model: str = "inception/mercury-decide:free"


class ResearchConfig(_Section):
    """Deep-research budget: rounds before the first checkpoint, and the hard cap on extensions."""

    initial_budget: Annotated[int, Meta(ge=1)] = 3
    max_extensions: Annotated[int, Meta(ge=0)] = 3


GEMINI_KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
# The Gemini model when model.name is not set (the engine runs it; doctor asks Gemini about it).
DEFAULT_GEMINI_MODEL: Final = "gemini-2.5-flash"

# What one model endpoint may do to a turn. Each default is far beyond what a real model does, so
# only a broken or hostile endpoint ever meets one; meeting one ends the turn with a model_error.
#
# One SSE line is buffered until its end, so this is the memory one line can pin. A real endpoint
# streams a delta of a few hundred bytes per line; one that sends a whole answer or tool call in a
# single line stays far below it. It also caps a non-streamed answer and a decision-probe answer.
MODEL_MAX_LINE_BYTES: Final = 8 * 1024 * 1024
# An answer (text, thoughts and tool-call arguments together) is stored in sessions.db and sent
# back to the model on every later turn. The longest outputs of today's models are ~128k tokens,
# about half a million characters.
MODEL_MAX_ANSWER_CHARS: Final = 2_000_000
# A turn's model calls and searches, from the prompt (or a checkpoint's answer) to its end; no one
# model call may take longer either. The read timeout only bounds silence: an endpoint that sends
# an SSE comment every few seconds would hold the session forever. A slow local model on a CPU
# takes minutes per answer; an hour is plenty.
MODEL_MAX_TURN_S: Final = 3600.0
# Model calls in one turn (ADK's RunConfig.max_llm_calls, 500 by default). A turn is usually two
# calls (search, answer); a model that searches again and again makes ten. A model that calls a
# tool that does not exist is told so, and this bounds one that never stops trying.
MODEL_MAX_CALLS_PER_TURN: Final = 50

_LOOPBACK_NAMES: Final = frozenset({"localhost"})
# http.max_connections at most: each is a file descriptor, and no desktop's fd limit comes near it.
MAX_HTTP_CONNECTIONS: Final = 65_536
# An allowed origin: what a browser sends as `Origin` (scheme, host, optional port; no path).
_ORIGIN: Final = re.compile(ORIGIN_PATTERN, re.IGNORECASE)
# library.poll_interval_s's range, in seconds.
MIN_POLL_INTERVAL_S: Final = 0.1
MAX_POLL_INTERVAL_S: Final = 86_400.0


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1, ::ffff:127.x.y.z)."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


class ModelConfig(_Section):
    """Which model the agent runs on. `offline` needs no key and no network.

    Checked at load, so a misconfigured model stops the start with a message saying what to set,
    rather than failing the user's first turn. The key itself is read from the environment
    variable `api_key_env` names, never stored in the file.
    """

    provider: Literal["offline", "openai", "gemini"] = "offline"
    name: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    # Plain http:// to a host other than this machine sends the key (or the URL's password) in
    # clear to anyone on the path; refused unless the user says the network is theirs.
    allow_insecure_http: bool = False
    max_line_bytes: Annotated[int, Meta(ge=1024)] = MODEL_MAX_LINE_BYTES
    max_answer_chars: Annotated[int, Meta(ge=1)] = MODEL_MAX_ANSWER_CHARS
    max_turn_s: Annotated[float, Meta(gt=0)] = MODEL_MAX_TURN_S
    max_calls_per_turn: Annotated[int, Meta(ge=1)] = MODEL_MAX_CALLS_PER_TURN

    def _check(self) -> None:
        if self.provider == "openai":
            self._check_base_url()
            if not self.name:
                raise ValueError("provider openai needs name, the endpoint's model id")
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ValueError(f"api_key_env names ${self.api_key_env}, which is not set")
        if self.provider == "gemini" and not self.api_key_env and not any(os.environ.get(v) for v in GEMINI_KEY_VARS):
            raise ValueError("provider gemini needs a Google API key in $GOOGLE_API_KEY or $GEMINI_API_KEY")

    def _check_base_url(self) -> None:
        needs = (
            "provider openai needs base_url, an http(s) URL such as https://openrouter.ai/api/v1 "
            "or http://127.0.0.1:11434/v1 (Ollama)"
        )
        if not self.base_url:
            raise ValueError(needs)
        try:
            parts = urlsplit(self.base_url)
            _ = parts.port  # a port that is not a number raises here
        except ValueError:
            raise ValueError(f"{needs}; {redact_url(self.base_url)} is not a URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(needs)
        if self.api_key_env:
            sends: str | None = f"the API key from ${self.api_key_env} (model.api_key_env)"
        else:
            sends = "the credentials in model.base_url" if "@" in parts.netloc else None
        if self._plain_http_elsewhere() and sends:
            raise ValueError(
                f"model.base_url {redact_url(self.base_url)} is plain http:// to another machine, and the model sends "
                f"{sends}: anyone on the network path could read it. Use https://, or set "
                "model.allow_insecure_http: true if the network between the two is yours (a LAN, a VPN)"
            )

    def _plain_http_elsewhere(self) -> bool:
        """An openai endpoint on plain http:// to another machine, not declared safe by the user."""
        parts = urlsplit(self.base_url or "")
        return (self.provider == "openai" and parts.scheme == "http" and not is_loopback_host(parts.hostname or "")
                and not self.allow_insecure_http)

    def warnings(self) -> list[str]:
        """What the daemon logs at start about a setting it accepts but the user should know of."""
        if self._plain_http_elsewhere():  # without a key: refused above when it carries one
            return [
                f"model.base_url {redact_url(self.base_url or '')} is plain http:// to another machine: every prompt, "
                "library passage and answer travels unencrypted, readable and changeable on the network path. Use "
                "https://, or set model.allow_insecure_http: true if the network between the two is yours (a LAN, a VPN)"
            ]
        return []

    def api_key(self) -> str | None:
        if self.api_key_env:
            return os.environ.get(self.api_key_env)
        if self.provider == "gemini":
            return next((os.environ[v] for v in GEMINI_KEY_VARS if os.environ.get(v)), None)
        return None


class HttpConfig(_Section):
    """The HTTP shim for the Zotero plugin (loopback only)."""

    enabled: bool = True
    base_port: Annotated[int, Meta(ge=0, le=65535)] = 8765
    # A fixed port (`--http-port N`), used as is instead of base_port + the data dir's offset;
    # 0 means any free port.
    port: Annotated[int, Meta(ge=0, le=65535)] | None = None
    # Pages of other origins whose requests are served (with the token): exact origins, `scheme://host[:port]`.
    allowed_origins: list[str] = field(default_factory=list)
    # Another local user can open connections to the port without a token (zocratesd/shim/protocol.py):
    # open connections at most (fewer when the fd limit is low: the Unix socket keeps a reserve). A
    # sidebar uses a few; the rest is room to ride out a flood, which only closes waiting connections.
    # More than MAX_HTTP_CONNECTIONS would outgrow any fd limit.
    max_connections: Annotated[int, Meta(ge=1, le=MAX_HTTP_CONNECTIONS)] = 512
    # A request's whole head must arrive within this of the connection's opening (or of its first
    # byte after an idle keep-alive), however it trickles: a real client sends it in one write.
    head_timeout_s: Annotated[float, Meta(gt=0)] = 10.0
    # An authenticated request's whole body must arrive within this of its head (408 otherwise):
    # 16 MiB, the cap, takes well under a second on loopback.
    body_timeout_s: Annotated[float, Meta(gt=0)] = 30.0

    def _check(self) -> None:
        for origin in self.allowed_origins:
            if origin.strip().lower() == "null":
                raise _field_error("allowed_origins", "'null' is refused: it is the origin of sandboxed frames and "
                                   "file: and data: pages, which any web site can open; list the page's exact origin")
            if "*" in origin:
                raise _field_error("allowed_origins", f"{origin[:100]!r} is refused: a wildcard would let other web "
                                   "sites use the daemon; list each page's exact origin (scheme://host:port)")
            if not _ORIGIN.fullmatch(origin):
                raise _field_error("allowed_origins", f"{origin[:100]!r} is not an origin: scheme://host or "
                                   "scheme://host:port, no path (a browser's Origin header, as http://localhost:3000)")


class LibraryConfig(_Section):
    """The user's Zotero library: the full-text index `zocrates-data/library.db` and how it reads
    Zotero (zocratesd/library). zotero.sqlite comes first; the local API (loopback only, and on
    Linux only the user's own listener) is used when on and the database cannot be read."""

    enabled: bool = True
    local_api: bool = True
    local_api_url: str = "http://127.0.0.1:23119"
    # How often the indexer checks Zotero for changes: cheap (a stat, or one small local API
    # request), and 30 s keeps a paper added in Zotero searchable within a minute. Between
    # MIN_POLL_INTERVAL_S (more often, and the polls alone keep a core busy) and a day.
    poll_interval_s: Annotated[float, Meta(ge=MIN_POLL_INTERVAL_S, le=MAX_POLL_INTERVAL_S)] = DEFAULT_POLL_INTERVAL_S
    # Re-rank search with the dense stage (library/dense.py; wordllama, in the default install):
    # better answers for claims worded unlike the paper (SciFact test nDCG@10 0.685 -> 0.716), at
    # ~50-65 MiB of memory from the first search on and about twice the indexing time. False: BM25 alone.
    dense: bool = True
    # Search group libraries too. Any member of a group writes its titles, notes and annotations:
    # false leaves every group library out of the index (so out of search, items and resources).
    include_group_libraries: bool = True

    def _check(self) -> None:
        parts = urlsplit(self.local_api_url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise _field_error("local_api_url", "the local API is Zotero's own server on this machine: http://127.0.0.1:PORT")
        self.local_api_url = self.local_api_url.rstrip("/")


class WritesConfig(_Section):
    """Writes into Zotero (notes, tags, collections, new items; zocratesd/writes), always through
    Zotero itself, at `library.local_api_url`'s server. `ask`: each write waits for a yes in the face
    that asked (a kind can be allowed always from there); `allow`: what the person asks for in a face
    is written without asking (still recorded, still undoable), while what the model proposes is
    still asked, so library text can never write unasked; `off`: refused."""

    mode: Literal["ask", "allow", "off"] = "ask"


class OnlineConfig(_Section):
    """Search beyond the library (zocratesd/online): OpenAlex, arXiv and Crossref, public APIs that
    need no key. Only the search terms leave the machine. `off`: never; `ask` (the default): the
    person is asked the first time a turn would go online; `on`: the assistant searches online when
    the library leaves parts of a question unanswered."""

    mode: Literal["off", "ask", "on"] = "ask"
    openalex_url: str = "https://api.openalex.org"
    arxiv_url: str = "https://export.arxiv.org"
    crossref_url: str = "https://api.crossref.org"
    # OpenAlex's and Crossref's "polite pool": faster, more reliable answers for a contact address.
    mailto: str | None = None
    # One request to one provider, and all of one search (the providers are asked at once).
    request_timeout_s: Annotated[float, Meta(gt=0, le=120)] = 10.0
    search_timeout_s: Annotated[float, Meta(gt=0, le=300)] = 20.0
    # Requests one turn may make in all (a retry counts): a research loop cannot flood a provider.
    max_requests_per_turn: Annotated[int, Meta(ge=1, le=100)] = 9
    # An answer bigger than this is refused as it streams (a page of 25 works is ~100-300 KiB).
    max_response_bytes: Annotated[int, Meta(ge=1024, le=64 * 1024 * 1024)] = 4 * 1024 * 1024

    def _check(self) -> None:
        for name in ("openalex_url", "arxiv_url", "crossref_url"):
            url = getattr(self, name)
            parts = urlsplit(url)
            loopback = is_loopback_host(parts.hostname or "")
            if not parts.hostname or parts.scheme not in ("https", "http") or (parts.scheme == "http" and not loopback):
                raise _field_error(name, "an https:// URL (plain http:// only to this machine, for a local mirror)")
            setattr(self, name, url.rstrip("/"))
        if self.mailto is not None and (len(self.mailto) > 200 or "@" not in self.mailto or any(c.isspace() for c in self.mailto)):
            raise _field_error("mailto", "an e-mail address (OpenAlex's and Crossref's polite pool)")


class RpcConfig(_Section):
    # 16 MiB: large enough for a prompt with many embedded snippets, small enough that a runaway
    # client cannot make the daemon buffer without bound (rust-sdk #342 argues for a finite cap).
    max_frame_bytes: Annotated[int, Meta(ge=1024)] = 16 * 1024 * 1024


class ZocratesConfig(msgspec.Struct, forbid_unknown_fields=True):
    """Every key the spec names, with the spec's default. 0 or null disables a retention pass.

    A plain struct: `load_config` merges the file, the environment and the flags into it. Made in
    code, a section may be given as a dict (`ZocratesConfig(research={"initial_budget": 1})`), and
    is checked as the file's would be.
    """

    session_retention_days: Annotated[int, Meta(ge=0)] | None = 180
    max_saved_sessions: Annotated[int, Meta(ge=0)] | None = 100
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
    research: ResearchConfig = field(default_factory=ResearchConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    rpc: RpcConfig = field(default_factory=RpcConfig)
    library: LibraryConfig = field(default_factory=LibraryConfig)
    writes: WritesConfig = field(default_factory=WritesConfig)
    online: OnlineConfig = field(default_factory=OnlineConfig)

    def __post_init__(self) -> None:
        if getattr(_converting, "on", False):
            return
        types = field_types(ZocratesConfig)
        for name, value in msgspec.structs.asdict(self).items():
            if isinstance(value, Mapping):
                setattr(self, name, strict_convert(_lax(dict(value), types[name]), types[name]))
        strict_convert(msgspec.structs.asdict(self), ZocratesConfig)


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file or variable and the key."""


def config_path(data_dir: Path) -> Path:
    return locations.state_dir(data_dir) / CONFIG_NAME


def load_config(data_dir: Path, overrides: dict[str, Any] | None = None) -> ZocratesConfig:
    """The config for `data_dir`: defaults < zocrates_config.json < ZOCRATES_* < `overrides` (flags)."""
    path = config_path(data_dir)
    file_data: dict[str, Any] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    if text is not None:
        try:
            file_data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        except RecursionError:
            raise ConfigError(f"{path}: nested deeper than the JSON parser goes; the configuration is sections of "
                              "values (see README.md, Configuration)") from None
        if not isinstance(file_data, dict):
            raise ConfigError(f"{path}: the top level must be a JSON object, not {type(file_data).__name__}")
    # Flags merged into the environment's values, then those into the file's: each wins key by key,
    # a section merged with the one below (pydantic-settings merged its sources in this order).
    merged = _deep_merge(file_data, _deep_merge(env_values(os.environ), _top_level_names(overrides or {})))
    try:
        return strict_convert(_lax(merged, ZocratesConfig), ZocratesConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(exc, merged, path)) from None


# A value in an error message: long or deeply nested ones cut.
_SHORT: Final = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 3, 300, 300, 10, 10
# msgspec's names for the JSON types in its messages, as a user of the file knows them.
_TYPE_WORDS: Final = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                      "null": "null", "array": "a list", "object": "an object"}
_AT: Final = re.compile(r" - at `\$(.*)`$", re.DOTALL)
_PATH_PART: Final = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_UNKNOWN: Final = re.compile(r"^Object contains unknown field `(.*)`$", re.DOTALL)
_EXPECTED: Final = re.compile(r"^Expected `([^`]*)`(, got `[^`]*`)?(.*)$", re.DOTALL)


def _explain(exc: msgspec.ValidationError, data: Mapping[str, Any], path: Path) -> str:
    """msgspec's message (the first problem it met) as `key: what is wrong (got value)`."""
    key, msg = describe_error(exc)
    got = ""
    node: Any = data
    for part in key:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
    else:
        got = f" (got {_SHORT.repr(node)})"
    # The input may be the whole model section, base_url and its password included.
    where = ".".join(str(p) for p in key) or "(top level)"
    return redact_credentials(f"invalid configuration (from {path}, ZOCRATES_* variables or flags):\n  {where}: {msg}{got}")


def describe_error(exc: msgspec.ValidationError) -> tuple[tuple[str | int, ...], str]:
    """Where in the config msgspec's error is (`$.compaction.min_turns` as ("compaction",
    "min_turns")), and what it says in a config's words ("expected an integer >= 0")."""
    text = str(exc)
    key: tuple[str | int, ...] = ()
    if at := _AT.search(text):
        key = tuple(name if name else int(index) for name, index in _PATH_PART.findall(at.group(1)))
        text = text[: at.start()]
    if text.startswith(_FIELD_MARK):
        name, _, text = text[len(_FIELD_MARK) :].partition(": ")
        key = (*key, name)
    if found := _UNKNOWN.match(text):
        return (*key, found.group(1)), "unknown key"
    if found := _EXPECTED.match(text):
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in found.group(1).split(" | "))
        return key, f"expected {words}{found.group(3)}"
    if text.startswith("Invalid enum value"):
        choices = get_args(_bare(_type_at(ZocratesConfig, key)))
        return key, "must be one of " + ", ".join(repr(c) for c in choices)
    return key, text


def _type_at(tp: Any, key: Sequence[str | int]) -> Any:
    for part in key:
        tp = _next_field(tp, str(part))
    return tp


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """What the `ZOCRATES_*` variables in `environ` set, nested as in the file, values as given.

    Read as pydantic-settings read them (its EnvSettingsSource with case_sensitive=False and
    env_nested_delimiter="__"), so a variable that worked keeps working: names in any case; only
    the variables of a key are read, so another `ZOCRATES_*` variable (the test hooks, a typo
    without `__`) is ignored, while an unknown key inside a section (`ZOCRATES_HTTP__PROT`) is an
    unknown key; a section's variable holds JSON, merged under its `__` variables; a list key's
    variable holds JSON too. Other values stay strings, converted as the file's are (`_lax`). A
    value that must be JSON and is not is a ConfigError naming the variable.
    """
    names = {name.lower(): name for name in environ}
    env = {low: environ[name] for low, name in names.items()}
    prefix = ENV_PREFIX.lower()
    out: dict[str, Any] = {}
    for name, tp in field_types(ZocratesConfig).items():
        var = prefix + name
        value = env.get(var)
        kind = _json_kind(tp)
        if kind is None:
            if value is not None:
                out[name] = value
            continue
        nested = _explode(tp, var + ENV_NESTED_DELIMITER, env, names)
        if value is None:
            if nested:
                out[name] = _field_names(tp, nested)
            continue
        decoded = _json(value, names[var], strict=kind == "strict")
        if isinstance(decoded, dict):
            out[name] = _field_names(tp, _deep_merge(decoded, nested))
        elif decoded is not None:  # a JSON null leaves the section to the file (as pydantic-settings did)
            out[name] = decoded
    return out


def _explode(tp: Any, prefix: str, env: Mapping[str, str], names: Mapping[str, str]) -> dict[str, Any]:
    """`{prefix}a__b=v` variables as `{"a": {"b": v}}`; a value for a list (or a section) is JSON."""
    result: dict[str, Any] = {}
    for var, value in env.items():
        if not var.startswith(prefix):
            continue
        *keys, last = var[len(prefix) :].split(ENV_NESTED_DELIMITER)
        node: Any = result
        target: Any = tp
        for key in keys:
            target = _next_field(target, key)
            if isinstance(node, dict):
                node = node.setdefault(key, {})
        target = _next_field(target, last)
        parsed: Any = value
        if target is not None and value and (kind := _json_kind(target)):
            parsed = _json(value, names[var], strict=kind == "strict")
        if isinstance(node, dict):
            node[last] = parsed
    return result


@functools.cache
def field_types(cls: type[msgspec.Struct]) -> dict[str, Any]:
    """A struct's fields and their types (`Annotated` bounds included)."""
    return {f.name: f.type for f in msgspec.structs.fields(cls)}


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _next_field(tp: Any, key: str) -> Any:
    """The type of the field named `key` (in any case) of the section `tp` holds; None if none."""
    if tp is None:
        return None
    for arg in get_args(tp):
        if (found := _next_field(arg, key)) is not None:
            return found
    if _is_struct(tp):
        return next((t for n, t in field_types(tp).items() if n.lower() == key.lower()), None)
    return None


def _field_names(tp: Any, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with each key that names a field of the section in another case renamed to it."""
    if not _is_struct(tp):
        return values
    lower = {n.lower(): n for n in field_types(tp)}
    return {lower.get(key.lower(), key): value for key, value in values.items()}


def _json_kind(annotation: Any) -> Literal["strict", "lenient"] | None:
    """How a variable for a field of this type is read: as JSON ("strict": a section, list, dict, set
    or tuple), as JSON if it parses ("lenient": a union with one of those, `list[str] | None`), or
    as the string it is."""
    if _is_complex(annotation):
        return "strict"
    if get_origin(annotation) in (Union, UnionType) and any(_is_complex(arg) for arg in get_args(annotation)):
        return "lenient"
    return None


def _is_complex(annotation: Any) -> bool:
    for tp in (annotation, get_origin(annotation)):
        if isinstance(tp, type) and not issubclass(tp, (str, bytes)):
            if issubclass(tp, (msgspec.Struct, Mapping, Sequence, Set, tuple)):
                return True
    return False


def _bare(tp: Any) -> Any:
    """`tp` without its `Annotated` bounds."""
    return get_args(tp)[0] if get_origin(tp) is Annotated else tp


def _lax(value: Any, tp: Any) -> Any:
    """`value` for a field of type `tp` with the conversions pydantic's lax mode made: numbers and
    booleans from strings (as environment variables are), 1.0 as 1, 0/1 as false/true. What does not
    convert is left for msgspec to refuse."""
    tp = _bare(tp)
    if _is_struct(tp):
        if not isinstance(value, dict):
            return value
        types = field_types(tp)
        return {k: _lax(v, types[k]) if k in types else v for k, v in value.items()}
    if get_origin(tp) in (Union, UnionType):
        args = [arg for arg in get_args(tp) if arg is not type(None)]
        return _lax(value, args[0]) if len(args) == 1 and value is not None else value
    if tp is int:
        return _lax_int(value)
    if tp is float:
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return value
        return value
    if tp is bool:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
    return value


def _lax_int(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)  # surrounding blanks and `1_000` as pydantic took them
        except ValueError:
            whole, dot, fraction = value.strip().partition(".")
            if dot and whole and not fraction.strip("0"):  # "5.0"
                try:
                    return int(whole)
                except ValueError:
                    pass
    return value


def _json(value: str, var: str, *, strict: bool) -> Any:
    try:
        return json.loads(value)
    except RecursionError:
        raise ConfigError(f"${var}: nested deeper than the JSON parser goes") from None
    except ValueError as exc:
        if not strict:
            return value
        # pydantic-settings let this escape as a traceback without the variable's name.
        raise ConfigError(
            redact_credentials(f"${var}: a section or a list is set as JSON, and this is not JSON: {exc} (got {value!r})")
        ) from None


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s keys set on it, merging where both hold an object."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _top_level_names(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Flags keyed by field name in any case (pydantic-settings matched its init arguments so)."""
    lower = {n.lower(): n for n in field_types(ZocratesConfig)}
    return {lower.get(key.lower(), key): value for key, value in overrides.items()}
