"""The private pages that open the web app with a code (zocratesd/shim/openpage.py), with the codes
that decide how long they live (shim/codes.py). As another user sees them: tests/e2e/test_open_page.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from zocratesd.locations import RuntimeFileError
from zocratesd.shim.codes import CODE_TTL_S, MAX_OUTSTANDING, OneTimeCodes
from zocratesd.shim.openpage import OpenPages


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pages(tmp_path: Path) -> tuple[OneTimeCodes, OpenPages, Clock, Path]:
    tmp_path.chmod(0o700)
    directory = tmp_path / "run" / "zocrates"
    clock = Clock()
    codes = OneTimeCodes(clock=clock)
    pages = OpenPages(CODE_TTL_S, directory=lambda: directory)
    codes.on_drop = pages.drop
    return codes, pages, clock, directory


def test_a_page_redirects_to_the_address_and_is_private(tmp_path: Path) -> None:
    codes, pages, _, directory = _pages(tmp_path)
    code = codes.mint()
    page = pages.write(code, f'http://127.0.0.1:1234/ui/#code={code}&"<x>')
    assert page.parent == directory and page.name.startswith("open-") and page.suffix == ".html"
    assert stat.S_IMODE(page.stat().st_mode) == 0o600 and stat.S_IMODE(directory.stat().st_mode) == 0o700
    text = page.read_text()
    assert f'content="0;url=http://127.0.0.1:1234/ui/#code={code}&amp;&quot;&lt;x&gt;"' in text
    assert "<script" not in text


def test_a_page_goes_with_its_code_exchanged_expired_or_pushed_out(tmp_path: Path) -> None:
    codes, pages, clock, _ = _pages(tmp_path)
    used, late = codes.mint(), codes.mint()
    used_page, late_page = pages.write(used, "http://x/1"), pages.write(late, "http://x/2")
    assert codes.redeem(used) and not used_page.exists() and late_page.exists()
    clock.now += CODE_TTL_S
    assert codes.outstanding() == 0 and not late_page.exists()
    first = codes.mint()
    first_page = pages.write(first, "http://x/3")
    for _ in range(MAX_OUTSTANDING):
        codes.mint()
    assert not first_page.exists()


def test_close_removes_every_page_and_a_dead_daemons_old_pages_go_at_the_next_write(tmp_path: Path) -> None:
    codes, pages, _, directory = _pages(tmp_path)
    live = pages.write(codes.mint(), "http://x/1")
    pages.close()
    assert not live.exists()
    directory.mkdir(parents=True, exist_ok=True)
    old, recent, other = directory / "open-old.html", directory / "open-recent.html", directory / "zocratesd-x.sock"
    for path in (old, recent, other):
        path.write_text("")
    os.utime(old, (1, 1))
    os.utime(other, (1, 1))
    pages.write(codes.mint(), "http://x/2")
    assert not old.exists() and recent.exists() and other.exists()


def test_a_directory_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    pages = OpenPages(CODE_TTL_S, directory=lambda: tmp_path / "link")
    with pytest.raises(RuntimeFileError, match="symbolic link"):
        pages.write("c", "http://x/1")
    assert list(target.iterdir()) == []
