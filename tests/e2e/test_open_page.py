"""`zocratesd open` and `zocrates open` as another local user sees them (shim/openpage.py, weblink.py).

Every local user can read every process's command line in /proc. Another user (uid 65534; root
only, skipped otherwise) reads every command line and environment it can, as fast as it can, while
both commands open the web app in a "browser" ($BROWSER: a script that records what it was given,
loads it as a browser would, follows the page's redirect and trades the code as the web app does,
then stays open a while, as a browser does). The one-time code must appear nowhere it can read, the
page file must be unreadable to it, and the page must still lead the real browser flow to the token.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from daemonproc import DaemonProc
from otheruser import as_nobody, needs_root, reaped
from test_cli import zocrates_command

pytestmark = [
    pytest.mark.e2e,
    needs_root,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

CLI_TIMEOUT_S = 60
# The "browser" stays this long after loading the page (a real one stays for its whole life).
BROWSER_LINGERS_S = 1.5

# Reads /proc/*/cmdline and /proc/*/environ until its stdin closes; prints every text it read.
WATCHER = r"""
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
seen = set()
print("watching", flush=True)
while not done.is_set():
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            for name in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{pid}/{name}", "rb") as f:
                        seen.add(f.read().decode("latin-1"))
                except OSError:
                    pass
    time.sleep(0.002)
print(json.dumps(sorted(seen)), flush=True)
"""
# Tries to read a file and list its directory; prints what it could.
READER = r"""
out = {}
for what, do in (("read", lambda p: open(p).read()), ("list", lambda p: os.listdir(os.path.dirname(p)))):
    try:
        do(sys.argv[1])
        out[what] = "ok"
    except OSError as exc:
        out[what] = type(exc).__name__
