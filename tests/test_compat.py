"""The one seam to FastMCP (`fastmcp_tasks._compat`): nothing private outside it, loud checks.

1. No module of `fastmcp_tasks` other than `_compat` touches a private FastMCP or
   SDK name: the private names are every single-underscore name FastMCP, the SDK
   (`mcp`) and `mcp_types` define (functions, classes, attributes they assign),
   read with `ast`; the scan flags an attribute access of one on anything but
   `self`/`cls`, a `getattr`/`hasattr`/`setattr` of one by string, and any
   `from fastmcp...`/`from mcp...` import of an underscore name.
2. `check_seams()` names the FastMCP version and each seam that went missing.
3. A `tools/call` resolves its component version exactly as core does, sync or task,
   and a task run later (by a worker) runs the version its call asked for.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Any

import fastmcp
import mcp
import mcp_types
import pytest
from fastmcp import FastMCP
from fastmcp.tools import function_tool

from fastmcp_tasks import TasksExtension, _compat
from fastmcp_tasks.errors import IncompatibleFastMCP
from tests.wire import connect

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fastmcp_tasks"
CORE_PACKAGES = ("fastmcp", "mcp", "mcp_types")
ATTRIBUTE_CALLS = ("getattr", "hasattr", "setattr", "delattr")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@functools.cache
def core_private_names() -> frozenset[str]:
    """Every single-underscore name FastMCP, the SDK and `mcp_types` define."""
    names: set[str] = set()
    for package in (fastmcp, mcp, mcp_types):
        for path in Path(package.__file__ or "").parent.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = node.name
                elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    name = node.attr
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    name = node.id
                else:
                    continue
                if _private(name):
                    names.add(name)
    return frozenset(names)


def _on_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def private_uses(source: str, private: frozenset[str]) -> list[tuple[int, str]]:
    """The private FastMCP / SDK names `source` touches, with their lines."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private and not _on_self(node.value):
            found.append((node.lineno, ast.unparse(node)))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ATTRIBUTE_CALLS
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in private
            and not _on_self(node.args[0])
        ):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            CORE_PACKAGES
        ):
            module = node.module or ""
            if any(_private(part) for part in module.split(".")):
                found.append((node.lineno, f"from {module} import ..."))
            found += [
                (node.lineno, f"from {module} import {a.name}")
                for a in node.names
                if _private(a.name)
            ]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in CORE_PACKAGES and any(_private(p) for p in parts):
                    found.append((node.lineno, f"import {alias.name}"))
    return found


def test_no_private_fastmcp_name_outside_the_seam() -> None:
    private = core_private_names()
    assert "_mask_error_details" in private and "_claim_by_model" in private  # the scan sees
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "_compat" not in path.relative_to(PACKAGE).parts
        for line, text in private_uses(path.read_text(encoding="utf-8"), private)
    ]
    assert not offenders, "private FastMCP/SDK names outside _compat:\n" + "\n".join(offenders)


def test_the_scan_catches_each_form() -> None:
    private = frozenset({"_mask_error_details", "_validate_input"})
    source = (
        "from fastmcp.tools.function_tool import _validate_input\n"
        "import fastmcp.server._private\n"
        "x = server._mask_error_details\n"
        "y = getattr(server, '_mask_error_details', False)\n"
        "z = self._mask_error_details\n"  # our own attribute: fine
    )
    assert [line for line, _ in private_uses(source, private)] == [1, 2, 3, 4]


def test_every_seam_is_present_on_this_fastmcp() -> None:
    assert _compat.missing_seams() == []
    _compat.check_seams()
    _compat.check_server(FastMCP("seams"))


def test_a_missing_seam_fails_loudly_naming_it_and_the_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(function_tool, "_validate_input")
    with pytest.raises(IncompatibleFastMCP) as raised:
        _compat.check_seams()
    message = str(raised.value)
    assert fastmcp.__version__ in message
    assert "_validate_input" in message
    assert raised.value.missing == [s for s in raised.value.missing if "_validate_input" in s]


def test_a_changed_seam_signature_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    def validate_input(adapter: Any, value: Any) -> Any:  # lost `strict`
        return adapter.validate_python(value)

    monkeypatch.setattr(function_tool, "_validate_input", validate_input)
    assert any("_validate_input" in seam for seam in _compat.missing_seams())


def test_a_server_without_mask_error_details_fails_closed() -> None:
    server = FastMCP("masked")
    del server._mask_error_details
    assert _compat.mask_error_details(server) is True  # never leaks details
    with pytest.raises(IncompatibleFastMCP, match="_mask_error_details"):
        _compat.check_server(server)


# --- the version a tools/call resolves ------------------------------------------


def versioned_server(**extension: Any) -> FastMCP:
    mcp_server = FastMCP("versions")
    mcp_server.add_extension(TasksExtension(**extension))

    @mcp_server.tool(name="which", version="1.0", task=True)
    async def which_one() -> str:
        return "1.0"

    @mcp_server.tool(name="which", version="2.0", task=True)
    async def which_two() -> str:
        return "2.0"

    return mcp_server


META_SHAPES: list[dict[str, Any] | None] = [
    None,
    {"fastmcp": {"version": "1.0"}},
    {"fastmcp": {"version": "2.0"}},
    {"fastmcp": {"version": {"eq": "1.0"}}},  # core reads strings only: the highest
    {"fastmcp": {"version": "3.0"}},  # no such version: "Unknown tool" both ways
    {"fastmcp": "1.0"},
]


@pytest.mark.anyio
@pytest.mark.parametrize("meta", META_SHAPES)
async def test_a_task_runs_the_version_a_sync_call_runs(
    transport: str, meta: dict[str, Any] | None
) -> None:
    params: dict[str, Any] = {"name": "which", "arguments": {}}
    if meta is not None:
        params["_meta"] = meta
    async with connect(versioned_server(), transport) as wire:
        sync = await wire.request("tools/call", dict(params), opt_in=False)
        answer = await wire.request("tools/call", dict(params), opt_in=True)
        if answer.get("resultType") == "task":
            done = await wire.wait(answer["taskId"])
            assert done["status"] == "completed", done
            answer = done["result"]
    assert answer == sync


@pytest.mark.anyio
async def test_a_worker_runs_the_version_the_call_asked_for(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    front = versioned_server(url=url, concurrency=0)
    worker = versioned_server(url=url, concurrency=1)
    params = {"name": "which", "arguments": {}, "_meta": {"fastmcp": {"version": "1.0"}}}
    async with connect(front, "memory") as wire:
        created = await wire.request("tools/call", params)
        assert created["resultType"] == "task"
        async with _compat.server_lifespan(worker):
            done = await wire.wait(created["taskId"], within=20)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "1.0"
