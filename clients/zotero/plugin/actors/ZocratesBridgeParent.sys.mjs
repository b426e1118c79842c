// The parent-process half of the bridge (see ZocratesBridgeChild.sys.mjs): hands a page's message
// to the host that owns the <browser>, as a `ZocratesBridge:message` event on that element, with
// the origin the parent process itself knows the document has (not one the content process claims).

export class ZocratesBridgeParent extends JSWindowActorParent {
  receiveMessage({ name, data }) {
    if (name !== "ZocratesBridge:fromPage") return;
    const browser = this.browsingContext?.top?.embedderElement;
    const principal = this.manager?.documentPrincipal;
    const win = browser?.ownerGlobal;
    if (!browser || !principal || !win) return;
    const detail = { origin: principal.originNoSuffix, data };
    browser.dispatchEvent(new win.CustomEvent("ZocratesBridge:message", { detail }));
  }
}
