"""The daemon process: the composition root that builds the core and hands it to the faces.

- `boot.py`: the one start-up and shutdown sequence of `zocratesd serve` and `stdio --standalone`;
- `transports.py`: where connections come from (the Unix socket plus the HTTP shim, or fds 0/1);
- `instance.py`: the instance lock, the claimed or adopted socket path, daemon.json;
- `connections.py`: live connections, counted for idle exit and drained at shutdown; the accept loop;
- `startup.py`: what loads at each stage of a start, in the background once the socket serves;
- `lifecycle.py`: stop signals, idle exit, the systemd watchdog, warm-up and the start-up heap freeze;
- `logs.py`, `peercred.py`, `fdstream.py`: logging set-up, a socket peer's uid, stdin/stdout as a stream;
- `lograte.py`, `fdlimit.py`: a log that cannot be flooded, the open-file limit raised at start.

Nothing in the core or the faces imports this package (tests/unit/test_import_rules.py).
"""
