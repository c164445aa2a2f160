// fastmcp-tasks dashboard: follows the server's event stream and patches the page in place.
// No framework, no build step. The server coalesces changes (at most one message per
// ~250 ms per page), so each message is applied at once. Rows keep a fixed height and
// numeric cells use tabular figures (dashboard.css): updates never shift the layout.
// A task's page that sees its status change reads its own HTML again (the result, the
// error, the final duration and lease: one rendering, the server's); the task list's
// filters apply as they change, the list read again in place and the URL replaced.
(function () {
  "use strict";
  var state = {
    updates: 0, lastEventAt: 0, detailReads: 0, filterReads: 0, filterQuery: null, source: null,
  };
  window.__dashboard = state;

  var FIELDS = ["id", "tool", "status", "message", "owner", "created", "duration"];
  var LABELS = { error: "tool error" }; // html.LABELS
  var TERMINAL = ["completed", "failed", "cancelled"];

  function span(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    seconds = Math.max(0, seconds);
    if (seconds < 1) return Math.floor(seconds * 1000) + "ms";
    if (seconds < 10) return seconds.toFixed(1) + "s";
    if (seconds < 60) return Math.floor(seconds) + "s";
    var whole = Math.floor(seconds);
    var units = [[86400, "d", 3600, "h"], [3600, "h", 60, "m"], [60, "m", 1, "s"]];
    for (var i = 0; i < units.length; i++) {
      var u = units[i];
      if (whole >= u[0]) {
        return Math.floor(whole / u[0]) + u[1] + " " + Math.floor((whole % u[0]) / u[2]) + u[3];
      }
    }
    return whole + "s";
  }

  function stamp(epoch) {
    var iso = new Date(epoch * 1000).toISOString(); // 2026-12-01T19:50:03.123Z
    return iso.slice(0, 10) + " " + iso.slice(11, 19) + "Z";
  }

  function setText(el, text) {
    if (el && el.textContent !== text) el.textContent = text;
  }

  function label(status) {
    return LABELS[status] || status;
  }

  function outcome(task) {
    return task.outcome || task.status; // `error`: completed with a tool error
  }

  function badge(status) {
    var b = document.createElement("span");
    b.className = "badge status-" + status;
    b.textContent = label(status);
    return b;
  }

  function setStatus(cell, status) {
    var current = cell.querySelector(".badge");
    if (current && current.classList.contains("status-" + status)) return;
    cell.textContent = "";
    cell.appendChild(badge(status));
  }

  function buildRow(task) {
    var tr = document.createElement("tr");
    FIELDS.forEach(function (name) {
      var td = document.createElement("td");
      td.setAttribute("data-field", name);
      tr.appendChild(td);
    });
    var a = document.createElement("a");
    a.setAttribute("href", "tasks/" + encodeURIComponent(task.id));
    a.textContent = task.id;
    tr.querySelector('[data-field="id"]').appendChild(a);
    var time = document.createElement("time");
    time.textContent = stamp(task.created_at);
    time.title = time.textContent;
    tr.querySelector('[data-field="created"]').appendChild(time);
    tr.setAttribute("data-task-id", task.id);
    tr.setAttribute("data-created", String(task.created_at));
    patchRow(tr, task);
    return tr;
  }

  function patchRow(tr, task) {
    tr.setAttribute("data-status", task.status);
    tr.setAttribute("data-outcome", outcome(task));
    tr.setAttribute("data-state", task.state);
    var cell = function (name) { return tr.querySelector('[data-field="' + name + '"]'); };
    setText(cell("tool"), task.tool || "");
    cell("tool").title = task.tool || "";
    setStatus(cell("status"), outcome(task));
    setText(cell("message"), task.message || "");
    cell("message").title = task.message || "";
    setText(cell("owner"), task.owner || "");
    setText(cell("duration"), span(task.duration));
  }

  function applyTasks(tasks) {
    var body = document.getElementById("task-rows");
    if (body) {
      var table = document.getElementById("task-table");
      var first = table && table.getAttribute("data-first-page") === "true";
      var limit = table ? parseInt(table.getAttribute("data-limit") || "50", 10) : 50;
      var fresh = [];
      tasks.forEach(function (task) {
        var tr = body.querySelector('tr[data-task-id="' + CSS.escape(task.id) + '"]');
        if (tr) patchRow(tr, task);
        else if (first && task.matches) fresh.push(task);
      });
      // newest first by (created_at, id), as the server lists: a late row goes to its place
      fresh.forEach(function (task) {
        var row = buildRow(task);
        var rows = body.rows;
        var at = null;
        for (var i = 0; i < rows.length; i++) {
          var created = parseFloat(rows[i].getAttribute("data-created") || "0");
          var id = rows[i].getAttribute("data-task-id") || "";
          if (created < task.created_at || (created === task.created_at && id < task.id)) {
            at = rows[i];
            break;
          }
        }
        if (at === null && rows.length >= limit) return; // older than the whole page
        body.insertBefore(row, at);
      });
      if (fresh.length) {
        var empty = document.getElementById("no-tasks");
        if (empty) empty.remove();
        while (body.rows.length > limit) body.deleteRow(body.rows.length - 1);
      }
    }
    var detail = document.getElementById("task-detail");
    if (detail) {
      var id = detail.getAttribute("data-task-id");
      tasks.forEach(function (task) { if (task.id === id) applyDetail(detail, task); });
    }
  }

  function applyDetail(detail, task) {
    var oldStatus = detail.getAttribute("data-status");
    var oldOutcome = detail.getAttribute("data-outcome") || oldStatus;
    var message = document.getElementById("detail-message");
    var oldMessage = message ? message.textContent : "";
    var newMessage = task.message || "-";
    if (oldOutcome === outcome(task) && oldMessage === newMessage) return;
    detail.setAttribute("data-status", task.status);
    detail.setAttribute("data-outcome", outcome(task));
    var status = document.getElementById("detail-status");
    if (status) setStatus(status, outcome(task));
    setText(message, newMessage);
    var list = document.getElementById("detail-transitions");
    if (list) {
      var li = document.createElement("li");
      var when = document.createElement("time");
      when.textContent = stamp(task.updated_at);
      li.appendChild(when);
      li.appendChild(document.createTextNode(" " + label(outcome(task)) + (task.message ? ": " + task.message : "")));
      li.setAttribute("data-status", task.status);
      li.setAttribute("data-outcome", outcome(task));
      list.appendChild(li);
    }
    if (oldStatus !== task.status) {
      if (TERMINAL.indexOf(task.status) >= 0) {
        var form = document.getElementById("cancel-form");
        if (form) form.remove();
      }
      rereadDetail(detail, task.id); // the result, the error, inputs, duration, lease
    }
  }

  // Read the task's page again and put its parts in place, keeping what this page saw
  // happen (`#detail-transitions`); the latest read wins. Offers a reload if it fails.
  function rereadDetail(detail, id) {
    var read = ++state.detailReads;
    fetch("tasks/" + encodeURIComponent(id), { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (text) {
        if (read !== state.detailReads) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("task-detail");
        if (!fresh || fresh.getAttribute("data-task-id") !== id) throw new Error("no task detail");
        var seen = document.getElementById("detail-transitions");
        var mine = seen ? seen.closest("section") : null;
        var theirs = fresh.querySelector("#detail-transitions");
        if (mine && theirs) theirs.closest("section").replaceWith(mine);
        detail.replaceChildren.apply(detail, Array.prototype.slice.call(fresh.childNodes));
        ["data-status", "data-outcome"].forEach(function (name) {
          detail.setAttribute(name, fresh.getAttribute(name) || "");
        });
        detail.setAttribute("data-read", String(read));
      })
      .catch(function () {
        if (read !== state.detailReads || document.getElementById("detail-reload")) return;
        var note = document.createElement("p");
        note.id = "detail-reload";
        note.className = "notice";
        var a = document.createElement("a");
        a.href = "tasks/" + encodeURIComponent(id);
        a.textContent = "Reload this task's page";
        note.appendChild(document.createTextNode("The task changed. "));
        note.appendChild(a);
        detail.insertBefore(note, detail.firstChild);
      });
  }

  function applyGone(ids) {
    ids.forEach(function (id) {
      var tr = document.querySelector('#task-rows tr[data-task-id="' + CSS.escape(id) + '"]');
      if (tr) tr.classList.add("gone");
    });
  }

  function applyCounts(counts) {
    Object.keys(counts).forEach(function (name) {
      document.querySelectorAll('[data-count="' + name + '"]').forEach(function (el) {
        if (el.id === "purge-count") return;
        setText(el, String(counts[name]));
      });
    });
  }

  function setLive(value) {
    var el = document.getElementById("live-status");
    if (!el) return;
    el.setAttribute("data-state", value);
    setText(el, value);
  }

  function tickAges() {
    var ticking = '[data-field="waited"][data-since], [data-field="elapsed"][data-since]';
    document.querySelectorAll(ticking).forEach(function (el) {
      var since = parseFloat(el.getAttribute("data-since"));
      if (!isNaN(since)) setText(el, span(Date.now() / 1000 - since));
    });
  }

  function connect() {
    if (state.source) state.source.close();
    state.source = null;
    var url = document.body.getAttribute("data-events");
    if (!url || !window.EventSource) {
      setLive(url ? "offline" : "live");
      return;
    }
    var source = state.source = new EventSource(url);
    function handler(apply) {
      return function (event) {
        var data;
        try { data = JSON.parse(event.data); } catch (e) { return; }
        apply(data);
        // for static/ops.js (the history, paused rows): what the stream said, as it said it
        document.dispatchEvent(new CustomEvent("dashboard:" + event.type, { detail: data }));
        state.updates += 1;
        state.lastEventAt = Date.now();
      };
    }
    source.addEventListener("tasks", handler(applyTasks));
    source.addEventListener("gone", handler(applyGone));
    source.addEventListener("counts", handler(applyCounts));
    source.addEventListener("status", handler(function (d) { setLive(d.state); }));
    source.addEventListener("resync", function () { window.location.reload(); });
    source.onopen = function () { if (document.getElementById("live-status").getAttribute("data-state") === "offline") setLive("connecting"); };
    source.onerror = function () { setLive("offline"); };
  }

  // --- the task list's filters: applied as they change ---------------------------------

  function filterQuery(form) {
    var query = new URLSearchParams();
    new FormData(form).forEach(function (value, name) {
      if (typeof value === "string" && value.trim()) query.append(name, value.trim());
    });
    return query.toString();
  }

  // Read the list of these filters, put its results in place of ours, follow its events
  // and replace the URL (shareable, reloadable); the latest read wins. On a failure the
  // form is submitted: the browser shows the list, or the error, itself.
  function applyFilters(form) {
    var query = filterQuery(form);
    if (query === state.filterQuery || !document.getElementById("task-results")) return;
    state.filterQuery = query; // the list asked for last (shown, or on its way)
    var read = ++state.filterReads;
    var url = new URL("tasks" + (query ? "?" + query : ""), document.baseURI).href;
    form.setAttribute("aria-busy", "true");
    fetch(url, { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (text) {
        if (read !== state.filterReads) return;
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.getElementById("task-results");
        if (!fresh) throw new Error("no task list");
        document.getElementById("task-results").replaceWith(document.adoptNode(fresh));
        document.body.setAttribute("data-events", doc.body.getAttribute("data-events") || "");
        window.history.replaceState(null, "", url);
        form.removeAttribute("aria-busy");
        connect();
      })
      .catch(function () {
        if (read === state.filterReads) form.submit();
      });
  }

  function liveFilters() {
    var form = document.getElementById("filters");
    if (!form || !window.fetch || !window.DOMParser) return;
    form.classList.add("live");
    var shown = document.getElementById("task-results");
    state.filterQuery = shown ? shown.getAttribute("data-query") : null;
    var timer = null;
    var soon = function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(function () { applyFilters(form); }, 350);
    };
    form.addEventListener("change", function (event) {
      if (event.target.tagName === "SELECT") { window.clearTimeout(timer); applyFilters(form); } else soon();
    });
    form.addEventListener("input", function (event) {
      if (event.target.tagName === "INPUT") soon();
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      window.clearTimeout(timer);
      applyFilters(form);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    liveFilters();
    connect();
    window.setInterval(tickAges, 1000);
  });
})();
