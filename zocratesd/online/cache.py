"""`zocrates-data/online_cache.db`: the providers' answers, kept a day, so a question asked again (a
follow-up, a resumed checkpoint, the same search from another face) costs no request. The cache is
the file's one owner; only successful answers are kept, keyed by the request as sent."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path
from typing import Final

from zocratesd.locations import ensure_private_dir

CACHE_NAME: Final = "online_cache.db"
# A day: scholarly indexes change slowly, and a repeated question within the day costs nothing.
CACHE_TTL_S: Final = 86_400.0
# Older entries are dropped past this many (each is one answer, up to a few hundred KiB).
MAX_ENTRIES: Final = 2_000


def request_key(url: str, params: dict[str, str]) -> str:
    canonical = url + "?" + "&".join(f"{k}={v}" for k, v in sorted(params.items()))
    return hashlib.sha256(canonical.encode()).hexdigest()


class OnlineCache:
    def __init__(self, state_dir: Path, *, ttl_s: float = CACHE_TTL_S):
        ensure_private_dir(state_dir)
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(state_dir / CACHE_NAME, check_same_thread=False, isolation_level=None, timeout=10.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, fetched_at REAL NOT NULL, body BLOB NOT NULL)")

    def get(self, key: str) -> bytes | None:
        with self._lock:
            row = self._conn.execute("SELECT body FROM answers WHERE key = ? AND fetched_at > ?",
                                     (key, time.time() - self.ttl_s)).fetchone()
        return bytes(row[0]) if row else None

    def put(self, key: str, body: bytes) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO answers (key, fetched_at, body) VALUES (?, ?, ?)", (key, time.time(), body))
            self._conn.execute("DELETE FROM answers WHERE key NOT IN (SELECT key FROM answers ORDER BY fetched_at DESC LIMIT ?)",
                               (MAX_ENTRIES,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
