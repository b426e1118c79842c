"""Where the benchmarks live, where their results go, and what they import from the repo.

Everything under bench/ is for measuring, never for the daemon: it may import the daemon's modules
(to build data exactly as the daemon would) and the tests' helpers (tests/daemonproc.py starts
every daemon; fake_openai.py and zoterofixture.py serve some benchmarks), but nothing imports it.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
TESTS_DIR = REPO_DIR / "tests"
OUT_DIR = BENCH_DIR / "out"

# `import zocratesd` works when a bench script is run from anywhere with the venv's python (the
# venv has the project installed editable; this is only a fallback); the tests' helpers come after
# everything else, so they shadow nothing.
if str(REPO_DIR) not in sys.path:
    sys.path.insert(0, str(REPO_DIR))
if str(TESTS_DIR) not in sys.path:
    sys.path.append(str(TESTS_DIR))
