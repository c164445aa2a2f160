"""The public surface: names, construction errors, URL selection."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import fastmcp_tasks
from fastmcp_tasks import ConfigurationError, MemoryTaskStore, TasksExtension, store_from_url
from fastmcp_tasks.stores import SCHEMES


def test_public_names_are_pinned() -> None:
    assert sorted(fastmcp_tasks.__all__) == [
        "ConfigurationError",
        "EngineHealth",
        "Limits",
        "MemoryTaskStore",
        "NotATask",
        "Progress",
        "RelatedTask",
        "RelatedTasks",
        "Retry",
        "SQLiteTaskStore",
        "StepLimitExceeded",
        "StepNotRecorded",
        "StoreError",
        "TASKS_EXTENSION_ID",
        "TaskCancelled",
        "TaskFailed",
        "TaskLimitExceeded",
        "TaskLog",
        "TaskRecord",
        "TaskSnapshot",
        "TaskStore",
        "TaskUnreachable",
        "TasksError",
        "TasksExtension",
        "ToolTask",
        "__version__",
        "call_tool_task",
        "related_tasks",
        "step",
        "store_from_url",
        "task_options",
    ]
    for name in fastmcp_tasks.__all__:
        assert hasattr(fastmcp_tasks, name)


def test_unknown_scheme_names_the_supported_ones() -> None:
    with pytest.raises(ValueError, match=r"supported schemes are ") as info:
        TasksExtension("mysql://db/tasks")
    assert isinstance(info.value, ConfigurationError)
    for scheme in SCHEMES:
        assert f"{scheme}://" in str(info.value)
    assert {"memory", "sqlite", "postgresql", "postgres"} <= set(SCHEMES)
    with pytest.raises(ValueError, match="Unsupported task store URL"):
        store_from_url("not a url")


def test_url_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FASTMCP_TASKS_URL", raising=False)
    assert TasksExtension().url == "memory://"
    monkeypatch.setenv("FASTMCP_TASKS_URL", "memory://")
    assert TasksExtension().url == "memory://"
    monkeypatch.setenv("FASTMCP_TASKS_URL", "nope://x")
    with pytest.raises(ValueError, match="nope://x"):
        TasksExtension()


def test_store_object_is_used_as_given() -> None:
    store = MemoryTaskStore(max_tasks=3)
    extension = TasksExtension(store=store)
    assert extension.store is store
    assert extension.clone().store is store
    with pytest.raises(ValueError, match="either url= or store="):
        TasksExtension("memory://", store=store)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"concurrency": 0},
        {"retention": timedelta(seconds=-1)},
        {"sweep_interval": timedelta(0)},
        {"max_tasks": 0},
    ],
)
def test_bad_configuration_is_a_clear_value_error(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        TasksExtension(**kwargs)


def test_task_ids_are_unguessable_and_never_look_like_options() -> None:
    from fastmcp_tasks.server.extension import TASK_ID_BYTES, new_task_id

    assert TASK_ID_BYTES * 8 >= 128
    ids = {new_task_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert not any(task_id.startswith("-") for task_id in ids)


def test_new_options_are_validated() -> None:
    with pytest.raises(ConfigurationError, match="startup must be one of"):
        TasksExtension(startup="later")
    with pytest.raises(ConfigurationError, match="store_timeout must be positive"):
        TasksExtension(store_timeout=timedelta(0))
    assert TasksExtension().shutdown_grace == 0  # memory: nothing survives a shutdown anyway
    assert TasksExtension(shutdown_grace=timedelta(seconds=2)).shutdown_grace == 2


def test_a_durable_store_lets_running_tasks_finish_for_30_seconds(tmp_path: Path) -> None:
    extension = TasksExtension(f"sqlite:///{tmp_path}/tasks.db")
    assert extension.shutdown_grace == 30.0  # the same default as `fastmcp-tasks worker`
    assert extension.health().status == "stopped"  # the lifespan has not started


#: Public import paths -> (name -> the module that owns it since the reorganisation).
PUBLIC_PATHS: dict[str, dict[str, str]] = {
    "fastmcp_tasks": {
        "TASKS_EXTENSION_ID": "fastmcp_tasks.wire.names",
        "ConfigurationError": "fastmcp_tasks.errors",
        "EngineHealth": "fastmcp_tasks.server.health",
        "Limits": "fastmcp_tasks.server.limits",
        "MemoryTaskStore": "fastmcp_tasks.stores.memory",
        "NotATask": "fastmcp_tasks.errors",
        "Progress": "fastmcp_tasks.server.engine.progress",
        "RelatedTask": "fastmcp_tasks.server.related",
        "RelatedTasks": "fastmcp_tasks.server.related",
        "related_tasks": "fastmcp_tasks.server.related",
        "SQLiteTaskStore": "fastmcp_tasks.stores.sqlite.store",
        "StoreError": "fastmcp_tasks.errors",
        "TaskCancelled": "fastmcp_tasks.errors",
        "TaskFailed": "fastmcp_tasks.errors",
        "TaskLimitExceeded": "fastmcp_tasks.errors",
        "TaskLog": "fastmcp_tasks.client.tasklog",
        "TaskRecord": "fastmcp_tasks.stores.base",
        "TaskSnapshot": "fastmcp_tasks.client.snapshot",
        "TaskStore": "fastmcp_tasks.stores.base",
        "TasksError": "fastmcp_tasks.errors",
        "TasksExtension": "fastmcp_tasks.server.extension",
        "TaskUnreachable": "fastmcp_tasks.errors",
        "ToolTask": "fastmcp_tasks.client.handles",
        "call_tool_task": "fastmcp_tasks.client.handles",
        "store_from_url": "fastmcp_tasks.stores",
        "task_options": "fastmcp_tasks.server.options",
        "Retry": "fastmcp_tasks.server.flow",
        "step": "fastmcp_tasks.steps",
        "StepNotRecorded": "fastmcp_tasks.steps",
        "StepLimitExceeded": "fastmcp_tasks.errors",
    },
    "fastmcp_tasks.client": {
        "DEFAULT_POLL_SECONDS": "fastmcp_tasks.client.watch",
        "LISTEN_TIMEOUT": "fastmcp_tasks.client.watch",
        "SAFETY_POLL": "fastmcp_tasks.client.watch",
        "CancelTaskRequest": "fastmcp_tasks.wire.models",
        "GetTaskRequest": "fastmcp_tasks.wire.models",
        "InputHandler": "fastmcp_tasks.client.extension",
        "StatusCallback": "fastmcp_tasks.client.extension",
        "TaskSnapshot": "fastmcp_tasks.client.snapshot",
        "TaskState": "fastmcp_tasks.wire.models",
        "TaskStateDict": "fastmcp_tasks.wire.models",
        "TasksClientExtension": "fastmcp_tasks.client.extension",
        "ToolTask": "fastmcp_tasks.client.handles",
        "UpdateTaskRequest": "fastmcp_tasks.wire.models",
        "call_tool_task": "fastmcp_tasks.client.handles",
        "register_transparent_client": "fastmcp_tasks.client.extension",
        "task_outcome": "fastmcp_tasks.client.extension",
    },
    "fastmcp_tasks.client_http": {
        "RETRY_SAFE_METHODS": "fastmcp_tasks.client.http",
        "RetryingTransport": "fastmcp_tasks.client.http",
        "TasksHttpTransport": "fastmcp_tasks.client.http",
        "tasks_http_client": "fastmcp_tasks.client.http",
    },
    "fastmcp_tasks.stores": {
        "SCHEMES": "fastmcp_tasks.stores",
        "MemoryTaskStore": "fastmcp_tasks.stores.memory",
        "SQLiteTaskStore": "fastmcp_tasks.stores.sqlite.store",
        "TaskChange": "fastmcp_tasks.stores.base",
        "TaskRecord": "fastmcp_tasks.stores.base",
        "TaskStore": "fastmcp_tasks.stores.base",
        "store_from_url": "fastmcp_tasks.stores",
    },
    "fastmcp_tasks.stores.sqlite": {
        "SQLiteTaskStore": "fastmcp_tasks.stores.sqlite.store",
        "path_from_url": "fastmcp_tasks.stores.sqlite.schema",
    },
    "fastmcp_tasks.stores.redis": {"RedisTaskStore": "fastmcp_tasks.stores.redis.store"},
    "fastmcp_tasks.stores.base": {
        "TaskRecord": "fastmcp_tasks.stores.base",
        "TaskStore": "fastmcp_tasks.stores.base",
        "TaskChange": "fastmcp_tasks.stores.base",
    },
    "fastmcp_tasks.stores.listing": {"ListableTaskStore": "fastmcp_tasks.stores.listing"},
    "fastmcp_tasks.wire": {
        "TASKS_EXTENSION_ID": "fastmcp_tasks.wire.names",
        "TaskIdParams": "fastmcp_tasks.wire.models",
        "CreateTaskResult": "fastmcp_tasks.wire.models",
        "render_task": "fastmcp_tasks.wire.render",
        "could_be_task_id": "fastmcp_tasks.wire.render",
    },
    "fastmcp_tasks.cli": {"main": "fastmcp_tasks.cli"},
    "fastmcp_tasks.dashboard": {"app": "fastmcp_tasks.dashboard"},
}


@pytest.mark.parametrize("path", sorted(PUBLIC_PATHS))
def test_public_import_paths_keep_their_objects(path: str) -> None:
    """Every public path still imports the very object its owning module defines."""
    import importlib

    public = importlib.import_module(path)
    exported = getattr(public, "__all__", None)
    if exported is not None and path != "fastmcp_tasks.stores.base":
        assert set(PUBLIC_PATHS[path]) <= set(exported)
    for name, owner in PUBLIC_PATHS[path].items():
        assert getattr(public, name) is getattr(importlib.import_module(owner), name), name
    if path == "fastmcp_tasks":
        assert set(PUBLIC_PATHS[path]) | {"__version__"} == set(fastmcp_tasks.__all__)
    if path == "fastmcp_tasks.client":
        assert set(PUBLIC_PATHS[path]) == set(public.__all__)


def test_the_console_script_entry_point_resolves() -> None:
    import tomllib

    from fastmcp_tasks.cli import main

    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    target = pyproject["project"]["scripts"]["fastmcp-tasks"]
    assert target == "fastmcp_tasks.cli:main"
    assert callable(main)


#: Every logger name the package uses; operators filter on them, so they never move.
LOGGER_NAMES = {
    "fastmcp_tasks.configuration",
    "fastmcp_tasks.execution",
    "fastmcp_tasks.dashboard",
    "fastmcp_tasks.health",
    "fastmcp_tasks.history",
    "fastmcp_tasks.legacy",
    "fastmcp_tasks.listen",
    "fastmcp_tasks.ownership",
    "fastmcp_tasks.progress",
    "fastmcp_tasks.recovery",
    "fastmcp_tasks.runner",
    "fastmcp_tasks.steps",
    "fastmcp_tasks.stores.postgres",
    "fastmcp_tasks.stores.redis",
    "fastmcp_tasks.stores.sqlite",
    "fastmcp_tasks.tool",
    "fastmcp_tasks.transitions",
    "fastmcp_tasks.validation",
}


def test_logger_names_are_kept() -> None:
    import re

    root = Path(__file__).parent.parent / "fastmcp_tasks"
    found = {
        name
        for path in root.rglob("*.py")
        for name in re.findall(r'getLogger\(\s*"([^"]+)"\s*\)', path.read_text())
    }
    assert found == LOGGER_NAMES
