// zocrates.js: the Zocrates chat pane in Zotero's main window (loaded by bootstrap.js).
//
// Where the pane lives: a splitter and a vertical box appended to the main window's `#browser` box,
// after `#appcontent` (which holds the tab deck: the library tab and every reader tab, with the
// item pane and the reader's context pane). So the chat sits at the window's right edge beside the
// item list and beside the PDF reader alike, stays put while tabs switch, and keeps its page (and
// the page its state) while the selection changes. A toolbar button and View > Zocrates Chat toggle it.
// Why not an item pane section (Zotero.ItemPaneManager.registerSection): a section exists only while
// exactly one item is selected and is rebuilt per item; with none or several selected (the useful
// context for a question) the item pane shows a message instead, and the chat would vanish.
// `#browser` and `#appcontent` are the same in Zotero 7, 8, 9 and 10; when they are missing the
// pane falls back to the end of the window, and the log says so.

/* exported ZocratesPlugin */
var ZocratesPlugin = {
  id: "",
  version: "",
  rootURI: "",
  /** Per main window: what we added, to take it all away again. @type {Map<_ZoteroTypes.MainWindow, any>} */
  windows: new Map(),
  /** Pane widths outside this are a stray drag; the page is laid out for a narrow sidebar. */
  MIN_WIDTH: 280,
  MAX_WIDTH: 1200,
  /** Zotero's layout minimums (Zotero 7-10: abstracts/_variables.scss, $min-width-items-pane and
   *  $min-width-tabs-deck; and its side-by-side minimum, windowAutoStackMinWidth in zoteroPane.js):
   *  Zotero sizes its window for them and knows nothing of the chat beside them. */
  ZOTERO_ITEMS_MIN_WIDTH: 370,
  ZOTERO_TABS_MIN_WIDTH: 570,
  ZOTERO_SIDE_BY_SIDE_MIN_WIDTH: 930,
  /** $min-width-collections-pane: a collections pane dragged wider takes that much more. */
  ZOTERO_COLLECTIONS_MIN_WIDTH: 200,
  SPLITTER_WIDTH: 5,

  /** @param {{id: string, version: string, rootURI: string}} data */
  init({ id, version, rootURI }) {
    this.id = id;
    this.version = version;
    this.rootURI = rootURI;
  },

  /** @param {string} message */
  log(message) {
    Zotero.debug(`Zocrates: ${message}`);
  },

  /** @param {string} name */
  pref(name) {
    return Zotero.Prefs.get(`extensions.zocrates.${name}`, true);
  },

  /** @param {string} name @param {string | number | boolean} value */
  setPref(name, value) {
    Zotero.Prefs.set(`extensions.zocrates.${name}`, value, true);
  },

  addToAllWindows() {
    for (const win of Zotero.getMainWindows()) {
      if (win.ZoteroPane) this.addToWindow(win);
    }
  },

  removeFromAllWindows() {
    for (const win of Array.from(this.windows.keys())) this.removeFromWindow(win);
  },

  /** @param {_ZoteroTypes.MainWindow} win */
  addToWindow(win) {
    if (this.windows.has(win)) return;
    const doc = win.document;
    const added = [];
    /** @type {{added: Element[], host: any, pane: any, splitter: any, button: any, menuitem: any, onResize: null | (() => void), onWindowResize: null | (() => void), rootMinWidth: string | null, observers: {disconnect(): void}[], collectionsCap: string | null}} */
    const state = { added, host: null, pane: null, splitter: null, button: null, menuitem: null, onResize: null, onWindowResize: null, rootMinWidth: null, observers: [], collectionsCap: null };
    this.windows.set(win, state);

    const link = (/** @type {string} */ rel, /** @type {string} */ href) => {
      const el = doc.createElementNS("http://www.w3.org/1999/xhtml", "link");
      el.setAttribute("rel", rel);
      el.setAttribute("href", href);
      doc.documentElement.append(el);
      added.push(el);
    };
    link("localization", "zocrates.ftl");
    link("stylesheet", `${this.rootURI}style.css`);

    const splitter = doc.createXULElement("splitter");
    splitter.id = "zocrates-splitter";
    splitter.setAttribute("orient", "horizontal");
    splitter.setAttribute("resizebefore", "closest");
    splitter.setAttribute("resizeafter", "closest");
    const pane = doc.createXULElement("vbox");
    pane.id = "zocrates-pane";
    const width = Math.min(this.MAX_WIDTH, Math.max(this.MIN_WIDTH, Number(this.pref("paneWidth")) || 380));
    pane.setAttribute("style", `width: ${width}px`);
    const container = doc.createElementNS("http://www.w3.org/1999/xhtml", "div");
    container.className = "zocrates-host";
    pane.append(container);
    const anchor = doc.getElementById("appcontent");
    if (anchor && anchor.parentNode) {
      anchor.after(splitter, pane);
    } else {
      this.log("#appcontent not found: the pane goes to the end of the window");
      doc.documentElement.append(splitter, pane);
    }
    added.push(splitter, pane);
    state.pane = pane;
    state.splitter = splitter;
    // Remember the width the user dragged to.
    state.onResize = () => {
      const w = Math.round(pane.getBoundingClientRect().width);
      if (w >= this.MIN_WIDTH && w <= this.MAX_WIDTH) this.setPref("paneWidth", w);
    };
    splitter.addEventListener("mouseup", state.onResize);
    // After Zotero's own resize handler (registered at its load), which may just have changed its layout.
    state.onWindowResize = () => this.fit(win);
    win.addEventListener("resize", state.onWindowResize);
    // Zotero's collections pane can be dragged wider: the chat then gives way (down to MIN_WIDTH),
    // and the pane's limit, which Zotero sets knowing nothing of the chat, is kept short of it.
    const collections = doc.getElementById("zotero-collections-pane");
    if (collections) {
      const resized = new win.ResizeObserver(() => this.fit(win));
      resized.observe(collections);
      const limited = new win.MutationObserver(() => this.capCollections(win));
      limited.observe(collections, { attributes: true, attributeFilter: ["style"] });
      state.observers.push(resized, limited);
    }

    const button = doc.createXULElement("toolbarbutton");
    button.id = "zocrates-tb-toggle";
    button.setAttribute("class", "zotero-tb-button");
    button.setAttribute("type", "checkbox");
    button.setAttribute("data-l10n-id", "zocrates-toggle-button");
    button.addEventListener("command", () => this.toggle(win));
    const sync = doc.getElementById("zotero-tb-sync");
    const toolbar = doc.getElementById("zotero-tabs-toolbar");
    if (sync && sync.parentNode) sync.before(button);
    else if (toolbar) toolbar.append(button);
    if (button.parentNode) added.push(button);
    state.button = button;

    const menuitem = doc.createXULElement("menuitem");
    menuitem.id = "zocrates-menuitem-toggle";
    menuitem.setAttribute("type", "checkbox");
    menuitem.setAttribute("data-l10n-id", "zocrates-toggle-menuitem");
    menuitem.addEventListener("command", () => this.toggle(win));
    const viewMenu = doc.getElementById("menu_viewPopup");
    if (viewMenu) {
      viewMenu.append(menuitem);
      added.push(menuitem);
    }
    state.menuitem = menuitem;

    this.show(win, !!this.pref("paneOpen"));
  },

  /** @param {_ZoteroTypes.MainWindow} win */
  removeFromWindow(win) {
    const state = this.windows.get(win);
    if (!state) return;
    this.windows.delete(win);
    if (state.host) state.host.destroy();
    if (state.onResize) state.splitter.removeEventListener("mouseup", state.onResize);
    if (state.onWindowResize) win.removeEventListener("resize", state.onWindowResize);
    for (const o of state.observers) o.disconnect();
    state.observers = [];
    for (const el of state.added) el.remove();
    this.giveBackLayout(win, state);
  },

  /**
   * Keep Zotero's own panes clear of the chat. Zotero gives its window a minimum width (#main-window's
   * CSS min-width: its fixed panes plus the item list), computed for the whole window; the chat takes
   * part of that width, so while the pane shows, the window's minimum grows by the narrowest chat
   * (Gecko then keeps the window at least that wide), and the pane takes its preferred width (the
   * user's drag) or what Zotero leaves, down to MIN_WIDTH.
   * @param {_ZoteroTypes.MainWindow} win
   */
  fit(win) {
    const state = this.windows.get(win);
    if (!state || state.pane.hidden) return;
    const root = win.document.documentElement;
    const zoteroMin = this.zoteroMinWidth(win);
    if (state.rootMinWidth === null) state.rootMinWidth = root.style.minWidth;
    // Zotero's own rule, plus the chat: live, as Zotero updates its variable when its layout changes.
    root.style.minWidth = `calc(max(var(--width-of-fixed-components, ${this.ZOTERO_SIDE_BY_SIDE_MIN_WIDTH - this.ZOTERO_ITEMS_MIN_WIDTH}px) + ${this.ZOTERO_ITEMS_MIN_WIDTH}px, ${this.ZOTERO_TABS_MIN_WIDTH}px) + ${this.SPLITTER_WIDTH + this.MIN_WIDTH}px)`;
    const preferred = Math.min(this.MAX_WIDTH, Math.max(this.MIN_WIDTH, Number(this.pref("paneWidth")) || 380));
    const room = win.innerWidth - this.SPLITTER_WIDTH - zoteroMin - this.collectionsExtra(win);
    state.pane.style.width = `${Math.min(preferred, Math.max(this.MIN_WIDTH, room))}px`;
    this.capCollections(win);
  },

  /** How much wider than its minimum the user dragged Zotero's collections pane (0 when it is
   *  collapsed or not shown, as in a reader tab).
   *  @param {_ZoteroTypes.MainWindow} win */
  collectionsExtra(win) {
    const collections = win.document.getElementById("zotero-collections-pane");
    if (!collections || collections.hasAttribute("collapsed")) return 0;
    return Math.max(0, collections.getBoundingClientRect().width - this.ZOTERO_COLLECTIONS_MIN_WIDTH);
  },

  /**
   * Zotero limits its collections pane (--max-width-collections-pane, zoteroPane.js
   * updateLayoutConstraints, at every resize and splitter move) to the window less its other panes'
   * minimums; while the chat shows, the limit is that less the narrowest chat, so a drag cannot
   * push Zotero's panes under the chat. Zotero's next update writes its own value, and this runs again.
   * @param {_ZoteroTypes.MainWindow} win
   */
  capCollections(win) {
    const state = this.windows.get(win);
    const collections = win.document.getElementById("zotero-collections-pane");
    if (!state || !collections || state.pane.hidden) return;
    const current = collections.style.getPropertyValue("--max-width-collections-pane").trim();
    if (!current || current === state.collectionsCap) return; // not set yet, or our own value
    const zoteros = parseFloat(current);
    if (!Number.isFinite(zoteros)) return;
    state.collectionsCap = `${Math.max(this.ZOTERO_COLLECTIONS_MIN_WIDTH, zoteros - this.SPLITTER_WIDTH - this.MIN_WIDTH)}px`;
    collections.style.setProperty("--max-width-collections-pane", state.collectionsCap);
  },

  /**
   * The width Zotero's own layout needs, as Zotero computes its window's minimum (zoteroPane.js,
   * updateLayoutConstraints, and _mainWindow.scss): the fixed panes (collections, item pane, side
   * navigation: Zotero's --width-of-fixed-components, 0 in the stacked layout) plus the item list's
   * minimum, and never less than the tab deck's minimum (the reader's).
   * @param {_ZoteroTypes.MainWindow} win
   */
  zoteroMinWidth(win) {
    const fixed = parseFloat(win.document.documentElement.style.getPropertyValue("--width-of-fixed-components"));
    return Math.max(Number.isFinite(fixed) ? fixed + this.ZOTERO_ITEMS_MIN_WIDTH : this.ZOTERO_SIDE_BY_SIDE_MIN_WIDTH, this.ZOTERO_TABS_MIN_WIDTH);
  },

  /** The pane no longer takes room: the window's minimum is Zotero's own again. */
  giveBackLayout(win, state) {
    if (state.collectionsCap !== null) {
      state.collectionsCap = null;
      // Zotero writes its own limit again.
      try {
        win.ZoteroPane?.updateLayoutConstraints?.();
      } catch (err) {
        this.log(`updateLayoutConstraints: ${err}`);
      }
    }
    if (state.rootMinWidth === null) return;
    win.document.documentElement.style.minWidth = state.rootMinWidth;
    state.rootMinWidth = null;
  },

  /** @param {_ZoteroTypes.MainWindow} win */
  toggle(win) {
    const state = this.windows.get(win);
    if (!state) return;
    const open = state.pane.hidden;
    this.setPref("paneOpen", open);
    this.show(win, open);
  },

  /** @param {_ZoteroTypes.MainWindow} win @param {boolean} open */
  show(win, open) {
    const state = this.windows.get(win);
    if (!state) return;
    state.pane.hidden = !open;
    state.splitter.hidden = !open;
    if (open) this.fit(win);
    else this.giveBackLayout(win, state);
    if (state.button) state.button.checked = open;
    if (state.menuitem) state.menuitem.setAttribute("checked", String(open));
    if (open && !state.host) {
      // The page is loaded the first time the pane opens, and kept while it is hidden.
      const host = new ZocratesBridge.BridgeHost({ window: win, container: state.pane.firstChild, view: "chat" });
      state.host = host;
      // The item and collection trees exist once Zotero's UI is ready.
      Zotero.uiReadyPromise.then(() => {
        if (state.host === host) return host.start();
        return undefined;
      }).catch((/** @type {any} */ err) => Zotero.logError(err));
    }
  },
};
