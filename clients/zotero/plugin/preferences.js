// preferences.js: loaded by Zotero into the preferences window with bridge.js; frames the page's
// preferences view in the pane and removes it when the window closes.
//
// Zotero loads a plugin pane's scripts into a sandbox of their own (its prototype is the window), and
// inserts the pane's markup after them: an inline onload="..." in the markup runs in the window's
// scope, where nothing of this file is defined. So this file listens itself for the `load` event
// Zotero dispatches on the pane's root element once it is inserted (not bubbling: caught on the way
// down, in the capture phase, on the document: Gecko never passes an element's load event to the window).

/* exported ZocratesPrefsPane */
var ZocratesPrefsPane = {
  /** @type {any} */
  host: null,

  /** @param {Element} pane the pane's root element (its `load` event) */
  init(pane) {
    const container = pane.querySelector("#zocrates-prefs-host");
    if (!container || this.host) return;
    this.host = new ZocratesBridge.BridgeHost({ window, container, view: "prefs" });
    const host = this.host;
    host.start().then(() => this.showDoctor(pane, host)).catch((/** @type {any} */ err) => Zotero.logError(err));
    window.addEventListener("unload", () => this.destroy(), { once: true });
  },

  /** `zocratesd doctor`'s report, as the daemon runs it, above the page. */
  async showDoctor(/** @type {Element} */ pane, /** @type {any} */ host) {
    const box = pane.querySelector("#zocrates-doctor");
    if (!box) return;
    const report = await host.doctorReport();
    if (report && this.host === host) ZocratesBridge.renderDoctor(box, report);
  },

  destroy() {
    if (this.host) this.host.destroy();
    this.host = null;
  },
};

(() => {
  const onLoad = (/** @type {Event} */ event) => {
    const target = /** @type {Element | null} */ (event.target);
    if (!target || target.id !== "zocrates-prefpane") return;
    document.removeEventListener("load", onLoad, true);
    ZocratesPrefsPane.init(target);
  };
  document.addEventListener("load", onLoad, true);
})();
