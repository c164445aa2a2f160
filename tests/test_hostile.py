"""Hostile input: property-based fuzzing of the task methods against a live server.

Hypothesis generates `tasks/get`, `tasks/update`, `tasks/cancel`, `subscriptions/listen`
and `tools/call` requests with arbitrary params (missing, extra and mistyped fields, 100 KB
strings, 200-level nesting, lone surrogates and control characters, malformed `_meta`
capability blocks, forged `resultType`, garbage `inputResponses`) and sends them to one
live server per test, in memory and over Streamable HTTP on the memory store, and in memory
on the SQLite and Redis stores; raw HTTP bodies (invalid JSON, non-UTF-8, batches) are sent
with httpx. Properties, for every request:

- the answer is a schema-valid result or a well-formed JSON-RPC error (integer code, string
  message), never -32603 (an unexpected exception), a hang, or an HTTP 5xx;
- a task method succeeds only for a task that exists, and a `tasks/get` of a pre-existing
  task returns exactly what it returned before the fuzzing (`ttlMs` grows while active);
- an invalid answer for the parked task's outstanding key is never acknowledged;
- a listen acknowledges only existing ids, and ends at once when it has nothing to follow.

After the fuzzing the server still answers a healthy opted-in `tools/call` of `echo` with a
task that completes, the tasks the fuzzer created finish, and the pre-existing tasks (one
completed, one running, one cancelled, one parked in `input_required`) are unchanged.

Hypothesis drives the examples from a worker thread (`anyio.to_thread`); each example runs
on the test's event loop through `anyio.from_thread.run`, so the server and its connection
live for the whole test, not per example.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Annotated, Any

import anyio
import httpx
import pytest
from fastmcp import Client, Context
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import encode_header_value
from pydantic import Field

from fastmcp_tasks.wire.names import METHOD_LISTEN
from tests.servers import make_server
from tests.test_store_contract import STORE_FACTORIES
from tests.wire import MODERN, TASKS, http_server, validate, validate_result

pytestmark = pytest.mark.anyio

CAPS = "io.modelcontextprotocol/clientCapabilities"
VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
OPT_IN = {"elicitation": {}, "extensions": {TASKS: {}}}
INTERNAL_ERROR = -32603
HELD = "held"  # the running bystander's blocker key: never released during a test
#: the `transport` variants: in memory and over HTTP on the memory store, and in memory on
#: the durable stores (their stored text takes whatever the fuzzer sends, lone surrogates too)
EXAMPLES = {
    "memory": 150,
    "http": 50,
    "memory+sqlite": 50,
    "memory+redis": 50,
    "memory+postgres": 50,
}


@pytest.fixture(params=list(EXAMPLES))
def transport(request: pytest.FixtureRequest) -> str:
    """Overrides conftest's: each test here also runs on the SQLite, Redis and PostgreSQL stores."""
    return str(request.param)


ANSWER_WITHIN = 5.0  # seconds any single request may take
LISTEN_GRACE = 0.1  # seconds an acked listen with nothing to follow may take to end

SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


# --- strategies ---------------------------------------------------------------------------


def _nest(depth: int, kind: str) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        if kind == "list" or (kind == "mixed" and level % 2):
            value = [value]
        else:
            value = {"k": value}
    return value


SPECIAL = st.sampled_from(
    [
        "",
        " ",
        "null",
        "0",
        "-1",
        "../../etc/passwd",
        "%00",
        "=?base64?AAAA?=",
        "=?base64?!!?=",
        "\u202eevil",
        "a\r\nX-Injected: 1",
        TASKS,
        "tasks/get",
    ]
)
WEIRD = st.text(st.characters(categories=["Cc", "Cs", "Cf", "Co", "Zl", "Zp"]), max_size=8)


