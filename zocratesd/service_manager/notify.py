"""sd_notify(3) in the standard library: readiness, stopping and watchdog pings for systemd.

A `Type=notify` service tells its manager how it is doing by sending datagrams of newline-separated
`KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET` (systemd `src/libsystemd/sd-daemon/
sd-daemon.c`, man sd_notify(3)):

- a value starting with `/` is a filesystem path; one starting with `@` is a Linux abstract-namespace
  name (the `@` stands for the leading NUL byte). Anything else (`vsock:...`, used by VMs) is not
  something a per-user daemon gets, and is ignored with a warning;
- `READY=1` once we serve, `STOPPING=1` when shutdown starts, `WATCHDOG=1` every half of
  `$WATCHDOG_USEC` (sd_watchdog_enabled(3) recommends pinging at half the interval), honouring
  `$WATCHDOG_PID` when it names another process.

Sending never raises: a manager that went away must not take the daemon down with it. A full
receive queue (a manager that is not reading) gets READY/STOPPING a short wait, and watchdog pings
none at all: a ping dropped is harmless, a loop stalled on it is not.
`from_environ` removes the variables, as sd_notify's `unset_environment` does, so processes we
start do not talk to our manager in our name.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import MutableMapping

log = logging.getLogger(__name__)

ENV_NOTIFY_SOCKET = "NOTIFY_SOCKET"
ENV_WATCHDOG_USEC = "WATCHDOG_USEC"
ENV_WATCHDOG_PID = "WATCHDOG_PID"

# How long READY=1 and STOPPING=1 may wait for room in the manager's queue. systemd reads at once;
# libsystemd itself blocks, we bound it because we send from the event loop.
STATE_SEND_TIMEOUT_S = 1.0
# Pings go out at half the watchdog interval (sd_watchdog_enabled(3)), but never more often than
# this: a tiny WATCHDOG_USEC (a typo, a test) must not turn the ping task into a busy loop.
MIN_WATCHDOG_PING_S = 0.05

Address = str | bytes


def parse_address(value: str) -> Address | None:
    """The sendto() address for a `$NOTIFY_SOCKET` value, or None when it is not a Unix socket."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return b"\0" + os.fsencode(value[1:])  # abstract namespace: a leading NUL, no file
    return None


def watchdog_ping_interval(environ: MutableMapping[str, str], pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings, or None when the manager runs no watchdog for `pid`."""
    usec = environ.get(ENV_WATCHDOG_USEC)
    if not usec:
        return None
    wd_pid = environ.get(ENV_WATCHDOG_PID)
    try:
        if wd_pid and int(wd_pid) != pid:
            return None
        interval_us = int(usec)
    except ValueError:
        log.warning("ignoring an unparsable watchdog setting: %s=%r %s=%r", ENV_WATCHDOG_USEC, usec, ENV_WATCHDOG_PID, wd_pid)
        return None
    if interval_us <= 0:
        return None
    return max(interval_us / 1e6 / 2, MIN_WATCHDOG_PING_S)


class Notifier:
    """Messages to the service manager; every method is a no-op when no manager listens."""

    def __init__(self, address: Address | None, watchdog_interval_s: float | None = None):
        self.address = address
        self.watchdog_interval_s = watchdog_interval_s
        self._sock: socket.socket | None = None
        self._warned = False

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str] | None = None, pid: int | None = None) -> Notifier:
        """Read (and remove) NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID."""
        env = os.environ if environ is None else environ
        pid = os.getpid() if pid is None else pid
        raw = env.get(ENV_NOTIFY_SOCKET, "")
        address = parse_address(raw) if raw else None
        if raw and address is None:
            log.warning("ignoring %s=%r: only Unix socket addresses are supported", ENV_NOTIFY_SOCKET, raw)
        interval = watchdog_ping_interval(env, pid) if address is not None else None
        for key in (ENV_NOTIFY_SOCKET, ENV_WATCHDOG_USEC, ENV_WATCHDOG_PID):
            env.pop(key, None)
        return cls(address, interval)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *assignments: str, timeout: float = 0.0) -> bool:
        """Send `KEY=VALUE` lines as one datagram; False when there is no manager or it failed.

        `timeout` is how long a full queue may hold us up (0: drop the message at once).
        """
        if self.address is None:
            return False
        payload = "\n".join(assignments).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.settimeout(timeout)
            self._sock.sendto(payload, self.address)
        except (BlockingIOError, TimeoutError):
            log.debug("service manager's queue is full; dropped %r", payload)
            return False
        except OSError as exc:
            # Warn once: a manager that is gone stays gone, and watchdog pings would flood the log.
            if not self._warned:
                log.warning("cannot notify the service manager at %r: %s", self.address, exc)
                self._warned = True
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.notify("READY=1", *_status(status), timeout=STATE_SEND_TIMEOUT_S)

    def stopping(self, status: str | None = None) -> bool:
        return self.notify("STOPPING=1", *_status(status), timeout=STATE_SEND_TIMEOUT_S)

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _status(text: str | None) -> list[str]:
    """A STATUS= line; the protocol is line based, so a newline in the text would start a new key."""
    return [f"STATUS={' '.join(text.splitlines())}"] if text else []
