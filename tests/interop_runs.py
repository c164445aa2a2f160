"""One run of an interop client script (tests/interop/), read as it goes.

`ClientRun.start(command, within, server_log)` starts the script in an asyncio
subprocess with the client's own interpreter (the project's `PYTHONPATH` left
out, so nothing of ours reaches the client's environment). `next(event)` waits
for the next JSON line with that `event`, `resume()` answers a `paused` line,
`finish()` waits for the exit and returns everything it printed. All of it is
bounded by `within` seconds; on any failure the script's stdout, stderr and the
server's log tail are in the message.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio


@dataclass
class Seen:
    """What a client script printed, in order."""

    lines: list[dict[str, Any]] = field(default_factory=list)

    def all(self, event: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["event"] == event]

    def one(self, event: str) -> dict[str, Any]:
        found = self.all(event)
        assert len(found) == 1, f"expected one {event!r} line, got {len(found)}: {self.lines}"
        return found[0]


@dataclass
class ClientRun:
    process: asyncio.subprocess.Process
    command: list[str]
    server_log: Path
    seen: Seen = field(default_factory=Seen)
    read: int = 0  # lines of `seen` that `next` has looked at
    stderr: bytes = b""

    @classmethod
    @asynccontextmanager
    async def start(
        cls, command: list[str], within: float, server_log: Path
    ) -> AsyncIterator[ClientRun]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        run = cls(process, command, server_log)
        drain = asyncio.ensure_future(process.stderr.read())  # type: ignore[union-attr]
        try:
            with anyio.fail_after(within):
                yield run
        except Exception as exc:  # a timeout or a failed check: show what the client saw
            run.stop()
            run.stderr = await drain
            raise AssertionError(run.report(f"{type(exc).__name__}: {exc}")) from exc
        finally:
            run.stop()
            await process.wait()
            if not drain.done():
                drain.cancel()

    def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()

    async def _line(self) -> dict[str, Any] | None:
        raw = await self.process.stdout.readline()  # type: ignore[union-attr]
        if not raw:
            return None
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            line = {"event": "unparsed", "text": raw.decode(errors="replace")}
        self.seen.lines.append(line)
        return line

    async def next(self, event: str) -> dict[str, Any]:
        """The next line with `event` (a `crash` or the end of output fails)."""
        while True:
            if self.read == len(self.seen.lines) and await self._line() is None:
                raise AssertionError(f"the client ended before printing {event!r}")
            line = self.seen.lines[self.read]
            self.read += 1
            if line["event"] == event:
                return line
            if line["event"] == "crash":
                raise AssertionError(f"the client crashed before printing {event!r}")

    def resume(self) -> None:
        """Let a paused script go on (one line on its stdin)."""
        self.process.stdin.write(b"go\n")  # type: ignore[union-attr]

    async def finish(self) -> Seen:
        """Everything the script printed, once it has exited; it must end with `done`."""
        self.process.stdin.close()  # type: ignore[union-attr]
        while await self._line() is not None:
            pass
        code = await self.process.wait()
        assert code == 0 and self.seen.lines[-1:] == [{"event": "done"}], (
            f"exit code {code}, last line {self.seen.lines[-1:]}"
        )
        return self.seen

    def report(self, what: str) -> str:
        printed = "\n".join(json.dumps(line) for line in self.seen.lines)
        log = self.server_log.read_text(errors="replace")[-2000:]
        return (
            f"{what}\n--- command: {' '.join(self.command)}\n--- stdout:\n{printed}"
            f"\n--- stderr:\n{self.stderr.decode(errors='replace')[-3000:]}"
            f"\n--- server log (tail):\n{log}"
        )
