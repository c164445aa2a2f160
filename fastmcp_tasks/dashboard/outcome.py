"""How a task ended, on its detail page: the result, the error, or the tool error.

`result_section` shows a completed task's `CallToolResult` (its blocks by type, the
first texts, the structured content); `error_section` the JSON-RPC error of a `failed`
task, or the text of a tool error: a task `completed` on the wire whose stored result
has `isError: true` (the rule is `stores.outcomes`), which the dashboard shows as its
own outcome, `error`. Every text is escaped and cut (`html.truncated`).
"""

from __future__ import annotations

from fastmcp_tasks.dashboard.html import esc, pretty_json, truncated
from fastmcp_tasks.stores.base import TaskRecord
from fastmcp_tasks.stores.outcomes import tool_error_text

#: Characters of a result's text block, its structured content and a tool error shown.
TEXT_SHOWN = 500
STRUCTURED_SHOWN = 20_000
TOOL_ERROR_SHOWN = 5_000


def result_section(record: TaskRecord) -> str:
    """The `#detail-result` section of a task with a result (else `""`)."""
    result = record.result
    if result is None:
        return ""
    content = result.get("content") or []
    kinds: dict[str, int] = {}
    texts: list[str] = []
    for block in content if isinstance(content, list) else []:
        kind = str(block.get("type", "?")) if isinstance(block, dict) else "?"
        kinds[kind] = kinds.get(kind, 0) + 1
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            texts.append(block["text"])
    summary = ", ".join(f"{n} {kind}" for kind, n in kinds.items()) or "no content"
    if result.get("isError"):
        summary += " (isError)"
    parts = [f'<p class="summary">{esc(summary)}</p>']
    for text in texts[:3]:
        cut, _ = truncated(text, TEXT_SHOWN)
        parts.append(f'<pre class="text">{esc(cut)}</pre>')
    structured = result.get("structuredContent")
    if structured is not None:
        text, _ = truncated(pretty_json(structured), STRUCTURED_SHOWN)
        parts.append(f'<h3>Structured content</h3><pre id="detail-structured">{esc(text)}</pre>')
    return (
        '<section id="detail-result" aria-labelledby="result-h"><h2 id="result-h">Result</h2>'
        f"{''.join(parts)}</section>"
    )


def error_section(record: TaskRecord) -> str:
    """The error of a `failed` task (`#detail-error`), or the text of a tool error
    (`#detail-tool-error`); `""` for any other task."""
    if record.error is not None:
        return (
            '<section aria-labelledby="error-h"><h2 id="error-h">Error</h2>'
            f'<pre id="detail-error">{esc(pretty_json(record.error))}</pre></section>'
        )
    text = tool_error_text(record)
    if text is None:
        return ""
    shown, _ = truncated(text or "(the error result has no text)", TOOL_ERROR_SHOWN)
    return (
        '<section id="detail-tool-failure" aria-labelledby="error-h">'
        '<h2 id="error-h">Tool error</h2>'
        "<p>The tool raised an error: on the wire the task is <code>completed</code>, "
        "with an error result (<code>isError</code>).</p>"
        f'<pre id="detail-tool-error">{esc(shown)}</pre></section>'
    )


__all__ = ["error_section", "result_section"]
