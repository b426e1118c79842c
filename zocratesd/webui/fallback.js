// fallback.js: never a blank pane. A classic script, so it runs even when the app's modules do
// not load (a file missing from the package, a syntax error a browser rejects): when the app has
// not said it started within a few seconds, the loading line says what went wrong.
"use strict";
(function () {
  var failed = null;
  window.addEventListener("error", function (event) {
    if (document.documentElement.dataset.ready) return;
    var target = event.target;
    if (target && target.tagName === "SCRIPT") failed = "could not load " + (target.getAttribute("src") || "a script");
    else if (event.message) failed = event.message;
  }, true);
  setTimeout(function () {
    if (document.documentElement.dataset.ready) return;
    var line = document.getElementById("loading");
    if (!line) return;
    line.className = "loading failed";
    line.textContent = "The Zocrates sidebar did not start" + (failed ? " (" + failed + ")" : "") +
      ". Reload the page; if it stays like this, your zocratesd and this page may not match: restart the daemon.";
  }, 5000);
})();