class Huge(str):
    """A 100 KB string that Hypothesis reports in a few characters."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Huge({self[0]!r} * {len(self)})"


HUGE = st.sampled_from(
    [Huge(c * n) for c, n in (("x", 100_000), ("é", 50_000), ("🙂", 25_000), ("\ud800", 20_000))]
    + [Huge("\x00" * 20_000)]
)
TEXT = st.one_of(st.text(max_size=24), WEIRD, SPECIAL, HUGE)
KEYS = st.one_of(st.text(max_size=12), WEIRD, SPECIAL)
BIG_INTS = st.sampled_from([2**53 + 1, 2**63, -(2**63) - 1, 2**64, 10**400, -(10**400)])
LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    BIG_INTS,
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
DEEP = st.builds(
    _nest, st.one_of(st.just(200), st.integers(1, 200)), st.sampled_from(["list", "dict", "mixed"])
)
JSONV = st.recursive(
    LEAF,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
GARBAGE = st.one_of(JSONV, DEEP)
NON_OBJECT = GARBAGE.filter(lambda v: not isinstance(v, dict))
RESULT_TYPES = st.one_of(
    st.sampled_from(["task", "complete", "input_required", "incomplete", ""]), GARBAGE
)
EXTRA_FIELDS = st.dictionaries(KEYS.filter(lambda k: k != "_meta"), GARBAGE, max_size=3)


def _meta(transport: str) -> st.SearchStrategy[tuple[Any, ...]]:
    """How `_meta` is built: ("caps", value, extra) over the envelope, or ("raw", value)."""
    raw = GARBAGE if transport == "http" else st.dictionaries(KEYS, GARBAGE, max_size=3)
    bad_caps = st.one_of(
        NON_OBJECT,  # clientCapabilities a string, a list, ...
        st.builds(lambda e: {"extensions": e}, NON_OBJECT),  # extensions a list, ...
        st.builds(lambda v: {"extensions": {TASKS: v}}, NON_OBJECT),  # tasks key a non-object
        st.builds(lambda x: {"extensions": {TASKS: {}, **x}}, EXTRA_FIELDS),
        st.builds(lambda x: {"elicitation": {}, **x}, EXTRA_FIELDS),
        st.just({}),
    )
    extra = st.one_of(
        st.just({}),
        EXTRA_FIELDS,
        st.builds(lambda v: {VERSION: v}, st.one_of(GARBAGE, st.just("2025-11-25"))),
        st.builds(lambda v: {CLIENT_INFO: v}, GARBAGE),
    )
    good = st.builds(lambda x: ("caps", OPT_IN, x), st.just({}) | EXTRA_FIELDS)
    bad = st.one_of(
        st.builds(lambda c, x: ("caps", c, x), bad_caps, extra),
        st.builds(lambda x: ("caps", OPT_IN, x), extra),
        st.builds(lambda v: ("raw", v), raw),  # the SDK client sends an object `_meta` only
        st.just(("drop",)),
    )
    return st.integers(0, 9).flatmap(lambda i: good if i < 6 else bad)


META = {transport: _meta(transport) for transport in ("memory", "http")}
NAME_HEADER = st.one_of(
    st.just("match"), st.just("match"), st.just("absent"), st.text(max_size=12), SPECIAL
)


@dataclass(frozen=True)
class Hostile:
    """One generated request."""

    method: str
    params: Any
    meta: tuple[Any, ...] = ("caps", OPT_IN, {})
    name_header: str = "match"


def opts_in(meta: tuple[Any, ...]) -> bool:
    """Whether a `_meta` spec declares the tasks extension (a valid per-request opt-in)."""
    if meta[0] != "caps" or not isinstance(meta[1], dict):
        return False
    extensions = meta[1].get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS), dict)


def _mutations(ids: list[str]) -> st.SearchStrategy[str]:
    """Near misses of real ids, never a real id itself."""
    real = st.sampled_from(ids)
    return st.one_of(
        real.map(lambda i: i[:-1]),
        real.map(lambda i: i + "A"),
        real.map(lambda i: " " + i),
        real.map(str.swapcase),
        real.map(lambda i: i + "\x00"),
        real.map(lambda i: i.replace("-", "\u2010").replace("_", "\uff3f")),
    ).filter(lambda i: i not in ids)


def _task_id(ids: list[str]) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(ids), st.sampled_from(ids), _mutations(ids), TEXT, GARBAGE)


def _params(
    transport: str, required: dict[str, Any], optional: dict[str, Any]
) -> st.SearchStrategy[Any]:
    """Params objects with forged and extra fields; over HTTP, now and then not an object."""
    forged = {
        "resultType": RESULT_TYPES,
        "inputResponses": GARBAGE,
        "requestState": GARBAGE,
        "task": GARBAGE,
    }
    for name in (*required, *optional):
        forged.pop(name, None)
    rarely_forged = st.one_of(st.just({}), st.just({}), st.fixed_dictionaries({}, optional=forged))
    objects = st.builds(
        lambda fields, more, extra: {**extra, **more, **fields},
        st.fixed_dictionaries(required, optional=optional),
        rarely_forged,  # most requests get past the params check, to reach the handlers
        EXTRA_FIELDS,
    )
    if transport == "memory":  # the SDK client sends objects only
        return objects
    return st.integers(0, 19).flatmap(lambda i: objects if i else NON_OBJECT)


def _request(live: Live, method: str, params: st.SearchStrategy[Any]) -> st.SearchStrategy[Hostile]:
    return st.builds(Hostile, st.just(method), params, META[live.transport], NAME_HEADER)


def _answer() -> st.SearchStrategy[Any]:
    content = st.one_of(
        GARBAGE,
        st.dictionaries(
            st.one_of(st.just("value"), st.just("value"), KEYS),
            st.one_of(GARBAGE, BIG_INTS, st.integers(-5, 15), st.floats()),
            max_size=2,
        ),
    )
    shaped = st.fixed_dictionaries(
        {"action": st.one_of(st.sampled_from(["accept", "decline", "cancel", "ACCEPT"]), GARBAGE)},
        optional={"content": content, "_meta": GARBAGE},
    )
    return st.one_of(shaped, shaped, GARBAGE)


def answers_parked(answer: Any) -> bool:
    """Whether `answer` validly answers the parked elicitation (`value`: integer in 0..10).

    Other fields are allowed: the requested schema does not say `additionalProperties: false`.
    """
    if not isinstance(answer, dict):
        return False
    action = answer.get("action")
    if isinstance(action, str) and action in ("decline", "cancel"):
        return True
    if action != "accept":
        return False
    content = answer.get("content", {})
    if not isinstance(content, dict) or "value" not in content:
        return False
    value = content["value"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 <= value <= 10 and (isinstance(value, int) or float(value).is_integer())


# --- the live server ----------------------------------------------------------------------


@dataclass
class Outcome:
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    http_status: int | None = None
    frames: list[dict[str, Any]] = field(default_factory=list)
    acked: bool = False  # a listen acked and was still open when we stopped waiting
    hung: bool = False  # no answer (nor ack) within ANSWER_WITHIN


@dataclass(frozen=True)
class Int:
    value: Annotated[int, Field(ge=0, le=10)]


def hostile_server(store: Any = None) -> tuple[Any, Any]:
    # no shutdown grace: the held bystander never ends, and waiting for it tests nothing here
    options = {} if store is None else {"store": store, "shutdown_grace": timedelta(0)}
    mcp, probes = make_server(**options)

    @mcp.tool(task=True)
    async def asker(ctx: Context) -> str:
        answer = await ctx.elicit("Pick a number", Int)
        return str(answer.action)

    return mcp, probes


@dataclass
class Live:
    """One live server, one connection, the bystander tasks, and every check."""

    transport: str
    probes: Any
    send_raw: Callable[..., Any]
    bystanders: dict[str, dict[str, Any]] = field(default_factory=dict)  # role -> tasks/get
    parked_key: str = ""
    created: list[tuple[str, Any]] = field(default_factory=list)  # (taskId, arguments)

    @property
    def ids(self) -> dict[str, str]:
        return {role: task["taskId"] for role, task in self.bystanders.items()}

    @property
    def known(self) -> set[str]:
        return set(self.ids.values()) | {task_id for task_id, _ in self.created}

    async def send(self, request: Hostile) -> Outcome:
        """Send one request; check the answer's shape, whatever the request."""
        params = request.params if isinstance(request.params, dict) else {}
        stays_open = request.method == METHOD_LISTEN and may_stay_open(
            params.get("notifications"), self
        )
        outcome: Outcome = await self.send_raw(request, 0 if stays_open else LISTEN_GRACE)
        where = f"{request.method} over {self.transport}"
        assert not outcome.hung, f"{where}: no answer within {ANSWER_WITHIN}s"
        if outcome.http_status is not None:
            assert outcome.http_status < 500, f"{where}: HTTP {outcome.http_status}"
        if outcome.error is not None:
            validate("Error", outcome.error)
            assert isinstance(outcome.error["code"], int)
            assert isinstance(outcome.error["message"], str)
            if outcome.http_status is not None:
                assert outcome.http_status in (200, 400, 401, 403, 404, 405, 406, 413, 415, 422)
        elif outcome.result is not None:
            if outcome.http_status is not None:
                assert outcome.http_status == 200
            validate("Result", outcome.result)
            if request.method != METHOD_LISTEN:
                validate_result(request.method, outcome.result)
        else:
            assert outcome.acked, f"{where}: neither a result nor an error"
        return outcome

    async def healthy(self) -> None:
        arguments = {"text": "still alive"}
        outcome = await self.send(Hostile("tools/call", {"name": "echo", "arguments": arguments}))
        assert outcome.result is not None, outcome.error
        assert outcome.result["resultType"] == "task"
        done = await self.settle(outcome.result["taskId"])
        assert done["status"] == "completed"
        assert done["result"]["content"] == [{"type": "text", "text": "still alive"}]

    async def get(self, task_id: str) -> dict[str, Any]:
        outcome = await self.send(Hostile("tasks/get", {"taskId": task_id}))
        assert outcome.result is not None, outcome.error
        return outcome.result

    async def settle(self, task_id: str, statuses: frozenset[str] | None = None) -> dict[str, Any]:
        wanted = statuses or frozenset({"completed", "failed", "cancelled"})
        with anyio.fail_after(ANSWER_WITHIN):
            while (task := await self.get(task_id))["status"] not in wanted:  # noqa: ASYNC110
                await anyio.sleep(0.005)
        return task

    async def start(self) -> None:
        async def create(name: str, arguments: dict[str, Any]) -> str:
            outcome = await self.send(Hostile("tools/call", {"name": name, "arguments": arguments}))
            assert outcome.result is not None and outcome.result["resultType"] == "task"
            return str(outcome.result["taskId"])

        completed = await create("echo", {"text": "bystander"})
        await self.settle(completed)
        running = await create("blocker", {"key": HELD})
        await self.probes.event("started", HELD).wait()
        cancelled = await create("blocker", {"key": "doomed"})
        await self.probes.event("started", "doomed").wait()
        assert (await self.send(Hostile("tasks/cancel", {"taskId": cancelled}))).result
        await self.settle(cancelled)
        parked = await create("asker", {})
        parked_task = await self.settle(parked, frozenset({"input_required"}))
        (self.parked_key,) = parked_task["inputRequests"]
        for role, task_id in dict(
            completed=completed, running=running, cancelled=cancelled, parked=parked
        ).items():
            self.bystanders[role] = await self.get(task_id)

    def same_as_before(self, task: dict[str, Any]) -> None:
        """`task` (a tasks/get answer or a pushed frame) equals its bystander's snapshot."""
        (role,) = (r for r, t in self.bystanders.items() if t["taskId"] == task["taskId"])
        before = self.bystanders[role]
        drop = {"resultType", "_meta"} | ({"ttlMs"} if role in ("running", "parked") else set())
        assert {k: v for k, v in task.items() if k not in drop} == {
            k: v for k, v in before.items() if k not in drop
        }, f"the {role} task changed"
        assert task["ttlMs"] >= before["ttlMs"]

    def release(self) -> None:
        for key in self.probes.runs:
            if key != HELD:
                self.probes.event("release", key).set()

    async def finish(self) -> None:
        """After the fuzzing: healthy, created tasks finish, bystanders unchanged."""
        self.release()
        await self.healthy()
        for task_id, arguments in self.created:
            if not (isinstance(arguments, dict) and arguments.get("key") == HELD):
                await self.settle(task_id)
        for task in self.bystanders.values():
            self.same_as_before(await self.get(task["taskId"]))
        assert not self.probes.event("cancelled", HELD).is_set()

    # -- the per-method properties ------------------------------------------------

    async def exercise(self, request: Hostile) -> None:
        outcome = await self.send(request)
        params = request.params if isinstance(request.params, dict) else {}
        if outcome.error is not None:
            assert outcome.error["code"] != INTERNAL_ERROR, f"unexpected exception: {outcome.error}"
        if request.method == "tools/call":
            self.release()
            if outcome.result is not None:
                assert outcome.result["resultType"] in ("complete", "task")
                if outcome.result["resultType"] == "task":
                    assert outcome.result["taskId"] not in self.known
                    self.created.append((outcome.result["taskId"], params.get("arguments")))
        elif request.method == METHOD_LISTEN:
            self.check_listen(request, outcome)
        elif outcome.result is not None:  # tasks/get, tasks/update, tasks/cancel
            task_id = params.get("taskId")
            assert isinstance(task_id, str) and task_id in self.known, (
                f"{request.method} succeeded for unknown {task_id!r}"
            )
            if request.method == "tasks/get" and task_id in self.ids.values():
                self.same_as_before(outcome.result)
            if request.method == "tasks/cancel":
                assert task_id not in _ids(self, "running", "parked"), "an active task cancelled"
            if request.method == "tasks/update" and task_id == self.ids["parked"]:
                responses = params.get("inputResponses")
                if isinstance(responses, dict):
                    assert self.parked_key not in responses, "an invalid answer was acknowledged"

    def check_listen(self, request: Hostile, outcome: Outcome) -> None:
        params = request.params if isinstance(request.params, dict) else {}
        notifications = params.get("notifications")
        requested = notifications.get("taskIds") if isinstance(notifications, dict) else None
        for frame in outcome.frames:
            assert frame.get("params", {}).get("_meta", {}).get(SUBSCRIPTION) is not None
            if frame.get("method") == "notifications/subscriptions/acknowledged":
                acked = frame["params"]["notifications"].get("taskIds")
                if isinstance(requested, list) and all(isinstance(i, str) for i in requested):
                    assert acked == [i for i in dict.fromkeys(requested) if i in self.known]
            elif frame.get("method") == "notifications/tasks":
                validate("TaskStatusNotification", {"jsonrpc": "2.0", **frame})
                task = {k: v for k, v in frame["params"].items() if k != "_meta"}
                if task["taskId"] in self.ids.values():
                    self.same_as_before(task)
        if not may_stay_open(notifications, self):
            assert not outcome.acked, "an acked listen with nothing active to follow hung"


