"""The file `zocrates open` gives a browser instead of the web app's address with its one-time code.

Every local user can read a process's command line (`/proc/<pid>/cmdline`), and a browser started
with an address keeps it there (a fresh Firefox, for its whole life): another user watching `/proc`
traded such a code before the page did. So the daemon writes, on request of a holder of the token
(`POST /auth/code` with `"page_file": true`), a small HTML page that redirects to the address, into
its private runtime directory (0700, the file 0600), and the command opens the file: a command line
then names only a file no one else can read (what Jupyter does). The file lives as long as its code
(shim/codes.py `on_drop`): it is removed once the code is exchanged, expires or is pushed out by
newer ones, and at the daemon's exit; one left by a daemon that was killed is removed by the next
page written, once it is older than a code's lifetime.
"""

from __future__ import annotations

import contextlib
import html
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from zocratesd import locations

PREFIX = "open-"
SUFFIX = ".html"
# A page is read once by a browser starting up, so it is tiny: a redirect, and a link for a
# browser that does not follow it. No script: a file:// page runs none of ours.
PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<meta http-equiv="refresh" content="0;url={url}">
<title>Zocrates</title></head>
<body><p>Opening <a href="{url}">the Zocrates web app</a>...</p></body></html>
"""


def page_dir() -> Path:
    """Where the pages go: the user's runtime directory for zocrates (the default socket's too)."""
    return locations.runtime_dir()


class OpenPages:
    """The pages of the live codes, by code."""

    def __init__(self, ttl_s: float, directory: Callable[[], Path] = page_dir, clock: Callable[[], float] = time.time):
        self.ttl_s = ttl_s
        self.directory = directory
        self.clock = clock
        self._pages: dict[str, Path] = {}

    def write(self, code: str, url: str) -> Path:
        """A new private page that redirects to `url`, removed when `code` is dropped. Raises
        RuntimeFileError when the directory is not a private one of ours, OSError when it cannot
        be written."""
        directory = self.directory()
        locations.ensure_socket_dir(directory, ours=True)  # 0700, ours, in a parent no one else can change
        self._remove_stale(directory)
        path = directory / f"{PREFIX}{secrets.token_hex(16)}{SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(PAGE.format(url=html.escape(url, quote=True)))
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        self._pages[code] = path
        return path

    def drop(self, code: str) -> None:
        path = self._pages.pop(code, None)
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    def close(self) -> None:
        """Remove every page (the daemon stops: their codes die with it)."""
        for code in list(self._pages):
            self.drop(code)

    def _remove_stale(self, directory: Path) -> None:
        ours = set(self._pages.values())
        oldest = self.clock() - self.ttl_s
        for path in directory.glob(f"{PREFIX}*{SUFFIX}"):
            with contextlib.suppress(OSError):
                if path not in ours and path.lstat().st_mtime < oldest:
                    path.unlink()
