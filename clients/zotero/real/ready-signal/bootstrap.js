// A sideloaded extension of the real-Zotero test's profile (never shipped): Marionette's
// WebDriver:NewSession waits for "browser-idle-startup-tasks-finished", a topic Firefox's browser
// window sends and Zotero's main window does not. Once Zotero's UI is ready, send it ourselves.
/* global Zotero, Services */

function install() {}

async function startup() {
  await Zotero.uiReadyPromise;
  Services.obs.notifyObservers(null, "browser-idle-startup-tasks-finished");
}

function shutdown() {}

function uninstall() {}
