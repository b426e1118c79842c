// preferences.js: loaded by Zotero into the preferences window with bridge.js; frames the page's
// preferences view in the pane and removes it when the window closes.

/* exported ZocratesPrefsPane */
var ZocratesPrefsPane = {
  /** @type {any} */
  host: null,

  /** @param {Element} pane the pane's root element (its `load` event) */
  init(pane) {
    const container = pane.querySelector("#zocrates-prefs-host");
    if (!container || this.host) return;
    this.host = new ZocratesBridge.BridgeHost({ window, container, view: "prefs" });
    this.host.start().catch((/** @type {any} */ err) => Zotero.logError(err));
    window.addEventListener("unload", () => this.destroy(), { once: true });
  },

  destroy() {
    if (this.host) this.host.destroy();
    this.host = null;
  },
};
