// toolgate web UI: the one script. It refreshes the list of pending
// intents while the page is open; everything else, approving included,
// works without it. It builds the rows with textContent, never HTML.
"use strict";
(function () {
  var table = document.getElementById("intents");
  if (!table || !table.dataset.live) {
    return;
  }
  var url = table.dataset.live;
  var body = table.tBodies[0];
  var empty = document.getElementById("empty");
  var status = document.getElementById("live-status");

  function cell(tr, child) {
    var td = document.createElement("td");
    td.appendChild(child);
    tr.appendChild(td);
  }
  function text(tag, s, cls) {
    var e = document.createElement(tag);
    e.textContent = s;
    if (cls) {
      e.className = cls;
    }
    return e;
  }
  function row(it) {
    var tr = document.createElement("tr");
    tr.dataset.id = it.ID;
    var t = text("time", it.Age);
    t.setAttribute("datetime", it.ProposedAt);
    cell(tr, t);
    var a = text("a", it.Tool + "@" + it.Version);
    a.href = it.Link;
    cell(tr, a);
    cell(tr, document.createTextNode(it.Proposer));
    cell(tr, text("span", it.Status, "status " + it.Status));
    cell(tr, text("code", it.Preview, "preview"));
    return tr;
  }
  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) {
          throw new Error("HTTP " + r.status);
        }
        return r.json();
      })
      .then(function (data) {
        var rows = data.intents || [];
        var fresh = document.createDocumentFragment();
        rows.forEach(function (it) {
          fresh.appendChild(row(it));
        });
        body.replaceChildren(fresh);
        empty.hidden = rows.length > 0;
        var n = rows.length ? "(" + rows.length + (data.more ? "+" : "") + ") " : "";
        document.title = n + "Pending intents · toolgate";
        status.textContent = "Refreshed at " + new Date().toLocaleTimeString() + ".";
      })
      .catch(function (e) {
        status.textContent = "Could not refresh (" + e.message + "); retrying.";
      });
  }
  setInterval(refresh, 2000);
})();
