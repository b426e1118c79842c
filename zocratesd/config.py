"""Configuration: `<zotero-data-dir>/zocrates-data/zocrates_config.json`, then `ZOCRATES_*`, then flags.

Precedence, lowest first: the defaults below (the spec's), the JSON file, environment variables
(`ZOCRATES_SESSION_RETENTION_DAYS=30`, nested with `__`: `ZOCRATES_COMPACTION__MIN_TURNS=6`), and
the command-line flags. A missing file means defaults. A file that is not JSON, has an unknown key
or a value of the wrong type stops the daemon with a message that names the file and the key: a
silent default would quietly keep (or delete) the user's conversations under a policy they did
not choose.
"""

from __future__ import annotations

import json
import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from zocratesd import locations

CONFIG_NAME = "zocrates_config.json"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CompactionConfig(_Section):
    """Post-turn adaptive compaction (spec section 4)."""

    min_turns: int = Field(4, ge=0)
    token_floor: int = Field(30000, ge=0)
    hard_backstop_tokens: int = Field(100000, ge=1)
    keep_recent_turns: int = Field(2, ge=0)
    decision_threshold: float = Field(0.75, ge=0.0, le=1.0)
    probe_timeout_s: float = Field(10.0, gt=0)
    probe_model: str = "inception/mercury-decide:free"


class ResearchConfig(_Section):
    """Deep-research budget: rounds before the first checkpoint, and the hard cap on extensions."""

    initial_budget: int = Field(3, ge=1)
    max_extensions: int = Field(3, ge=0)


GEMINI_KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")


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

    @model_validator(mode="after")
    def _usable(self) -> ModelConfig:
        if self.provider == "openai":
            if not self.base_url or not self.base_url.startswith(("http://", "https://")):
                raise ValueError(
                    "provider openai needs base_url, an http(s) URL such as https://openrouter.ai/api/v1 "
                    "or http://127.0.0.1:11434/v1 (Ollama)"
                )
            if not self.name:
                raise ValueError("provider openai needs name, the endpoint's model id")
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ValueError(f"api_key_env names ${self.api_key_env}, which is not set")
        if self.provider == "gemini" and not self.api_key_env and not any(os.environ.get(v) for v in GEMINI_KEY_VARS):
            raise ValueError("provider gemini needs a Google API key in $GOOGLE_API_KEY or $GEMINI_API_KEY")
        return self

    def api_key(self) -> str | None:
        if self.api_key_env:
            return os.environ.get(self.api_key_env)
        if self.provider == "gemini":
            return next((os.environ[v] for v in GEMINI_KEY_VARS if os.environ.get(v)), None)
        return None


class HttpConfig(_Section):
    """The HTTP shim for the Zotero plugin (loopback only)."""

    enabled: bool = True
    base_port: int = Field(8765, ge=0, le=65535)
    # A fixed port (`--http-port N`), used as is instead of base_port + the data dir's offset;
    # 0 means any free port.
    port: int | None = Field(None, ge=0, le=65535)
    allowed_origins: list[str] = Field(default_factory=list)


class LibraryConfig(_Section):
    """The user's Zotero library: the full-text index `zocrates-data/library.db` and how it reads
    Zotero (zocratesd/library). The local API is tried first when on; it must be loopback."""

    enabled: bool = True
    local_api: bool = True
    local_api_url: str = "http://127.0.0.1:23119"
    # How often the indexer checks Zotero for changes: cheap (a stat, or one small local API
    # request), and 30 s keeps a paper added in Zotero searchable within a minute.
    poll_interval_s: float = Field(30.0, gt=0)

    @field_validator("local_api_url")
    @classmethod
    def _loopback(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the local API is Zotero's own server on this machine: http://127.0.0.1:PORT")
        return url.rstrip("/")


class RpcConfig(_Section):
    # 16 MiB: large enough for a prompt with many embedded snippets, small enough that a runaway
    # client cannot make the daemon buffer without bound (rust-sdk #342 argues for a finite cap).
    max_frame_bytes: int = Field(16 * 1024 * 1024, ge=1024)


class ZocratesConfig(BaseSettings):
    """Every key the spec names, with the spec's default. 0 or null disables a retention pass."""

    model_config = SettingsConfigDict(
        env_prefix="ZOCRATES_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    session_retention_days: int | None = Field(180, ge=0)
    max_saved_sessions: int | None = Field(100, ge=0)
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    research: ResearchConfig = Field(default_factory=ResearchConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    rpc: RpcConfig = Field(default_factory=RpcConfig)
    library: LibraryConfig = Field(default_factory=LibraryConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _JsonFileSource(settings_cls))


# The file of the config being loaded; a context variable because pydantic-settings builds its
# sources inside the constructor, and one process may load configs for several data dirs (tests).
_loading: ContextVar[dict[str, Any]] = ContextVar("_loading")


class _JsonFileSource(PydanticBaseSettingsSource):
    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:  # pragma: no cover
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return _loading.get({})


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
        if not isinstance(file_data, dict):
            raise ConfigError(f"{path}: the top level must be a JSON object, not {type(file_data).__name__}")
    token = _loading.set(file_data)
    try:
        return ZocratesConfig(**(overrides or {}))
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path)) from None
    finally:
        _loading.reset(token)


def _explain(exc: ValidationError, path: Path) -> str:
    lines = [f"invalid configuration (from {path}, ZOCRATES_* variables or flags):"]
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"  {key}: {msg} (got {err.get('input')!r})")
    return "\n".join(lines)
