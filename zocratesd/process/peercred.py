"""Who is at the other end of a Unix socket: the daemon serves its own user only."""

from __future__ import annotations

import ctypes
import ctypes.util
import socket
import struct


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (Linux SO_PEERCRED, BSD/macOS
    getpeereid), or None when the OS cannot say."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return int(uid)
    try:  # pragma: no cover - macOS/BSD
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        uid_t, gid_t = ctypes.c_uint32(), ctypes.c_uint32()
        if libc.getpeereid(sock.fileno(), ctypes.byref(uid_t), ctypes.byref(gid_t)) == 0:
            return int(uid_t.value)
    except (OSError, AttributeError):
        pass
    return None
