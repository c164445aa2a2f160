"""How a seam's shape is checked: parameters, attributes a constructor assigns, the verdict.

Shared by every `_compat` module; `checks.missing_seams()` gathers their checks.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import fastmcp

from fastmcp_tasks.errors import IncompatibleFastMCP

Checks = dict[str, Callable[[], bool]]


def _params(function: Any) -> set[str]:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return set()


def _assigned(cls: type, attribute: str) -> bool:
    """Whether some `__init__` in `cls`'s MRO assigns or reads `attribute`."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        code = getattr(init, "__code__", None)
        if code is not None and attribute in code.co_names:
            return True
    return False


def _callable_with(owner: Any, name: str, params: set[str]) -> bool:
    function = getattr(owner, name, None)
    return callable(function) and params <= _params(function)


def missing_of(checks: Checks) -> list[str]:
    """The seams whose check fails (a check that raises counts as failed)."""
    missing: list[str] = []
    for seam, check in checks.items():
        try:
            present = check()
        except Exception:
            present = False
        if not present:
            missing.append(seam)
    return missing


def _raise_for(missing: list[str]) -> None:
    if missing:
        raise IncompatibleFastMCP(fastmcp.__version__, missing)
