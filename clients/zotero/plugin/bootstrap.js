// bootstrap.js: Zotero 7+ plugin lifecycle (called by Zotero.Plugins with {id, version, rootURI}).
// Everything the plugin adds is added here or by what this loads, and taken away in shutdown:
// the pane, toolbar button and menu item in each main window (ZocratesPlugin), the preferences pane
// (unregistered by Zotero itself when the plugin shuts down), the bridge's timers and listeners, and
// the bridge's JSWindowActor and its resource://zocrates/ mapping, and the write channel (writes.js).

/* global ZocratesPlugin, ZocratesBridge, ZocratesWrites */

function install() {}

/** @param {{id: string, version: string, rootURI: string}} data */
async function startup({ id, version, rootURI }) {
  // The preferences window and main windows read Zotero's data: wait until Zotero is ready.
  await Zotero.initializationPromise;
  // The preferences window loads bridge.js on its own; it finds this version here to compare with the daemon's.
  /** @type {any} */ (Zotero).ZocratesPluginVersion = version;
  Services.scriptloader.loadSubScript(`${rootURI}bridge.js`);
  Services.scriptloader.loadSubScript(`${rootURI}zocrates.js`);
  Services.scriptloader.loadSubScript(`${rootURI}writes.js`); // uses bridge.js
  // The page runs in a content process: a JSWindowActor pair carries its messages (bridge.js).
  ZocratesBridge.registerActors(rootURI);
  ZocratesPlugin.init({ id, version, rootURI });
  await Zotero.PreferencePanes.register({
    pluginID: id,
    src: `${rootURI}preferences.xhtml`,
    scripts: [`${rootURI}bridge.js`, `${rootURI}preferences.js`],
    stylesheets: [`${rootURI}style.css`],
    image: `${rootURI}icons/zocrates.svg`,
  });
  ZocratesPlugin.addToAllWindows();
  // Writes the daemon hands over reach Zotero whether or not the pane is open.
  ZocratesWrites.start({ version });
  Zotero.debug(`Zocrates: started ${version}`);
}

/** @param {{window: _ZoteroTypes.MainWindow}} data */
function onMainWindowLoad({ window }) {
  if (typeof ZocratesPlugin !== "undefined") ZocratesPlugin.addToWindow(window);
}

/** @param {{window: _ZoteroTypes.MainWindow}} data */
function onMainWindowUnload({ window }) {
  if (typeof ZocratesPlugin !== "undefined") ZocratesPlugin.removeFromWindow(window);
}

function shutdown() {
  delete (/** @type {any} */ (Zotero).ZocratesPluginVersion);
  // Also on application shutdown: removing our elements and timers is cheap and leaves nothing behind.
  if (typeof ZocratesPlugin !== "undefined") ZocratesPlugin.removeFromAllWindows();
  if (typeof ZocratesBridge !== "undefined") ZocratesBridge.unregisterActors();
  // Ends its open poll at once; a write being performed finishes on its own.
  if (typeof ZocratesWrites !== "undefined") ZocratesWrites.stop().catch((/** @type {any} */ err) => Zotero.logError(err));
}

function uninstall() {}