def may_stay_open(notifications: Any, live: Live) -> bool:
    """A listen that legitimately stays open: it follows an active task, or core kinds."""
    if not isinstance(notifications, dict) or set(notifications) != {"taskIds"}:
        return True
    ids = notifications["taskIds"]
    active = {live.ids["running"], live.ids["parked"]}
    return isinstance(ids, list) and any(isinstance(i, str) and i in active for i in ids)


# --- transports ---------------------------------------------------------------------------


def _build_meta(spec: tuple[Any, ...], envelope: dict[str, Any]) -> Any:
    if spec[0] == "raw":
        return spec[1]
    if spec[0] == "drop":
        return dict(envelope)
    _, caps, extra = spec
    return {**envelope, CAPS: caps, **extra}


def _with_meta(request: Hostile, envelope: dict[str, Any]) -> Any:
    if not isinstance(request.params, dict):
        return request.params
    return {**request.params, "_meta": _build_meta(request.meta, envelope)}


def _name_header(request: Hostile) -> str | None:
    key = "name" if request.method == "tools/call" else "taskId"
    named = request.params.get(key) if isinstance(request.params, dict) else None
    if request.name_header == "absent" or request.method == METHOD_LISTEN:
        return None
    value = named if request.name_header == "match" else request.name_header
    if not isinstance(value, str):
        return None
    try:
        encoded = encode_header_value(value)
    except UnicodeEncodeError:  # lone surrogates: the SDK client cannot send those at all
        payload = base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()
        encoded = f"=?base64?{payload}?="
    return encoded if len(encoded) <= 4096 else None  # beyond any HTTP server's header limit


