// fastmcp-tasks dashboard, operator parts: a task's stored history, the workers page and
// the warnings kept current, paused rows marked, bulk actions on the filters shown.
// No framework, no inline script (the CSP forbids it). dashboard.js re-dispatches each
// message of the page's event stream as a `dashboard:<event>` DOM event; this file
// listens to those and never opens a stream of its own.
(function () {
  "use strict";
  var ops = { historyReads: 0, workerReads: 0, alertReads: 0 };
  window.__ops = ops;
  var WORKERS_EVERY = 3000; // ms: a new worker shows within a few seconds, a gone one too
  var ALERTS_EVERY = 5000;

  function stamp(epoch) {
    var iso = new Date(epoch * 1000).toISOString();
    return iso.slice(0, 10) + " " + iso.slice(11, 19) + "Z";
  }

  function getText(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); });
  }

  function getJson(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); });
  }

  // --- the task's history: read again when the task changes --------------------------------

  function eventItem(event) {
    var li = document.createElement("li");
    li.setAttribute("data-kind", event.kind);
    var time = document.createElement("time");
    time.textContent = stamp(event.at);
    time.title = time.textContent;
    var label = document.createElement("span");
    label.className = "event-label";
    label.textContent = event.label;
    li.appendChild(time);
    li.appendChild(document.createTextNode(" "));
    li.appendChild(label);
    if (event.text) {
      var text = document.createElement("span");
      text.className = "event-text";
      text.textContent = event.text;
      li.appendChild(document.createTextNode(" "));
      li.appendChild(text);
    }
    return li;
  }

  function readHistory() {
    var section = document.getElementById("history");
    var id = section && section.getAttribute("data-task-id");
    if (!id) return;
    var read = ++ops.historyReads;
    getJson("api/tasks/" + encodeURIComponent(id) + "/history").then(function (data) {
      if (read !== ops.historyReads) return; // a later read is on its way
      var list = document.getElementById("history-events");
      if (!list) return;
      list.replaceChildren.apply(list, data.events.map(eventItem));
      var empty = document.getElementById("history-empty");
      if (empty) empty.hidden = data.events.length > 0;
      list.setAttribute("data-read", String(read));
    }).catch(function () { /* the next change reads it again */ });
  }

  var historyTimer = null;
  function historySoon() {
    window.clearTimeout(historyTimer);
    historyTimer = window.setTimeout(readHistory, 200);
  }

  // --- rows of tasks held by a pause ----------------------------------------------------------

  function markPaused(tasks) {
    tasks.forEach(function (task) {
      var tr = document.querySelector('#task-rows tr[data-task-id="' + CSS.escape(task.id) + '"]');
      if (!tr) return;
      if (task.paused) tr.setAttribute("data-paused", "true");
      else tr.removeAttribute("data-paused");
    });
  }

  document.addEventListener("dashboard:tasks", function (event) {
    var tasks = event.detail || [];
    markPaused(tasks);
    var section = document.getElementById("history");
    var id = section && section.getAttribute("data-task-id");
    if (id && tasks.some(function (t) { return t.id === id; })) historySoon();
  });

  // --- the workers page: read again every few seconds ----------------------------------------

  function readWorkers() {
    if (document.hidden || !document.getElementById("workers-live")) return;
    var read = ++ops.workerReads;
    getText("workers").then(function (text) {
      if (read !== ops.workerReads) return;
      var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("workers-live");
      var mine = document.getElementById("workers-live");
      if (!fresh || !mine) return;
      mine.replaceWith(document.adoptNode(fresh));
      fresh.setAttribute("data-read", String(read));
    }).catch(function () { /* tried again soon */ });
  }

  // --- the warnings of the overview and the queues page ------------------------------------

  function alertItem(alert) {
    var li = document.createElement("li");
    li.className = "alert alert-" + alert.kind;
    li.setAttribute("data-kind", alert.kind);
    li.setAttribute("data-app", alert.app);
    li.setAttribute("data-tool", alert.tool);
    li.setAttribute("data-count", String(alert.count));
    li.appendChild(document.createTextNode(alert.text + " "));
    var a = document.createElement("a");
    a.href = "queues";
    a.textContent = "Queues";
    li.appendChild(a);
    return li;
  }

  function readAlerts() {
    var box = document.getElementById("queue-alerts");
    if (document.hidden || !box || document.getElementById("workers-live")) return;
    var read = ++ops.alertReads;
    getJson("api/queues").then(function (data) {
      if (read !== ops.alertReads || !data.available) return;
      var list = document.getElementById("queue-warnings");
      if (!list) return;
      list.replaceChildren.apply(list, data.warnings.map(alertItem));
      box.hidden = data.warnings.length === 0;
      box.setAttribute("data-read", String(read));
    }).catch(function () { /* tried again soon */ });
  }

  // --- bulk actions act on the filters of the list shown ------------------------------------

  function bulkFilters(form) {
    var results = document.getElementById("task-results"); // the list as last read in place
    var query = results && results.getAttribute("data-query");
    if (query === null || query === undefined) return;
    var shown = new URLSearchParams(query);
    ["status", "tool", "owner", "q"].forEach(function (name) {
      var input = form.querySelector('input[type="hidden"][name="' + name + '"]');
      if (input) input.value = shown.get(name) || "";
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var bulk = document.getElementById("bulk-form");
    if (bulk) bulk.addEventListener("submit", function () { bulkFilters(bulk); });
    if (document.getElementById("workers-live")) window.setInterval(readWorkers, WORKERS_EVERY);
    if (document.getElementById("queue-alerts")) window.setInterval(readAlerts, ALERTS_EVERY);
  });
})();
