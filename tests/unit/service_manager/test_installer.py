"""The unit templates and the installer, in-process: rendering, escaping, the plist, launchd's flow.

launchctl does not exist on Linux; a tiny script records its argv instead (it stands in for the OS
tool, not for our code), and `launchctl print` answers "loaded" or not as the test says.
"""

from __future__ import annotations

import io
import os
import plistlib
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from zocratesd import locations
from zocratesd.service_manager import activation, installer
from zocratesd.service_manager.installer import Launchd, ServiceError, Settings, SystemdUser

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def home(short_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = short_tmp / "home"
    h.mkdir()
    run = short_tmp / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    return h


@pytest.fixture
def fake_launchctl(short_tmp: Path) -> dict[str, str]:
    tool = short_tmp / "launchctl"
    tool.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{short_tmp}/calls"\n'
        f'if [ "$1" = print ]; then [ -e "{short_tmp}/loaded" ]; exit $?; fi\n'
    )
    tool.chmod(0o755)
    return {"ZOCRATESD_LAUNCHCTL": str(tool)}


def calls(tmp: Path) -> list[str]:
    f = tmp / "calls"
    return f.read_text().splitlines() if f.exists() else []


@pytest.mark.parametrize(
    ("top", "name"),
    [("systemd", "zocratesd.socket"), ("systemd", "zocratesd.service"), ("launchd", "org.zocrates.zocratesd.plist")],
)
def test_packaged_templates_equal_the_top_level_ones(top: str, name: str) -> None:
    packaged = REPO / "zocratesd" / "service_manager" / "templates" / name
    assert packaged.read_bytes() == (REPO / top / name).read_bytes(), f"copy {top}/{name} to {packaged}"
    assert installer.MARKER in packaged.read_text()


def test_systemd_units_name_the_socket_the_daemon_looks_for(home: Path, short_tmp: Path) -> None:
    data = short_tmp / "zotero"
    files = SystemdUser(Settings(data_dir=data, home=home), {}).files()
    sock = files[home / ".config/systemd/user/zocratesd.socket"]
    svc = files[home / ".config/systemd/user/zocratesd.service"]
    assert f"ListenStream={locations.default_socket_path(data)}\n" in sock
    assert f"FileDescriptorName={activation.SOCKET_NAME}\n" in sock
    assert "@" not in sock.replace("zocratesd service install", "").split("[Unit]")[1]  # no placeholder left
    assert f"ExecStart={sys.executable} -m zocratesd serve --zotero-data-dir {data}\n" in svc


def test_xdg_config_home_is_where_the_user_manager_looks(home: Path, short_tmp: Path) -> None:
    cfg = short_tmp / "cfg"
    files = SystemdUser(Settings(data_dir=short_tmp, home=home), {"XDG_CONFIG_HOME": str(cfg)}).files()
    assert sorted(files) == [cfg / "systemd/user/zocratesd.service", cfg / "systemd/user/zocratesd.socket"]


@pytest.mark.parametrize("data", ["/z/My Library", "/z/100%", "/z/$HOME", '/z/say "hi"', "/z/back\\slash", "/z/plain"])
def test_exec_start_round_trips_any_data_dir(home: Path, data: str) -> None:
    argv = Settings(data_dir=Path(data), home=home, python="/opt/py 3/bin/python").serve_argv()
    line = " ".join(installer.systemd_word(a) for a in argv)
    # systemd unquotes like a POSIX shell for these escapes, then turns %% and $$ back into % and $.
    assert [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line)] == argv


def test_control_characters_in_paths_are_refused(home: Path) -> None:
    with pytest.raises(ServiceError, match="control character"):
        SystemdUser(Settings(data_dir=Path("/z/two\nlines"), home=home), {}).files()


def test_a_socket_path_too_long_for_sun_path_is_refused(home: Path) -> None:
    with pytest.raises(ServiceError, match="longer than"):
        Settings(data_dir=Path("/z"), home=home, socket_path=Path("/" + "x" * 200)).resolved_socket_path()


