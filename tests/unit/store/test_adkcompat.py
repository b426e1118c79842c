"""ADK's private names are used in one module, which refuses an ADK release it was not written for."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from zocratesd import adkcompat

ROOT = Path(__file__).resolve().parents[3]


def test_the_pin_and_the_compatibility_module_name_the_same_release() -> None:
    pin = re.search(r'"google-adk\[db\]==(\d+)\.(\d+)\.\*"', (ROOT / "pyproject.toml").read_text())
    assert pin is not None
    assert (int(pin[1]), int(pin[2])) == adkcompat.SUPPORTED


def test_another_adk_release_is_refused_at_import_with_what_to_install() -> None:
    probe = textwrap.dedent(
        """
        import google.adk
        google.adk.__version__ = "2.14.0"
        import zocratesd.adkcompat
        """
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "zocratesd needs google-adk 2.13.x" in out.stderr and "found 2.14.0" in out.stderr


def test_no_other_module_imports_adk_private_names() -> None:
    """`from google.adk...._x import` or `google.adk.x._y` outside adkcompat.py (the runner's list
    of ADK's lazily imported modules, preloaded by name, is not a use of their contents)."""
    private = re.compile(r"^\s*(from|import)\s+google\.adk[\w.]*\._\w+|^\s*from\s+google\.adk[\w.]*\s+import\s+.*\b_[a-z]\w*", re.M)
    bad = [str(p.relative_to(ROOT)) for p in (ROOT / "zocratesd").rglob("*.py")
           if p.name != "adkcompat.py" and private.search(p.read_text())]
    assert not bad, f"ADK's private names used outside zocratesd/adkcompat.py: {bad}"
