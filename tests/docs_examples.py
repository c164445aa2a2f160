"""The code blocks of README.md and docs/**/*.md, as tests/test_docs_examples.py runs them.

Every ```python block is executed, in the order of its page, in a temporary directory
the page's blocks share (so a block may import a `server.py` an earlier block wrote, and
a command may read the SQLite file a block filled). A line of the form

    <!-- example: KEY[=VALUE] ... -->

right before a fence says how to run it:

- `file=NAME` (python): write the block to NAME in the page's directory and execute it
  as a module (`runpy.run_path(..., run_name="docs_example")`, so its `if __name__ ==
  "__main__":` part is left to whoever runs it: a later block or command).
- `env=redis` / `env=postgres`: the page's store is Redis / PostgreSQL. The block's
  `redis://localhost:6379/0` / `postgresql://postgres@localhost:5432/app` become the
  suite's server with a prefix / schema of this run's own.
- `shell` (bash / console): run it; in a `console` block the lines after `$ ` are the
  commands. `background`: start its commands and stop them (SIGTERM) when the page ends.
  `expect-exit=N`: the status each command must end with.
- `not-run: REASON` (bash / console): shown, never run (installs, a server that would
  not stop); counted apart.
- `timeout=S`: the block's bound (default 90 s).

Every python block is executed; a shell block with neither `shell` nor `not-run` is an
error, so no block is forgotten.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHELL_LANGS = {"bash", "console", "shell", "sh"}
_MARK = re.compile(r"^<!--\s*example:(.*?)-->\s*$")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.lang in ("python", "py")

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGS

    @property
    def runs(self) -> bool:
        return self.is_python or "shell" in self.options


def pages() -> list[Path]:
    """README.md, then every page of docs/, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _options(text: str) -> dict[str, str]:
    text = text.strip()
    if text.startswith("not-run"):
        return {"not-run": text.partition(":")[2].strip() or "not runnable"}
    options = {}
    for word in text.split():
        key, _, value = word.partition("=")
        options[key] = value
    return options


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of `page` with the options of the marker before each."""
    name = str(page.relative_to(ROOT))
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        indent, fence, lang = opened.groups()
        previous = lines[index - 1] if index else ""
        marker = _MARK.match(previous.strip())
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            body.append(lines[end][len(indent) :])
            end += 1
        found.append(
            Block(
                page=name,
                line=index + 1,
                lang=lang.lower(),
                code="\n".join(body) + "\n",
                options=_options(marker.group(1)) if marker else {},
            )
        )
        index = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def console_commands(block: Block) -> list[str]:
    """The commands of a shell block: `$ ` lines of a console block (with their `\\`
    continuations), every non-comment line of a bash block."""
    commands: list[str] = []
    pending = ""
    for raw in block.code.splitlines():
        line = raw.rstrip()
        if block.lang == "console" and not pending:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append(pending + line)
        pending = ""
    return commands


CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"
CLI_COMMANDS = (
    "call get wait ls show cancel purge pause resume paused workers audit ui worker".split()
)
_CLI_SECTION = re.compile(r"^## `fastmcp-tasks (\w+)`\n\n```text\n(.*?)```\n", re.M | re.S)


def cli_help(command: str) -> str:
    """`fastmcp-tasks COMMAND --help` as the reference page shows it (90 columns)."""
    env = {**os.environ, "COLUMNS": "90", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "fastmcp_tasks", command, "--help"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


def cli_sections(text: str) -> dict[str, str]:
    """The help text each `fastmcp-tasks X` section of the CLI page shows."""
    return {match.group(1): match.group(2) for match in _CLI_SECTION.finditer(text)}


def write_cli_page() -> None:
    """Refresh the help texts of docs/reference/cli.md from the commands themselves."""
    text = CLI_PAGE.read_text(encoding="utf-8")
    for command in CLI_COMMANDS:
        heading = f"## `fastmcp-tasks {command}`\n\n```text\n"
        start = text.index(heading) + len(heading)
        end = text.index("```\n", start)
        text = text[:start] + cli_help(command) + text[end:]
    CLI_PAGE.write_text(text, encoding="utf-8")


def count() -> dict[str, int]:
    """How many blocks of each kind the pages have, and how many run."""
    every = all_blocks()
    python = [block for block in every if block.is_python]
    shell = [block for block in every if block.is_shell]
    return {
        "python": len(python),
        "python_run": sum(block.runs for block in python),
        "shell": len(shell),
        "shell_run": sum(block.runs for block in shell),
        "shell_not_run": sum("not-run" in block.options for block in shell),
    }


if __name__ == "__main__":  # python -m tests.docs_examples [--write-cli]
    if "--write-cli" in sys.argv:
        write_cli_page()
    print(count())
