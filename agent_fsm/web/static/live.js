// Follow the run (or the inbox) live: poll the page's JSON stamp and reload when the store says it changed.
(function () {
  "use strict";
  var root = document.querySelector("[data-live]");
  if (!root) { return; }
  var url = root.getAttribute("data-live");
  var seen = root.getAttribute("data-stamp");
  var every = Number(root.getAttribute("data-every")) || 1500;
  var again = root.getAttribute("data-reload") || window.location.pathname;  // the inbox keeps its filters and page
  var note = document.getElementById("live");
  var busy = false;
  var leaving = false;  // a form was sent: its answer is the next page, not a reload
  document.addEventListener("submit", function () { leaving = true; });
  function poll() {
    if (busy || leaving) { return; }
    busy = true;
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (data) {
        if (data && !leaving && String(data.stamp) !== seen) {
          if (note) { note.textContent = "the run moved on: reloading"; note.className = "live moved"; }
          window.location.replace(again);
        }
      })
      .catch(function () { /* the server is away for a moment: try again at the next tick */ })
      .then(function () { busy = false; });
  }
  window.setInterval(poll, every);
}());
