"""Operators' view: a span per task run, metrics, a log line per transition."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fastmcp_tasks.server.observability import fingerprint
from tests.private_postgres import shared_schema
from tests.servers import make_server
from tests.spawn import fresh_interpreter
from tests.wire import connect

pytestmark = pytest.mark.anyio

SPANS = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def sdk() -> None:
    """Install an OpenTelemetry SDK once (the global providers can be set only once)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SPANS))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))


def metric_points(name: str) -> list:
    data = READER.get_metrics_data()
    points = []
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    points.extend(metric.data.data_points)
    return points


async def test_task_runs_are_spans_metrics_and_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="fastmcp_tasks.transitions")
    mcp, _ = make_server()
    async with connect(mcp, "memory") as wire:
        created = await wire.call_tool("echo", {"text": "traced"})
        await wire.wait(created["taskId"])
        failed = await wire.call_tool("protocol_error")
        await wire.wait(failed["taskId"])
    task_spans = [s for s in SPANS.get_finished_spans() if s.name.startswith("task ")]
    by_id = {s.attributes["mcp.task.id"]: s for s in task_spans}
    # no authentication: the id is the task's credential, so only its fingerprint is shown
    assert created["taskId"] not in by_id
    span = by_id[fingerprint(created["taskId"])]
    assert span.name == "task echo"
    assert span.attributes["mcp.tool.name"] == "echo"
    assert span.attributes["mcp.task.attempt"] == 1
    assert span.attributes["mcp.task.status"] == "completed"
    assert by_id[fingerprint(failed["taskId"])].attributes["mcp.task.status"] == "failed"
    finished = {
        p.attributes["status"]: p.value
        for p in metric_points("fastmcp_tasks.tasks.finished")
        if p.attributes.get("tool") in ("echo", "protocol_error")
    }
    assert finished.get("completed", 0) >= 1 and finished.get("failed", 0) >= 1
    made = metric_points("fastmcp_tasks.tasks.created")
    assert sum(p.value for p in made if p.attributes["tool"] in ("echo", "protocol_error")) >= 2
    assert metric_points("fastmcp_tasks.task.duration")
    lines = [r for r in caplog.records if r.name == "fastmcp_tasks.transitions"]
    shown = fingerprint(created["taskId"])
    mine = [(r.status, r.task_id) for r in lines if r.task_id == shown]
    assert mine == [("working", shown), ("completed", shown)]
    assert not any(created["taskId"] in r.getMessage() for r in caplog.records)
    assert len(shown) == 13 and shown != fingerprint(failed["taskId"])


async def test_with_a_tracer_provider_a_poll_keeps_its_request_span() -> None:
    """The poll lane (`server.poll_lane`) stands aside while spans can be recorded: every
    `tasks/get` still gets FastMCP's SERVER span, over the wire as in memory."""
    mcp, _ = make_server()
    for transport in ("memory", "http"):
        async with connect(mcp, transport) as wire:
            created = await wire.call_tool("echo", {"text": "polled"})
            before = len(SPANS.get_finished_spans())
            await wire.wait(created["taskId"])
            polls = len(wire.sent) - 1
            spans = SPANS.get_finished_spans()[before:]
        server_spans = [
            s for s in spans if s.kind == trace.SpanKind.SERVER and s.name.startswith("tasks/get")
        ]
        assert polls >= 1 and len(server_spans) == polls, (transport, polls, server_spans)


async def test_a_span_names_its_store_without_the_password() -> None:
    async with shared_schema() as url:
        schema = url.rpartition("schema=")[2]
        secret_url = url.replace("postgres@", "postgres:s3cretpw@")  # trust auth ignores it
        mcp, _ = make_server(url=secret_url)
        async with connect(mcp, "memory") as wire:
            created = await wire.call_tool("echo", {"text": "where"})
            await wire.wait(created["taskId"])
    span = next(
        s
        for s in SPANS.get_finished_spans()
        if s.attributes.get("mcp.task.id") == fingerprint(created["taskId"])
    )
    host = url.partition("postgres@")[2].partition("?")[0]
    assert span.attributes["fastmcp_tasks.store"] == (
        f"postgresql://postgres:***@{host} (schema {schema})"
    )
    assert not any("s3cretpw" in str(value) for value in span.attributes.values())


#: Run by a fresh interpreter: the module's fixture installs an SDK in this one.
WITHOUT_A_PROVIDER = """
from fastmcp.telemetry import get_tracer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from fastmcp_tasks.server.observability import task_span, tracing_installed

assert not tracing_installed()
caller = NonRecordingSpan(SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(1)))
for current in (trace.INVALID_SPAN, caller):
    with trace.use_span(current):
        with get_tracer().start_as_current_span("task echo"):  # what the API would do
            expected = trace.get_current_span().get_span_context()
        with task_span("a-task-id", "echo", 1, "sqlite") as span:
            inside = trace.get_current_span().get_span_context()
            span.set_attribute("mcp.task.status", "completed")
    assert inside == expected == current.get_span_context(), (inside, expected)
# a span recording in a provider of the application's own: the run's attributes stay off it
mine = TracerProvider().get_tracer("app")
with mine.start_as_current_span("request") as request:
    with task_span("a-task-id", "echo", 1) as span:
        span.set_attribute("mcp.task.status", "completed")
    assert "mcp.task.status" not in request.attributes
    assert span.get_span_context() == request.get_span_context()
print("same")
"""


def test_without_a_tracer_provider_a_run_carries_the_span_the_api_would_give_it() -> None:
    """No SDK installed: `task_span` makes no span, and the run sees the span context the
    API's own no-op span would have given it (a caller's, propagated; or none)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with fresh_interpreter():  # not a fork of this process, which has an SDK installed
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_A_PROVIDER],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0 and done.stdout.strip() == "same", done.stderr