@asynccontextmanager
async def live_server(variant: str) -> AsyncIterator[Live]:
    transport, _, store_kind = variant.partition("+")
    store = None if not store_kind else STORE_FACTORIES[store_kind]()
    mcp, probes = hostile_server(store)
    if transport == "memory":
        acks: dict[str, dict[str, Any]] = {}
        wakes: dict[str, anyio.Event] = {}

        async def on_message(message: Any) -> None:
            if getattr(message, "method", None) == "notifications/subscriptions/acknowledged":
                params = message.params.model_dump(by_alias=True, exclude_none=True)
                key = str(params.get("_meta", {}).get(SUBSCRIPTION))
                acks[key] = {"method": message.method, "params": params}
                if key in wakes:
                    wakes[key].set()

        async with Client(mcp, message_handler=on_message) as client:
            live = Live(transport, probes, memory_sender(client, acks, wakes))
            await live.start()
            yield live
    else:
        async with http_server(mcp) as url, httpx.AsyncClient(timeout=ANSWER_WITHIN) as http:
            live = Live(transport, probes, http_sender(http, url))
            await live.start()
            yield live


def memory_sender(
    client: Client, acks: dict[str, dict[str, Any]], wakes: dict[str, anyio.Event]
) -> Callable[..., Any]:
    session = client.session
    counter = 0

    async def send(request: Hostile, grace: float = LISTEN_GRACE) -> Outcome:
        nonlocal counter
        counter += 1
        data: dict[str, Any] = {"method": request.method, "params": {}}
        opts: dict[str, Any] = {"request_id": f"H{counter}"}
        session._stamp(data, opts)
        envelope = {k: v for k, v in data["params"]["_meta"].items() if k != CAPS}
        params = _with_meta(request, envelope)
        outcome = Outcome()
        key = f"H{counter}"
        done = anyio.Event()
        wake = wakes[key] = anyio.Event()  # set by the answer or by a listen's ack

        async def drive() -> None:
            try:
                outcome.result = await session._dispatcher.send_raw_request(
                    request.method, params, opts
                )
            except MCPError as exc:
                outcome.error = exc.error.model_dump(exclude_none=True)
            finally:
                done.set()
                wake.set()

        try:
            await _await_answer(drive, done, wake, outcome, grace)
        finally:
            del wakes[key]
        if key in acks:
            outcome.frames.insert(0, acks.pop(key))
        return outcome

    return send


