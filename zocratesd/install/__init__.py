"""A Zotero user's set-up: the plugin from the package, `zocratesd setup`, `zocratesd doctor`.

- `plugin`: the Zotero plugin's files ship inside the package (`zotero_plugin/`, a link to
  `clients/zotero/plugin` in the repository); `build_xpi` zips them into the XPI, no Node needed;
- `client_configs`: the MCP/ACP clients' config files (Claude Desktop, Cursor, Zed, Gemini CLI),
  read, and merged into with a backup first;
- `setup`: the one command after the install; `doctor`: every check a support thread would ask for.

Zotero's own profile (profiles.ini, prefs.js, compatibility.ini, extensions.json) and the data dir
it names are read by `zocratesd/zotero_profile.py`: the daemon and its clients choose their data dir
with it too. The CLI (`zocratesd/cli.py`) only adapts these; the daemon's shim serves `doctor`'s report to the
plugin's preferences pane.
"""
