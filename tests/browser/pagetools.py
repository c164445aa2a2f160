"""What the browser tests measure inside the page, and the checks they share.

- `PROBES` (an init script): records, by `Date.now()` (the clock Python's `time.time()`
  reads), when each task row first appears in `#task-rows` and when each (row,
  message) pair is first shown, so a latency runs from a store write (timed in the
  writing process) to the DOM change; and, by `performance.now()`, the first frame in
  which a `#task-rows tr` is visible (navigation start is 0), the largest gap between
  animation frames, long tasks, event-timing entries, keydown-to-next-frame delays
  and layout shifts. `window.__probe.reset()` starts a new measuring interval.
- `overflow(page)`: how far the body is wider than the viewport (0: no horizontal scroll).
- `unnamed_controls(page)`: links, buttons and form fields whose accessible name
  (Chromium's, over CDP) is empty, says nothing out of context ("Preview", "Apply",
  `VAGUE`), or that `get_by_role(role, name=...)` cannot find;
- `applied(page, fields)`: waits until the task list and its URL show these filters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.async_api import Page

PROBES = r"""
(() => {
  const p = window.__probe = {
    rowsAt: {}, shownAt: {}, firstRowAt: null, frames: 0, maxGap: 0, gaps: [],
    long: [], events: [], inputs: [], shifts: 0,
  };
  p.reset = () => {
    p.maxGap = 0; p.gaps = []; p.long = []; p.events = []; p.inputs = []; p.shifts = 0;
    p.frames = 0; p.lastFrame = undefined;
  };
  const frame = (t) => {
    if (p.lastFrame !== undefined) {
      const gap = t - p.lastFrame;
      p.maxGap = Math.max(p.maxGap, gap);
      if (gap > 50) p.gaps.push(Math.round(gap));
    }
    p.lastFrame = t; p.frames += 1;
    if (p.firstRowAt === null) {
      const row = document.querySelector('#task-rows tr');
      if (row && row.getBoundingClientRect().height > 0) p.firstRowAt = performance.now();
    }
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
  const observe = (type, fn, extra) => {
    try {
      new PerformanceObserver((list) => list.getEntries().forEach(fn))
        .observe(Object.assign({type, buffered: true}, extra || {}));
    } catch (e) { p[type + 'Unsupported'] = String(e); }
  };
  observe('longtask', (e) => p.long.push(e.duration));
  observe('event', (e) => p.events.push(
    {name: e.name, duration: e.duration, delay: e.processingStart - e.startTime}),
    {durationThreshold: 16});
  observe('layout-shift', (e) => { if (!e.hadRecentInput) p.shifts += e.value; });
  document.addEventListener('keydown', (e) => {
    const t0 = e.timeStamp;
    requestAnimationFrame(() => p.inputs.push(performance.now() - t0));
  }, true);
  const scan = () => {
    const now = Date.now();
    document.querySelectorAll('#task-rows tr[data-task-id]').forEach((row) => {
      const id = row.dataset.taskId;
      if (!(id in p.rowsAt)) p.rowsAt[id] = now;
      const cell = row.querySelector('[data-field=message]');
      const key = id + '\u0000' + (cell ? cell.textContent.trim() : '');
      if (!(key in p.shownAt)) p.shownAt[key] = now;
    });
    const msg = document.querySelector('#detail-message');
    const detail = document.querySelector('#task-detail');
    if (msg && detail) {
      const key = detail.dataset.taskId + '\u0000' + msg.textContent.trim();
      if (!(key in p.shownAt)) p.shownAt[key] = now;
    }
  };
  const start = () => {
    scan();
    new MutationObserver(scan).observe(document.body,
      {subtree: true, childList: true, characterData: true, attributes: true});
  };
  if (document.body) start(); else document.addEventListener('DOMContentLoaded', start);
})();
"""


async def shown_at(page: Page, task_id: str, message: str, timeout_ms: int = 5_000) -> float:
    """When (epoch seconds, the page's clock) `message` was first shown for `task_id`."""
    key = f"{task_id}\u0000{message}"
    await page.wait_for_function(
        "key => key in window.__probe.shownAt", arg=key, timeout=timeout_ms
    )
    return float(await page.evaluate("key => window.__probe.shownAt[key]", key)) / 1000


async def row_at(page: Page, task_id: str, timeout_ms: int = 5_000) -> float:
    """When (epoch seconds) the row of `task_id` first appeared in `#task-rows`."""
    await page.wait_for_function(
        "id => id in window.__probe.rowsAt", arg=task_id, timeout=timeout_ms
    )
    return float(await page.evaluate("id => window.__probe.rowsAt[id]", task_id)) / 1000


async def row_ids(page: Page) -> list[str]:
    ids: list[str] = await page.eval_on_selector_all(
        "#task-rows tr[data-task-id]", "rows => rows.map(r => r.dataset.taskId)"
    )
    return ids


async def overflow(page: Page) -> dict[str, object]:
    """Body and document widths beyond the viewport, in CSS pixels (0, 0: none), and
    (when either is not 0) the outermost elements that stick out on the right."""
    widths: dict[str, object] = await page.evaluate(
        r"""() => {
            const view = document.documentElement.clientWidth;
            const out = {
                body: document.body.scrollWidth - view,
                document: document.documentElement.scrollWidth - view,
            };
            if (out.body > 0 || out.document > 0) {
                const wide = [...document.body.querySelectorAll('*')].filter(
                    (el) => el.getBoundingClientRect().right > view + 0.5);
                out.culprits = wide.filter((el) => !wide.includes(el.parentElement))
                    .slice(0, 5).map((el) => el.tagName.toLowerCase()
                        + (el.id ? '#' + el.id : '')
                        + (el.className && typeof el.className === 'string'
                           ? '.' + el.className.trim().split(/\s+/).join('.') : '')
                        + ' right=' + Math.round(el.getBoundingClientRect().right));
            }
            return out;
        }"""
    )
    return widths


CONTROLS = "a[href], button, input:not([type=hidden]), select, textarea, summary"
#: Names that do not say what a control does, read alone (a screen reader's list of them).
VAGUE = {"apply", "click here", "details", "go", "here", "more", "ok", "preview", "submit"}
ROLE_BY_TAG = {"a": "link", "button": "button", "select": "combobox", "summary": "group"}
ARIA_ROLES = {
    "button",
    "link",
    "searchbox",
    "combobox",
    "textbox",
    "checkbox",
    "radio",
    "listbox",
    "spinbutton",
    "switch",
    "tab",
    "menuitem",
    "option",
    "slider",
}


async def unnamed_controls(page: Page) -> list[str]:
    """Every visible control of the page without an accessible name findable by role."""
    count: int = await page.evaluate(
        """(sel) => {
            const els = [...document.querySelectorAll(sel)]
              .filter((el) => el.getClientRects().length > 0 || el.closest('details'));
            els.forEach((el, i) => el.setAttribute('data-a11y-probe', String(i)));
            return els.length;
        }""",
        CONTROLS,
    )
    cdp = await page.context.new_cdp_session(page)
    problems: list[str] = []
    try:
        root = (await cdp.send("DOM.getDocument", {"depth": 0}))["root"]["nodeId"]
        for i in range(count):
            found = await cdp.send(
                "DOM.querySelector", {"nodeId": root, "selector": f'[data-a11y-probe="{i}"]'}
            )
            html: str = (await cdp.send("DOM.getOuterHTML", {"nodeId": found["nodeId"]}))[
                "outerHTML"
            ][:160]
            tree: dict[str, Any] = await cdp.send(
                "Accessibility.getPartialAXTree",
                {"nodeId": found["nodeId"], "fetchRelatives": False},
            )
            node = tree["nodes"][0]
            name = str(node.get("name", {}).get("value", "")).strip()
            role = str(node.get("role", {}).get("value", ""))
            if not name:
                problems.append(f"no accessible name: {html}")
                continue
            if name.lower() in VAGUE:
                problems.append(f"a name that says nothing out of context, {name!r}: {html}")
            if role not in ARIA_ROLES:
                continue  # e.g. a <summary> (Chromium: DisclosureTriangle): named is enough
            matches: list[str] = await page.get_by_role(role, name=name, exact=True).evaluate_all(  # type: ignore[arg-type]
                "els => els.map(e => e.getAttribute('data-a11y-probe'))"
            )
            if str(i) not in matches:
                problems.append(f"get_by_role({role!r}, name={name!r}) misses {html}")
    finally:
        await cdp.detach()
    return problems


async def keyboard_reachable(page: Page, selector: str, presses: int = 60) -> bool:
    """Whether Tab from the top of the page focuses `selector` within `presses` presses."""
    await page.evaluate("() => { document.activeElement && document.activeElement.blur(); }")
    for _ in range(presses):
        await page.keyboard.press("Tab")
        if await page.evaluate("(sel) => document.activeElement?.matches(sel) ?? false", selector):
            return True
    return False


async def applied(page: Page, fields: dict[str, str], timeout_ms: int = 5_000) -> None:
    """Wait until the task list shows exactly the filters `fields` (name -> value): the
    URL's query says so, and so does the list in the page (`#task-results[data-query]`,
    the query the server rendered it for)."""
    await page.wait_for_function(
        """(wanted) => {
            const sorted = (q) => [...new URLSearchParams(q).entries()].sort().join('&');
            const results = document.getElementById('task-results');
            const want = sorted(wanted);
            return sorted(location.search) === want && results !== null
                && sorted(results.dataset.query || '') === want;
        }""",
        arg=fields,
        timeout=timeout_ms,
    )
