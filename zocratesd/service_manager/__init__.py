"""Running under the OS service manager: socket activation, sd_notify, and the unit installer.

- `activation`: listening sockets passed by systemd (`LISTEN_FDS`) or launchd (`launch_activate_socket`);
- `notify`: sd_notify(3) over `$NOTIFY_SOCKET` (READY=1, STOPPING=1, WATCHDOG=1);
- `installer`: `zocratesd service install|uninstall|status`, from the templates in `templates/`
  (copies of the repository's top-level `systemd/` and `launchd/`).

Standard library only; the daemon imports `activation` and `notify` before its event loop starts.
"""
