"""What the `fastmcp-tasks` client commands show and ask: the task view and the prompts.

`TaskView` shows a task's state as it changes. On a terminal it is a `rich` live line: a
spinner, the status, a bar when `statusMessage` carries a count ("3/10", "40%"; our
`Progress` writes "3/10" when it has no message), the message and the elapsed time.
Anywhere else it prints one plain line per change: `[status] message (elapsed)`.

`Prompter` asks questions on stdin without blocking the event loop (it waits for the
terminal to have a line), so polling and Ctrl-C carry on while a person types.
`Prompter.elicit()` turns one `elicitation/create` request into a prompt per field of
its `requestedSchema` and returns the `ElicitResult` to send back.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TextIO

import anyio
from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.prompt import Confirm, FloatPrompt, IntPrompt, InvalidResponse, Prompt, PromptBase
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

STYLES = {
    "working": "cyan",
    "input_required": "yellow",
    "completed": "green",
    "failed": "red",
    "cancelled": "magenta",
}
MARKS = {"completed": "✓", "failed": "✗", "cancelled": "⊘"}
_COUNT = re.compile(r"(?<![\d/.])(\d+)\s*/\s*(\d+)(?![\d/.])")
_PERCENT = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*%")
_ACTIONS = {"a": "accept", "d": "decline", "c": "cancel"}


def elapsed_text(seconds: float) -> str:
    """`4.2s` under a minute, then `3:07`, then `1:03:07`."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def known_total(message: str | None) -> tuple[float, float] | None:
    """`(done, total)` when a status message carries a count ("3/10") or a percentage."""
    if not message:
        return None
    count = _COUNT.search(message)
    if count and 0 < int(count[2]) and int(count[1]) <= int(count[2]):
        return float(count[1]), float(count[2])
    percent = _PERCENT.search(message)
    if percent and float(percent[1]) <= 100:
        return float(percent[1]), 100.0
    return None


