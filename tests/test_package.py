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
        "Progress",
        "SQLiteTaskStore",
        "StoreError",
        "TASKS_EXTENSION_ID",
        "TaskLimitExceeded",
        "TaskLog",
        "TaskRecord",
        "TaskStore",
        "TasksError",
        "TasksExtension",
        "ToolTask",
        "__version__",
        "call_tool_task",
        "store_from_url",
        "task_options",
    ]
    for name in fastmcp_tasks.__all__:
        assert hasattr(fastmcp_tasks, name)


def test_unknown_scheme_names_the_supported_ones() -> None:
    with pytest.raises(ValueError, match=r"supported schemes are ") as info:
        TasksExtension("postgres://db/tasks")
    assert isinstance(info.value, ConfigurationError)
    for scheme in SCHEMES:
        assert f"{scheme}://" in str(info.value)
    assert {"memory", "sqlite"} <= set(SCHEMES)
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
    from fastmcp_tasks.extension import TASK_ID_BYTES, new_task_id

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
