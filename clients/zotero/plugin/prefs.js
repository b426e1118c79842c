// Default preferences (Zotero reads prefs.js from the plugin root at startup).
pref("extensions.zocrates.paneOpen", true);
pref("extensions.zocrates.paneWidth", 380);
