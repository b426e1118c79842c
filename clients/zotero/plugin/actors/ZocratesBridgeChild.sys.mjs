// The content-process half of the bridge (a JSWindowActor, registered by bridge.js for the plugin's
// own <browser messagemanagergroup="zocrates"> only). In Zotero 7+ the page runs in a content
// process: the chrome host cannot listen on its window or post to it, so this actor does it there.
// It relays the page's bridge messages (posted to its own window) to the parent, and the parent's
// answers back into the page with postMessage. It forwards data only, and decides nothing.

const TAG = "bridge/1";

export class ZocratesBridgeChild extends JSWindowActorChild {
  /** The page's `message` events (the actor is registered for them, in the capture phase). */
  handleEvent(event) {
    if (event.type !== "message") return;
    const win = this.contentWindow;
    // Only what the page posted to itself from its own origin (not a frame inside it, not another site).
    if (!win || event.source !== win || event.origin !== win.origin) return;
    let data;
    try {
      data = JSON.parse(JSON.stringify(event.data));
    } catch {
      return;
    }
    if (!data || typeof data !== "object" || data.zocrates !== TAG || data.dir !== "page-host") return;
    this.sendAsyncMessage("ZocratesBridge:fromPage", data);
  }

  /** `{message, origin}` from the host: post it to the page, for its origin only. */
  receiveMessage({ name, data }) {
    if (name !== "ZocratesBridge:toPage") return;
    const win = this.contentWindow;
    if (!win || win.origin !== data.origin) return;
    win.postMessage(Cu.cloneInto(data.message, win), data.origin);
  }
}