class TaskView:
    """A task's state as it changes: a `rich` live line on a terminal, plain lines elsewhere.

    Args:
        console: where the view goes (stdout).
        live: draw a live line (a terminal) rather than one plain line per change.
        lines: print the plain lines (`False`: show nothing off a terminal).
    """

    def __init__(self, console: Console, *, live: bool, lines: bool = True) -> None:
        self.console = console
        self.use_live = live
        self.lines = lines
        self.started = time.monotonic()
        self.state: dict[str, Any] = {}
        self.spinner = Spinner("dots", style="cyan")
        self._live: Live | None = None
        self._printed: tuple[Any, ...] | None = None

    def update(self, state: dict[str, Any]) -> None:
        """Take a new task state: redraw the live line, or print a plain line if it changed."""
        if not self.state:
            self._start_at(state.get("createdAt"))
        self.state = state
        if self._live is not None:
            self._live.refresh()
        elif not self.use_live and self.lines:
            key = (state.get("status"), state.get("statusMessage"))
            if key != self._printed:
                self._printed = key
                print(self.plain(), file=self.console.file, flush=True)

    def _start_at(self, created: Any) -> None:
        """Count elapsed time from the task's `createdAt` (for `wait`), if it is sane."""
        try:
            age = time.time() - datetime.fromisoformat(str(created)).timestamp()
        except ValueError:
            return
        if 0 <= age < 7 * 24 * 3600:  # a skewed server clock keeps the local count
            self.started = time.monotonic() - age

    def plain(self) -> str:
        """`[status] message (elapsed)` for the latest state."""
        message = self.state.get("statusMessage")
        line = f"[{self.state.get('status', '?')}]" + (f" {message}" if message else "")
        return f"{line} ({elapsed_text(time.monotonic() - self.started)})"

    def render(self) -> RenderableType:
        """The live line: spinner (or the outcome's mark), status, bar, message, elapsed."""
        status = str(self.state.get("status", "starting"))
        message = self.state.get("statusMessage")
        line = Table.grid(padding=(0, 1))
        cells: list[RenderableType] = [Text(status, style=f"bold {STYLES.get(status, '')}")]
        total = known_total(message)
        if total is not None:
            cells.append(ProgressBar(total=total[1], completed=total[0], width=24))
        if message:
            cells.append(Text(str(message), no_wrap=True, overflow="ellipsis"))
        cells.append(Text(elapsed_text(time.monotonic() - self.started), style="dim"))
        line.add_row(*cells)
        if status in MARKS:
            done = Table.grid(padding=(0, 1))
            done.add_row(Text(MARKS[status], style=STYLES[status]), line)
            return done
        self.spinner.update(text=line)
        return self.spinner

    def start(self) -> None:
        """Start the live line (on a terminal; otherwise nothing to do)."""
        if self.use_live and self._live is None:
            self._live = Live(
                get_renderable=self.render,
                console=self.console,
                refresh_per_second=10,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def stop(self) -> None:
        """Leave the live line as it last was, so that what follows prints below it."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the live line while something else uses the terminal (a prompt)."""
        was_live = self._live is not None
        self.stop()
        try:
            yield
        finally:
            if was_live:
                self.start()


class Prompter:
    """Questions on a terminal, read without blocking the event loop.

    Args:
        console: where the questions are written.
        stdin: where the answers come from; `interactive` is whether it is a terminal.
    """

    def __init__(self, console: Console, stdin: TextIO | None = None) -> None:
        stdin = stdin if stdin is not None else sys.stdin
        self.console = console
        try:
            self.fd = stdin.fileno()
            self.interactive = stdin.isatty()
        except (AttributeError, OSError, ValueError):  # no usable stdin at all
            self.fd, self.interactive = -1, False
        self._buffer = b""

    async def read_line(self) -> str:
        """The next line typed (without its newline); `EOFError` at end of input."""
        while b"\n" not in self._buffer:
            try:
                await anyio.wait_readable(self.fd)  # anyio >= 4.7
                chunk = os.read(self.fd, 4096)
            except (AttributeError, OSError, NotImplementedError):  # cannot watch this fd
                chunk = await anyio.to_thread.run_sync(
                    os.read, self.fd, 4096, abandon_on_cancel=True
                )
            if not chunk:
                raise EOFError
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").rstrip("\r")

    async def ask(
        self,
        prompt: PromptBase[Any],
        *,
        default: Any = ...,
        required: bool = True,
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        """Ask until the answer converts (and passes `check`); empty gives the default or None."""
        while True:
            self.console.print(prompt.make_prompt(default), end="")
            line = await self.read_line()
            if not line.strip():
                if default is not ...:
                    return default
                if not required:
                    return None
                self.console.print(Text("A value is required", style="prompt.invalid"))
                continue
            try:
                value = prompt.process_response(line)
                problem = check(value) if check is not None else None
                if problem:
                    raise InvalidResponse(Text(problem, style="prompt.invalid"))
            except InvalidResponse as error:
                prompt.on_validate_error(line, error)
                continue
            return value

    async def choose(self, question: str, choices: list[str]) -> str:
        """One of `choices` (case-insensitive), asked until given."""
        prompt = Prompt(Text(question, style="bold"), console=self.console, choices=choices)
        prompt.case_sensitive = False
        return str(await self.ask(prompt))

    async def elicit(self, params: dict[str, Any]) -> dict[str, Any]:
        """Ask a person one `elicitation/create` (its params); the `ElicitResult` as a dict."""
        schema = params.get("requestedSchema") or {}
        properties: dict[str, Any] = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        question = str(params.get("message", ""))
        self.console.print(Text.assemble(("? ", "bold yellow"), (question, "bold")))
        if params.get("mode") == "url" or "url" in params:
            self.console.print(Text(f"  open {params.get('url')}"))
        first = "a: answer" if properties else "a: accept"
        self.console.print(Text(f"  ({first}, d: decline, c: cancel)", style="dim"))
        action = _ACTIONS[(await self.choose("  Respond?", list(_ACTIONS))).lower()]
        if action != "accept" or params.get("mode") == "url":  # a URL elicitation has no form
            return {"action": action}
        content: dict[str, Any] = {}
        for name, prop in properties.items():
            value = await self.field(name, prop, name in required)
            if value is not None:
                content[name] = value
        return {"action": "accept", "content": content}

    async def field(self, name: str, prop: dict[str, Any], required: bool) -> Any:
        """Ask for one form field by its JSON Schema type; `None` when left out."""
        kind = prop.get("type", "string")
        label = Text(f"  {prop.get('title') or name}", style="bold")
        if prop.get("description"):
            label.append(f" ({prop['description']})", style="dim")
        default = prop.get("default", ...)
        choices = _choices(prop)
        prompt: PromptBase[Any]
        if kind == "boolean":
            prompt = Confirm(label, console=self.console)
        elif kind == "integer":
            prompt = IntPrompt(label, console=self.console)
        elif kind == "number":
            prompt = FloatPrompt(label, console=self.console)
        elif kind == "array":
            label.append(" (comma-separated)", style="dim")
            prompt = Prompt(label, console=self.console)
            items = _choices(prop.get("items") or {})
            if items:
                label.append(f" [{'/'.join(items)}]", style="prompt.choices")
            answer = await self.ask(prompt, required=required, check=_schema_check(prop, True))
            return None if answer is None else _split(answer)
        else:
            prompt = Prompt(label, console=self.console, choices=choices or None)
        return await self.ask(
            prompt, default=default, required=required, check=_schema_check(prop, False)
        )


def _choices(prop: dict[str, Any]) -> list[str]:
    if isinstance(prop.get("enum"), list):
        return [str(choice) for choice in prop["enum"]]
    options = prop.get("oneOf") or prop.get("anyOf") or []
    return [str(option["const"]) for option in options if "const" in option]


def _split(answer: str) -> list[str]:
    return [part.strip() for part in answer.split(",") if part.strip()]


def _schema_check(prop: dict[str, Any], split: bool) -> Callable[[Any], str | None]:
    """The first JSON Schema violation of a value against its property, as a sentence."""
    from jsonschema.validators import validator_for

    def check(value: Any) -> str | None:
        subject = _split(value) if split and isinstance(value, str) else value
        for error in validator_for(prop)(prop).iter_errors(subject):
            return str(error.message)
        return None

    return check