async def _await_answer(
    drive: Callable[[], Any], done: anyio.Event, wake: anyio.Event, outcome: Outcome, grace: float
) -> None:
    """Run `drive` until it answers; an acked listen gets `grace` seconds more to end."""
    async with anyio.create_task_group() as group:
        group.start_soon(drive)
        with anyio.move_on_after(ANSWER_WITHIN):
            await wake.wait()
        if wake.is_set() and not done.is_set():  # acked, still open
            with anyio.move_on_after(grace):
                await done.wait()
            outcome.acked = not done.is_set()
        outcome.hung = not done.is_set() and not outcome.acked
        group.cancel_scope.cancel()


def http_sender(http: httpx.AsyncClient, url: str) -> Callable[..., Any]:
    counter = 0
    envelope = {VERSION: MODERN, CLIENT_INFO: {"name": "hostile", "version": "1"}}

    async def send(request: Hostile, grace: float = LISTEN_GRACE) -> Outcome:
        nonlocal counter
        counter += 1
        body = {
            "jsonrpc": "2.0",
            "id": counter,
            "method": request.method,
            "params": _with_meta(request, envelope),
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": request.method,
        }
        if (name := _name_header(request)) is not None:
            headers["Mcp-Name"] = name
        content = json.dumps(body, ensure_ascii=True, allow_nan=False).encode()
        outcome = Outcome()
        done = anyio.Event()
        wake = anyio.Event()  # set by the answer or by a listen's first frame

        async def drive() -> None:
            async with http.stream("POST", url, content=content, headers=headers) as response:
                outcome.http_status = response.status_code
                if response.headers.get("content-type", "").startswith("text/event-stream"):
                    async for line in response.aiter_lines():
                        if line.startswith("data:") and line[5:].strip():
                            message = json.loads(line[5:])
                            if "result" in message or "error" in message:
                                take(message)
                                break
                            outcome.frames.append(message)
                            wake.set()
                else:
                    raw = await response.aread()
                    take(json.loads(raw) if raw else {})
            done.set()
            wake.set()

        def take(message: dict[str, Any]) -> None:
            assert message.get("jsonrpc") == "2.0" and message.get("id") in (counter, None)
            outcome.result = message.get("result")
            outcome.error = message.get("error")

        await _await_answer(drive, done, wake, outcome, grace)
        return outcome

    return send


