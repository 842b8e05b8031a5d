// sandpit dashboard: refreshes sections marked data-refresh (the live
// view) every two seconds. The pages read without it.
"use strict";
(function () {
  function refresh(el) {
    if (document.hidden) return;
    fetch(el.dataset.refresh, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) {
        if (r.status === 401 || r.redirected) { window.location.reload(); return null; }
        if (!r.ok) return null;
        return r.text();
      })
      .then(function (html) {
        // The server renders this fragment with every value escaped.
        if (html !== null && html !== undefined) el.innerHTML = html;
      })
      .catch(function () { /* the next tick tries again */ });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      window.setInterval(function () { refresh(el); }, 2000);
    });
  });
})();