print(json.dumps(out))
"""
BROWSER = r'''#!{python}
import html, json, os, re, sys, time, urllib.error, urllib.parse, urllib.request
target = sys.argv[1]
record = {{"argv": sys.argv[1:], "pid": os.getpid()}}
if target.startswith("file://"):  # a browser reads the file and follows its redirect
    with open(urllib.parse.unquote(urllib.parse.urlsplit(target).path)) as f:
        page = f.read()
    target = html.unescape(re.search(r'http-equiv="refresh" content="0;url=([^"]+)"', page)[1])
record["loaded"] = target
address, _, fragment = target.partition("#")
assert urllib.request.urlopen(address, timeout=10).status == 200  # the web app's page
origin = address.split("/ui/")[0]
request = urllib.request.Request(origin + "/auth/exchange", data=json.dumps({{"code": fragment.removeprefix("code=")}}).encode(),
                                 headers={{"Content-Type": "application/json", "Origin": origin}})
try:
    record["exchange"] = json.load(urllib.request.urlopen(request, timeout=10))
except urllib.error.HTTPError as exc:
    record["exchange"] = {{"status": exc.code}}
with open({out!r} + ".tmp", "w") as f:
    json.dump(record, f)
os.rename({out!r} + ".tmp", {out!r})
time.sleep({linger})
'''


@pytest.fixture
def d(daemon_factory: Any, short_tmp: Path) -> DaemonProc:
    short_tmp.chmod(0o755)  # others reach the runtime dir (0700, as $XDG_RUNTIME_DIR is), and no further
    daemon: DaemonProc = daemon_factory(args=["--http-port", "0"])
    daemon.start()
    return daemon


def open_with_browser(d: DaemonProc, command: list[str], tmp: Path, name: str) -> tuple[str, dict[str, object]]:
    """Run an `open` command with the recording browser; the address it printed and the browser's record."""
    out = tmp / f"{name}.json"
    browser = tmp / f"{name}-browser"
    browser.write_text(BROWSER.format(python=sys.executable, out=str(out), linger=BROWSER_LINGERS_S))
    browser.chmod(0o755)
    env = {**d.env, "BROWSER": str(browser), "DISPLAY": ":99"}
    done = subprocess.run([*command, "--zotero-data-dir", str(d.data_dir)], env=env, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 30
    while not out.exists():
        assert time.monotonic() < deadline, "the browser never loaded the page"
        time.sleep(0.05)
    record = json.loads(out.read_text())
    cmdline = Path(f"/proc/{record['pid']}/cmdline")
    while cmdline.exists() and cmdline.read_bytes():  # the browser still open, its command line readable
        assert time.monotonic() < deadline + BROWSER_LINGERS_S, "the browser never exited"
        time.sleep(0.05)
    return done.stdout.strip(), record


def test_another_user_watching_proc_never_sees_the_code_and_the_page_still_opens_the_app(
    d: DaemonProc, tmp_path: Path
) -> None:
    info = d.info
    token, port = info["token"], info["http"]["port"]
    with reaped(as_nobody(WATCHER, stdin=subprocess.PIPE)) as watcher:
        assert watcher.stdout is not None and watcher.stdout.readline().strip() == "watching", watcher.stderr
        runs = {
            "zocratesd": open_with_browser(d, [sys.executable, "-m", "zocratesd", "open"], tmp_path, "zocratesd"),
            "zocrates": open_with_browser(d, [*zocrates_command(), "open"], tmp_path, "zocrates"),
        }
        seen_json, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    seen = json.loads(seen_json)
    for name, (printed, record) in runs.items():
        code = printed.split("#code=")[1]
        assert len(code) >= 40, printed
        leaks = [text[:300] for text in seen if code in text]
        assert not leaks, (name, leaks)
        # The browser was started on the daemon's page file, which led it to the web app with the
        # code, and the page's exchange gave it the token.
        opened = str(record["argv"][0])  # type: ignore[index]
        assert opened.startswith("file:///") and code not in opened, (name, opened)
        assert record["loaded"] == f"http://127.0.0.1:{port}/ui/#code={code}", (name, record)
        assert record["exchange"] == {"status": "success", "token": token}, (name, record)
        # The page went with its code.
        assert not Path(opened.removeprefix("file://")).exists(), name
        # The other user did see the browser's command line (it watched), but nowhere the code.
        assert any(opened in text for text in seen), (name, "the watcher never saw the browser")
    assert not [text[:300] for text in seen if token in text]


def test_the_page_file_is_private_and_goes_with_its_code_or_the_daemon(d: DaemonProc) -> None:
    info = d.info
    token, port = info["token"], info["http"]["port"]
    auth = {"Authorization": f"Bearer {token}"}
    minted = httpx.post(f"http://127.0.0.1:{port}/auth/code", json={"page_file": True}, headers=auth, timeout=10).json()
    page = Path(minted["page_file"])
    assert page.parent == d.runtime_dir / "zocrates", page
    st, dir_st = page.stat(), page.parent.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid(), oct(st.st_mode)
    assert stat.S_IMODE(dir_st.st_mode) == 0o700, oct(dir_st.st_mode)
    assert f"http://127.0.0.1:{port}/ui/#code={minted['code']}" in page.read_text()
    with reaped(as_nobody(READER, str(page))) as reader:
        out, err = reader.communicate(timeout=30)
    assert json.loads(out) == {"read": "PermissionError", "list": "PermissionError"}, (out, err)
    # Without "page_file", no page; a wrong type is refused.
    plain = httpx.post(f"http://127.0.0.1:{port}/auth/code", json={}, headers=auth, timeout=10).json()
    assert "page_file" not in plain
    bad = httpx.post(f"http://127.0.0.1:{port}/auth/code", json={"page_file": "yes"}, headers=auth, timeout=10)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "page_file"
    # Exchanged: gone.
    r = httpx.post(f"http://127.0.0.1:{port}/auth/exchange", json={"code": minted["code"]}, timeout=10)
    assert r.status_code == 200 and not page.exists()
    # Left unused: gone when the daemon stops (its codes die with it).
    unused = Path(httpx.post(f"http://127.0.0.1:{port}/auth/code", json={"page_file": True}, headers=auth,
                             timeout=10).json()["page_file"])
    assert unused.exists()
    d.stop(15)
    assert not unused.exists()