def test_a_runtime_dir_too_deep_for_a_socket_gives_units_the_short_path(
    home: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListenStream= and SockPathName have bind()'s limit: the units get the path clients compute."""
    deep = short_tmp / ("r" * (150 - len(str(short_tmp)) - 1))
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    monkeypatch.setattr(locations, "SHORT_SOCKET_PARENT", short_tmp)
    data = short_tmp / "zotero"
    expected = short_tmp / f"zocrates-{os.geteuid()}" / locations.default_socket_path(data).name
    assert locations.default_socket_path(data) == expected
    files = SystemdUser(Settings(data_dir=data, home=home), {}).files()
    assert f"ListenStream={expected}\n" in files[home / ".config/systemd/user/zocratesd.socket"]
    (plist,) = Launchd(Settings(data_dir=data, home=home), {}).files().values()
    assert plistlib.loads(plist.encode())["Sockets"][activation.SOCKET_NAME]["SockPathName"] == str(expected)
    if os.geteuid() == 0:  # another user made that directory first: the unit could never listen
        expected.parent.mkdir(mode=0o700)
        os.chown(expected.parent, 65534, 65534)
        with pytest.raises(ServiceError, match="belongs to uid 65534"):
            Settings(data_dir=data, home=home).resolved_socket_path()


def test_plist_has_what_launchd_needs(home: Path, short_tmp: Path) -> None:
    data = short_tmp / "Zotero & <co>"
    settings = Settings(data_dir=data, home=home, idle_exit_after=600)
    (text,) = Launchd(settings, {}).files().values()
    plist = plistlib.loads(text.encode())
    assert plist["Label"] == "org.zocrates.zocratesd"
    assert plist["ProgramArguments"] == settings.serve_argv()
    assert plist["ProgramArguments"][-2:] == ["--idle-exit-after", "600"]
    sock = plist["Sockets"][activation.SOCKET_NAME]
    assert sock["SockPathName"] == str(locations.default_socket_path(data))
    assert sock["SockPathMode"] == 0o600 == 384  # launchd reads the integer as decimal
    assert plist["KeepAlive"] == {"SuccessfulExit": False}  # restart after a crash, not after idle exit
    assert plist["RunAtLoad"] is False
    log = str(home / "Library/Logs/zocrates/zocratesd.log")
    assert plist["StandardOutPath"] == plist["StandardErrorPath"] == log
    assert installer.MARKER in text


def test_launchd_install_update_and_uninstall(home: Path, short_tmp: Path, fake_launchctl: dict[str, str]) -> None:
    data = short_tmp / "zotero"
    mgr = Launchd(Settings(data_dir=data, home=home), fake_launchctl)
    plist_path = home / "Library/LaunchAgents/org.zocrates.zocratesd.plist"
    target = f"gui/{os.getuid()}/org.zocrates.zocratesd"
    tool = fake_launchctl["ZOCRATESD_LAUNCHCTL"]

    out = io.StringIO()
    assert installer.install(mgr, dry_run=True, out=out) == 0
    assert not plist_path.exists()
    assert f"# would run: {tool} bootstrap gui/{os.getuid()} {plist_path}" in out.getvalue()

    assert installer.install(mgr, out=io.StringIO()) == 0
    assert calls(short_tmp)[-1] == f"bootstrap gui/{os.getuid()} {plist_path}"
    assert plistlib.loads(plist_path.read_bytes())["Label"] == "org.zocrates.zocratesd"
    # launchd creates neither directory: the installer did, private.
    sock_dir = locations.default_socket_path(data).parent
    for d in (sock_dir, home / "Library/Logs/zocrates"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700

    (short_tmp / "loaded").touch()  # launchd now has the job
    n = len(calls(short_tmp))
    out = io.StringIO()
    assert installer.install(mgr, out=out) == 0
    assert calls(short_tmp)[n:] == [f"print {target}"] and "nothing to do" in out.getvalue()

    changed = Launchd(Settings(data_dir=data, home=home, idle_exit_after=60), fake_launchctl)
    assert installer.install(changed, out=io.StringIO()) == 0
    assert calls(short_tmp)[-2:] == [f"bootout {target}", f"bootstrap gui/{os.getuid()} {plist_path}"]

    assert installer.uninstall(changed, out=io.StringIO()) == 0
    assert calls(short_tmp)[-1] == f"bootout {target}" and not plist_path.exists()


def test_launchd_refuses_a_foreign_plist(home: Path, short_tmp: Path, fake_launchctl: dict[str, str]) -> None:
    plist_path = home / "Library/LaunchAgents/org.zocrates.zocratesd.plist"
    plist_path.parent.mkdir(parents=True)
    theirs = plistlib.dumps({"Label": "org.zocrates.zocratesd", "ProgramArguments": ["/bin/true"]})
    plist_path.write_bytes(theirs)
    with pytest.raises(ServiceError, match="not written by"):
        installer.install(Launchd(Settings(data_dir=short_tmp, home=home), fake_launchctl), out=io.StringIO())
    assert plist_path.read_bytes() == theirs and calls(short_tmp) == []


def test_a_symlinked_unit_is_not_ours(home: Path, short_tmp: Path) -> None:
    units = home / ".config/systemd/user"
    units.mkdir(parents=True)
    real = short_tmp / "elsewhere.service"
    real.write_text(f"# {installer.MARKER}\n")
    (units / "zocratesd.service").symlink_to(real)
    assert installer.file_state(units / "zocratesd.service", "") == "foreign"


def test_status_warns_when_the_unit_listens_where_clients_do_not_look(
    home: Path, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = SystemdUser(Settings(data_dir=short_tmp / "a", home=home), {"ZOCRATESD_SYSTEMCTL": "/nonexistent"})
    for path, content in mgr.files().items():
        installer.write_file(path, content)
    other = SystemdUser(Settings(data_dir=short_tmp / "b", home=home), {"ZOCRATESD_SYSTEMCTL": "/nonexistent"})
    out = io.StringIO()
    assert installer.status(other, out=out) == 0
    assert f"it listens on {locations.default_socket_path(short_tmp / 'a')}" in out.getvalue()
    assert "unknown (/nonexistent not available)" in out.getvalue()


def test_fill_refuses_leftover_placeholders() -> None:
    with pytest.raises(ServiceError, match="@NEW_THING@"):
        installer.fill("ExecStart=@EXEC_START@ @NEW_THING@", {"EXEC_START": "/bin/true"})


def test_manager_for_picks_by_platform(home: Path) -> None:
    s = Settings(data_dir=Path("/z"), home=home)
    assert isinstance(installer.manager_for(s, "launchd", {}), Launchd)
    assert isinstance(installer.manager_for(s, "systemd", {}), SystemdUser)
    expected: Any = Launchd if sys.platform == "darwin" else SystemdUser
    assert isinstance(installer.manager_for(s, environ={}), expected)
