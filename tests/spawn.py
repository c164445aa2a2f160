"""Our own Python processes in the tests, forked with everything already imported.

Many tests start real processes of ours: servers, workers, the `fastmcp-tasks` CLI.
A fresh interpreter spends about 2 s of CPU importing FastMCP and the MCP SDK before
it does anything, which made those imports most of the suite's CPU time. `install()`
(called by `tests/conftest.py`) makes every `subprocess.Popen` of this interpreter
(`sys.executable SCRIPT|-m MODULE|-c CODE ...`) or of the `fastmcp-tasks` console
script fork the test process instead and run the program there, with the libraries
already in memory: a real process with its own pid, exit status, pipes, signals and
environment, started in milliseconds. `subprocess`, `asyncio` and `anyio` processes
all go through `Popen`, so no test changes.

What the child does is what a fresh interpreter would do: `env` becomes `os.environ`,
`cwd` is applied, stdin/stdout/stderr are the ones given, `sys.argv` and `sys.path[0]`
are a fresh run's, signal dispositions are Python's defaults, every other inherited
file descriptor is closed (so a pipe or a listening socket of the test process is
never held open by a child), logging starts unconfigured, and it exits with the
program's status in a context of its own (no context variable of the test that
started it; an uncaught `KeyboardInterrupt` dies of SIGINT, as Python does).
What it does not do is import anything again: a test of import-time behaviour must
run a fresh interpreter. Nor is SQLite safe across a fork while the parent has a
database open (the library keeps its file locks per process, in memory the child
inherits), so while this process holds a SQLite file open its children are fresh
interpreters. `FASTMCP_TASKS_TEST_EXEC=1` turns forking off for a whole
run (every process a fresh interpreter), and `fresh_interpreter()` for one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import io
import logging
import os
import random
import runpy
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

CONSOLE_SCRIPT = str(Path(sys.executable).parent / "fastmcp-tasks")
EXEC_ENV = "FASTMCP_TASKS_TEST_EXEC"

_original_init = subprocess.Popen.__init__
_exec_only = threading.local()


def _plan(args: Any) -> tuple[str, str, list[str]] | None:
    """(how, what, argv) to run `args` forked, or None to exec it as asked."""
    if getattr(_exec_only, "on", False) or isinstance(args, (str, bytes)) or _holds_sqlite():
        return None
    argv = [os.fspath(arg) for arg in args]
    if not argv or any(not isinstance(arg, str) for arg in argv):
        return None
    if argv[0] == CONSOLE_SCRIPT:
        return ("cli", "", argv)
    if argv[0] != sys.executable or len(argv) < 2:
        return None
    if argv[1] == "-m" and len(argv) >= 3:
        return ("module", argv[2], [argv[2], *argv[3:]])
    if argv[1] == "-c" and len(argv) >= 3:
        return ("code", argv[2], ["-c", *argv[3:]])
    if argv[1].startswith("-"):
        return None  # interpreter options: a fresh interpreter, as asked
    return ("script", argv[1], argv[1:])


SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def _holds_sqlite() -> bool:
    """Does this process hold a SQLite database (or its WAL, shm, journal) open? Where
    `/proc` cannot tell (not Linux), say yes: fresh interpreters are always safe."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return True
    for name in names:
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{name}")
            if not target.startswith("/") or target.startswith(("/dev/", "/proc/")):
                continue
            if target.endswith(SQLITE_SIDE_FILES) or os.pread(int(name), 16, 0) == SQLITE_MAGIC:
                return True
    return False


def _popen_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
    if not rest and options.get("preexec_fn") is None and (plan := _plan(args)) is not None:
        keep = tuple(options.get("pass_fds", ()))
        options["preexec_fn"] = functools.partial(_child, plan, options.get("env"), keep)
    _original_init(self, args, *rest, **options)


def install() -> None:
    """Fork our own Python processes from now on (unless `FASTMCP_TASKS_TEST_EXEC=1`)."""
    if os.environ.get(EXEC_ENV) == "1":
        return
    subprocess.Popen.__init__ = _popen_init  # type: ignore[method-assign]


@contextlib.contextmanager
def fresh_interpreter() -> Iterator[None]:
    """Processes started in this block (in this thread) are fresh interpreters."""
    _exec_only.on = True
    try:
        yield
    finally:
        _exec_only.on = False


def _child(
    plan: tuple[str, str, list[str]], env: Mapping[str, str] | None, keep: Sequence[int]
) -> NoReturn:
    """In the forked child: become a fresh run of the program, run it, exit with its status."""
    code: int = 1
    try:
        gc.freeze()  # the parent's garbage is never finalized here (its fds are closed)
        _close_all_but(keep)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), line_buffering=True, errors="backslashreplace"
        )
        _fresh_signals()
        asyncio.events._set_running_loop(None)
        random.seed()
        logging.root.handlers.clear()
        logging.root.setLevel(logging.WARNING)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        how, what, argv = plan
        sys.argv = argv
        code = contextvars.Context().run(_run, how, what, argv)  # no test's context
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
        code = 1
    _flush()
    os._exit(code)


def _run(how: str, what: str, argv: list[str]) -> int:
    if how == "cli":
        from fastmcp_tasks.cli import main

        main(argv[1:])
    elif how == "module":
        sys.path[0] = os.getcwd()
        runpy.run_module(what, run_name="__main__", alter_sys=True)
    elif how == "code":
        sys.path[0] = ""
        exec(compile(what, "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.path[0] = str(Path(what).resolve().parent)
        runpy.run_path(what, run_name="__main__")
    return 0


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _fresh_signals() -> None:
    """Python's own dispositions at startup, whatever the test process had installed."""
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _fd_limit() -> int:
    return os.sysconf("SC_OPEN_MAX")


def _close_all_but(keep: Sequence[int]) -> None:
    low = 3
    for fd in sorted(set(keep)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _fd_limit())


def _flush() -> None:
    for handler in logging.root.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
