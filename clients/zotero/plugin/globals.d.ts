// What the plugin's scripts find in their scopes besides zotero-types' globals.

/** prefs.js: Zotero's default-preferences loader provides `pref(name, value)`. */
declare function pref(name: string, value: string | number | boolean): void;