# --- the fuzz tests ---------------------------------------------------------------------


class _Errors(logging.Handler):
    """Collects the ERROR records of the `fastmcp_tasks` loggers."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        # A tool raising is logged as core logs it ("Error calling tool ..."): that is the
        # tool failing (the `crash` tool), not the package failing quietly.
        if record.name == "fastmcp_tasks.execution" and record.msg == "Error calling tool %r":
            return
        self.records.append(record)


async def fuzz(transport: str, strategy_for: Callable[[Live], st.SearchStrategy[Hostile]]) -> None:
    errors = _Errors()
    package_logger = logging.getLogger("fastmcp_tasks")
    package_logger.addHandler(errors)
    try:
        async with live_server(transport) as live:

            @settings(SETTINGS, max_examples=EXAMPLES[transport])
            @given(strategy_for(live))
            def prop(request: Hostile) -> None:
                anyio.from_thread.run(live.exercise, request)

            await anyio.to_thread.run_sync(prop)
            await live.finish()
    finally:
        package_logger.removeHandler(errors)
    assert not errors.records, [r.getMessage() for r in errors.records]  # nothing failed quietly


def _ids(live: Live, *roles: str) -> list[str]:
    return [live.ids[role] for role in roles]


async def test_tasks_get_survives_hostile_params(transport: str) -> None:
    def strategy(live: Live) -> st.SearchStrategy[Hostile]:
        ids = list(live.ids.values())
        return _request(live, "tasks/get", _params(live.transport, {}, {"taskId": _task_id(ids)}))

    await fuzz(transport, strategy)


async def test_tasks_cancel_survives_hostile_params(transport: str) -> None:
    def strategy(live: Live) -> st.SearchStrategy[Hostile]:
        finished = _ids(live, "completed", "cancelled")  # cancelling those is an ack, no change
        task_ids = st.one_of(_task_id(finished), _mutations(list(live.ids.values())))
        refused = st.builds(  # an active task's id in a request that must not reach the handler
            lambda task_id, meta: Hostile("tasks/cancel", {"taskId": task_id}, meta),
            st.sampled_from(_ids(live, "running", "parked")),
            META[live.transport].filter(lambda meta: not opts_in(meta)),
        )
        return (
            _request(live, "tasks/cancel", _params(live.transport, {}, {"taskId": task_ids}))
            | refused
        )

    await fuzz(transport, strategy)


async def test_tasks_update_survives_hostile_params(transport: str) -> None:
    def strategy(live: Live) -> st.SearchStrategy[Hostile]:
        ids = list(live.ids.values())
        accepted = st.builds(
            lambda value: {"action": "accept", "content": {"value": value}},
            st.one_of(BIG_INTS, st.integers(), st.floats(), GARBAGE),
        )
        invalid_for_parked = st.one_of(accepted, _answer()).filter(lambda a: not answers_parked(a))
        keyed = st.builds(
            lambda mine, others: {**others, **({live.parked_key: mine[0]} if mine else {})},
            st.one_of(st.just(()), st.tuples(invalid_for_parked)),
            st.dictionaries(KEYS, _answer(), max_size=2),
        )
        responses = st.one_of(keyed, keyed, GARBAGE)
        task_ids = st.one_of(st.just(live.ids["parked"]), _task_id(ids))
        return _request(
            live,
            "tasks/update",
            _params(live.transport, {}, {"taskId": task_ids, "inputResponses": responses}),
        )

    await fuzz(transport, strategy)


async def test_listen_survives_hostile_params(transport: str) -> None:
    def strategy(live: Live) -> st.SearchStrategy[Hostile]:
        ids = _ids(live, "completed", "cancelled")
        every = list(live.ids.values())
        task_ids = st.one_of(
            st.lists(st.one_of(st.sampled_from(ids), _mutations(every), TEXT), max_size=4),
            st.lists(st.sampled_from(every), min_size=1, max_size=3),
            GARBAGE,
        )
        notifications = st.one_of(
            st.fixed_dictionaries({"taskIds": task_ids}),
            st.fixed_dictionaries({"taskIds": task_ids}),
            st.fixed_dictionaries({}, optional={"taskIds": task_ids, "toolsListChanged": GARBAGE}),
            GARBAGE,
        )
        params = _params(live.transport, {"notifications": notifications}, {})
        return _request(live, METHOD_LISTEN, params)

    await fuzz(transport, strategy)


async def test_tools_call_survives_hostile_params(transport: str) -> None:
    tools = ["echo", "blocker", "required_job", "never_task", "plain", "tool_error", "crash"]

    def strategy(live: Live) -> st.SearchStrategy[Hostile]:
        names = st.one_of(st.sampled_from([*tools, "protocol_error", "nope"]), TEXT, GARBAGE)
        arguments = st.one_of(
            st.dictionaries(
                st.one_of(st.sampled_from(["text", "key", "n", "x"]), KEYS), GARBAGE, max_size=3
            ),
            st.builds(lambda t: {"text": t}, TEXT),
            GARBAGE,
        )
        responses = st.one_of(GARBAGE, st.dictionaries(KEYS, _answer(), max_size=2))
        return _request(
            live,
            "tools/call",
            _params(
                live.transport,
                {},
                {
                    "name": names,
                    "arguments": arguments,
                    "inputResponses": responses,
                    "resultType": RESULT_TYPES,
                },
            ),
        )

    await fuzz(transport, strategy)


# --- raw HTTP bodies ----------------------------------------------------------------------


def _request_object(method: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {"taskId": "x", "_meta": {VERSION: MODERN, CAPS: OPT_IN}},
    }


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=True, allow_nan=False).encode()


_GOOD = _dumps(_request_object("tasks/get"))
INVALID_BODIES = st.one_of(
    st.binary(max_size=200).filter(lambda b: not _parses_as_object(b)),
    st.binary(min_size=1, max_size=8).map(
        lambda junk: _GOOD.replace(b'"x"', b'"' + bytes(0x80 | (c & 0x7F) for c in junk) + b'"')
    ),  # non-UTF-8 inside a string
    st.integers(1, len(_GOOD) - 1).map(lambda n: _GOOD[:n]),  # truncated
    st.sampled_from(
        [
            b"",
            b"\xff\xfe{\x00}",
            b"[" * 5_000 + b"]" * 5_000,
            b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
            _GOOD.replace(b'"x"', b"NaN"),
            _GOOD.replace(b'"x"', b"Infinity"),
            _GOOD.replace(b'"x"', b'"\\ud800"'),
            b"[]",
            b"null",
            b"1e999999",
            b'"' + b"x" * 300_000 + b'"',
        ]
    ),
    st.lists(
        st.sampled_from(["tasks/get", "tasks/cancel", "tools/call", "ping"]).map(_request_object),
        min_size=1,
        max_size=3,
    ).map(_dumps),  # a JSON-RPC batch
    NON_OBJECT.map(_dumps),
)
ODD_OBJECTS = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.one_of(st.just("2.0"), st.just("1.0"), GARBAGE),
        "id": st.one_of(st.integers(), st.text(max_size=8), GARBAGE),
        "method": st.one_of(st.sampled_from(["tasks/get", "tasks/update", "tools/call"]), TEXT),
        "params": st.one_of(st.just({"taskId": "x"}), GARBAGE),
        "result": GARBAGE,
        "error": GARBAGE,
    },
).map(_dumps)


def _parses_as_object(body: bytes) -> bool:
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


def _check_raw(status: int, body: bytes, *, invalid: bool) -> None:
    assert status < 500, f"HTTP {status}: {body[:300]!r}"
    if invalid:
        assert 400 <= status < 500, f"HTTP {status} for an invalid body: {body[:300]!r}"
    if status == 202 and not body:
        return  # a notification (an object without id) is accepted without a body
    if body.startswith(b"event:") or body.startswith(b"data:"):
        lines = [line[5:] for line in body.splitlines() if line.startswith(b"data:")]
        messages = [json.loads(line) for line in lines if line.strip()]
    else:
        messages = [json.loads(body)]
    answers = [m for m in messages if "result" in m or "error" in m]
    assert answers, f"HTTP {status} without a JSON-RPC answer: {body[:300]!r}"
    for message in answers:
        assert message.get("jsonrpc") == "2.0"
        if status >= 400:
            assert "error" in message, message
        if "error" in message:
            validate("Error", message["error"])


async def test_http_raw_bodies_get_4xx_json_rpc_errors() -> None:
    mcp, _ = hostile_server()
    async with http_server(mcp) as url, httpx.AsyncClient(timeout=ANSWER_WITHIN) as http:

        async def post(body: bytes, invalid: bool, method: str | None) -> None:
            headers = {
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "MCP-Protocol-Version": MODERN,
            }
            if method is not None:
                headers["Mcp-Method"] = method
            with anyio.fail_after(ANSWER_WITHIN):
                response = await http.post(url, content=body, headers=headers)
            _check_raw(response.status_code, response.content, invalid=invalid)

        @settings(SETTINGS, max_examples=120)
        @given(
            st.one_of(
                st.tuples(INVALID_BODIES, st.just(True)), st.tuples(ODD_OBJECTS, st.just(False))
            ),
            st.one_of(
                st.none(),
                st.sampled_from(["tasks/get", "tools/call", METHOD_LISTEN]),
                st.from_regex(r"[!-~]{1,40}", fullmatch=True),  # any legal header value
            ),
        )
        def prop(case: tuple[bytes, bool], method: Any) -> None:
            anyio.from_thread.run(post, case[0], case[1], method)

        await anyio.to_thread.run_sync(prop)
        await Live("http", None, http_sender(http, url)).healthy()


# --- minimal repros of the bugs the fuzzing found -----------------------------------------


async def test_update_with_an_integer_beyond_float_range_is_invalid_params(
    transport: str,
) -> None:
    """inputs.py `_value_problem`: `float(10**400)` raises OverflowError -> -32603."""
    async with live_server(transport) as live:
        parked = live.ids["parked"]
        answer = {"action": "accept", "content": {"value": 10**400}}
        request = Hostile("tasks/update", {"taskId": parked, "inputResponses": {}})
        request.params["inputResponses"][live.parked_key] = answer
        outcome = await live.send(request)
        assert outcome.error is not None and outcome.error["code"] == -32602, outcome.error
        await live.finish()


async def test_update_with_an_unhashable_action_is_invalid_params(transport: str) -> None:
    """inputs.py `answer_problem`: `action not in frozenset` raises TypeError -> -32603."""
    async with live_server(transport) as live:
        parked = live.ids["parked"]
        for action in ([], {}):
            request = Hostile("tasks/update", {"taskId": parked, "inputResponses": {}})
            request.params["inputResponses"][live.parked_key] = {"action": action}
            outcome = await live.send(request)
            assert outcome.error is not None and outcome.error["code"] == -32602, outcome.error
        await live.finish()


async def test_listen_naming_no_existing_task_ends(transport: str) -> None:
    """listen.py `_write` waits for a wake-up that never comes when nothing was acked."""
    async with live_server(transport) as live:
        for task_ids in ([], ["no-such-task"]):
            request = Hostile(METHOD_LISTEN, {"notifications": {"taskIds": task_ids}})
            outcome = await live.send(request)
            assert not outcome.acked, f"listen {task_ids} was acked and never ended"
            assert outcome.result is not None and outcome.result["resultType"] == "complete"
        await live.finish()


def test_the_oracle_matches_the_schema() -> None:
    assert answers_parked({"action": "decline"})
    assert answers_parked({"action": "accept", "content": {"value": 3}})
    assert not answers_parked({"action": "accept", "content": {"value": 11}})
    assert not answers_parked({"action": "accept", "content": {"value": True}})
    assert not answers_parked({"action": "accept"})
    assert not answers_parked({"action": ["decline"]})
    assert not answers_parked({"action": "accept", "content": {"value": 10**400}})
    assert answers_parked({"action": "accept", "content": {"value": 3, "more": [1]}})
    assert not answers_parked({"action": "accept", "content": {"more": 3}})
