"""The daemon raises its soft open-file limit toward the hard one at start (zocratesd/process/fdlimit.py).

Each case runs in a child process started with the limits it needs: the test process's own
limit is left alone.
"""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def raised(soft: int, hard: int, wanted: int | None = None) -> tuple[int, int, int]:
    """(returned, soft, hard) after raise_fd_limit() in a process started with (soft, hard)."""
    call = "raise_fd_limit()" if wanted is None else f"raise_fd_limit({wanted})"
    code = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))\n"
        "from zocratesd.process.fdlimit import raise_fd_limit\n"
        f"got = {call}\n"
        "print(got, *resource.getrlimit(resource.RLIMIT_NOFILE))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    a, b, c = (int(x) for x in out.stdout.split())
    return a, b, c


@pytest.mark.skipif(HARD != resource.RLIM_INFINITY and HARD < 4096, reason="needs a hard open-file limit of 4096 or more")
def test_a_desktop_soft_limit_is_raised_to_the_hard_limit() -> None:
    assert raised(1024, 4096) == (4096, 4096, 4096)


@pytest.mark.skipif(HARD != resource.RLIM_INFINITY and HARD < 4096, reason="needs a hard open-file limit of 4096 or more")
def test_it_stops_at_what_it_wants_and_never_lowers() -> None:
    assert raised(256, 4096, wanted=2048) == (2048, 2048, 4096)
    assert raised(3000, 4096, wanted=2048) == (3000, 3000, 4096)


def test_a_soft_limit_already_at_the_hard_limit_stays() -> None:
    assert raised(1024, 1024) == (1024, 1024, 1024)
