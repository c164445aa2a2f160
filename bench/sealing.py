"""What sealing costs: creation and `tasks/get` p50 without a key, with one, and `seal="all"`.

    .venv/bin/python -m bench.sealing                      # memory, sqlite, redis, postgres
    .venv/bin/python -m bench.sealing --stores sqlite --rounds 1000

`TasksExtension(encryption_key=...)` makes the accepting process seal the caller's
access token, HTTP headers and session id into `TaskRecord.context["caller"]` when it
creates a task (`fastmcp_tasks.server.engine.sealed`). The in-memory transport carries
no token and no headers, so the servers here are measured over Streamable HTTP
(`bench.transports.http_transport`) behind a `StaticTokenVerifier`, and every request
carries a bearer token (a token with claims) and ten realistic headers, so the sealed
blob is the size a real caller's is.

Two parts, on every store that answers (Redis at `--redis-url`, PostgreSQL at
`--postgres-url`; a store that does not answer is left out and said so):

- **Latency.** Per store a server without a key, one with a key (the caller sealed) and
  one with `seal="all"` (every payload sealed too), the same no-op tool,
  samples interleaved in a fresh random order each round with a plain synchronous
  `tools/call` to an authenticated server without tasks (each created task is let
  finish, untimed, before the next sample), the servers built in each rotation (a third
  of the rounds each): task-creating `tools/call` p50 and `tasks/get` p50, each as a
  ratio to the sync call of the same run. Every task of a keyed server is checked to
  have its caller sealed.
- **Micro.** `seal_caller` + `open_caller` (AES-GCM `Sealer.seal` + `open` and the
  token's (de)serialisation) of the same kind of caller, in microseconds (timeit), and
  as a ratio to each store's sync p50.

Prints a table; writes bench/results/sealing.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

from fastmcp import FastMCP
from fastmcp.server.auth import AccessToken
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier

from bench import transports
from bench.calls import pct
from bench.history import opened, reachable, sample_servers, store_url, write_report
from fastmcp_tasks import TasksExtension
from fastmcp_tasks.server.engine.caller import Caller
from fastmcp_tasks.server.engine.sealed import open_caller, seal_caller
from fastmcp_tasks.server.sealing import KEY_ENV, Sealer

RESULTS = Path(__file__).resolve().parent / "results" / "sealing.json"
STORES = ("memory", "sqlite", "redis", "postgres")
KEY = "bench-sealing-key-0123456789abcdef"
BEARER = "bench-sealing-token"
CLAIMS = {
    "client_id": "bench-app",
    "sub": "user-8f3a2c41",
    "scopes": ["tasks:read", "tasks:write", "deploy"],
    "iss": "https://auth.example.com/",
    "aud": "https://mcp.example.com/",
    "email": "someone@example.com",
    "org_id": "org-5521",
    "roles": ["developer", "reviewer"],
}
#: Ten headers a caller behind a proxy typically sends, beside the bearer token.
HEADERS = {
    "User-Agent": "bench-sealing/1.0 (python-httpx compatible)",
    "Accept-Language": "en-GB,en;q=0.9",
    "Accept-Encoding": "gzip, deflate, br",
    "X-Request-Id": "4c1e7a9e-3f0b-4d1e-9b57-7a1f0c2d9e11",
    "X-Forwarded-For": "203.0.113.17, 10.0.4.12",
    "X-Forwarded-Proto": "https",
    "X-Tenant": "acme-eu-west",
    "Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "Cookie": "session=3q2+7w; theme=dark; consent=analytics,ads",
    "X-Client-Version": "2026.3.1",
}


def authenticated(frame: Any) -> Any:
    """`request_frame` with the bearer token and the ten headers added to every request."""

    def framed(*args: Any, **kwargs: Any) -> tuple[bytes, dict[str, str]]:
        body, headers = frame(*args, **kwargs)
        return body, {**headers, **HEADERS, "Authorization": f"Bearer {BEARER}"}

    return framed


def verifier() -> StaticTokenVerifier:
    return StaticTokenVerifier(tokens={BEARER: dict(CLAIMS)})


#: The servers compared: no key, a key (the caller sealed), `seal="all"` (payloads too).
MODES = ("off", "key", "all")


def bench_server(url: str, mode: str) -> tuple[FastMCP, TasksExtension]:
    mcp = FastMCP(f"bench-sealing-{mode}", auth=verifier())

    @mcp.tool(task=True)
    async def noop(text: str = "") -> str:
        return text or "ok"

    keys = [] if mode == "off" else [KEY]
    seal = "all" if mode == "all" else "caller"
    extension = TasksExtension(url=url, encryption_key=keys, seal=seal)
    mcp.add_extension(extension)
    return mcp, extension


def plain_server() -> FastMCP:
    mcp = FastMCP("bench-sealing-sync", auth=verifier())

    @mcp.tool
    async def noop() -> str:
        return "ok"

    return mcp


def counted(sealer: Sealer) -> list[int]:
    """How many callers `sealer` seals from now on (one slot, counted as they are sealed)."""
    count, seal = [0], sealer.seal

    def sealing(task_id: str, payload: dict[str, Any]) -> str:
        count[0] += 1
        assert "token" in payload and len(payload["headers"]) > 10, payload
        return seal(task_id, payload)

    sealer.seal = sealing  # type: ignore[method-assign]
    return count


async def latency(urls: dict[str, str], rounds: int) -> dict[str, float]:
    """p50s (microseconds) of sync / create / get on each of `MODES`' servers.

    The servers are built in each rotation of `MODES` for a third of the rounds (an
    earlier-built server is measurably slower on this harness whatever its options)."""
    samples: dict[str, list[int]] = {}
    share = rounds // len(MODES)
    async with transports.http_transport(plain_server()) as sync_conn:
        for turn in range(len(MODES)):
            order = MODES[turn:] + MODES[:turn]
            built = {mode: bench_server(urls[mode], mode) for mode in order}
            async with contextlib.AsyncExitStack() as stack:
                sends = {}
                for mode in order:
                    conn = await stack.enter_async_context(
                        transports.http_transport(built[mode][0])
                    )
                    sends[mode] = conn.send
                extensions = {mode: built[mode][1] for mode in MODES}
                assert extensions["off"].sealer is None and extensions["all"].seal_all
                sealed = {m: counted(extensions[m].sealer) for m in ("key", "all")}  # type: ignore[arg-type]
                await sample_servers(samples, sync_conn.send, sends, share)
                # every task of a keyed server had its caller sealed (the record's context
                # is dropped when it finishes, so it is counted, not read back)
                for count in sealed.values():
                    assert count[0] == share + 51, (count, share)
    return {kind: pct(values, 50) for kind, values in samples.items()}


def micro(number: int) -> dict[str, float]:
    """`seal_caller` + `open_caller` of a realistic caller, microseconds per pair."""
    token = AccessToken(
        token=BEARER,
        client_id=CLAIMS["client_id"],
        scopes=list(CLAIMS["scopes"]),
        expires_at=int(time.time()) + 3600,
        claims=dict(CLAIMS),
    )
    headers = {k.lower(): v for k, v in HEADERS.items()}
    headers["authorization"] = f"Bearer {BEARER}"
    caller = Caller(access_token=token, headers=headers, session_id="b1f0c3d2e4a54f6e9d7c")
    sealer = Sealer([KEY])
    task_id = "3f7c2a9d4e1b4c8a9f0e6d5c4b3a2918"
    sealed = seal_caller(sealer, task_id, caller)
    assert sealed is not None
    opened_caller, why = open_caller(sealer, task_id, sealed)
    assert why is None and opened_caller is not None
    assert opened_caller.access_token == token and opened_caller.headers == headers

    def pair() -> None:
        open_caller(sealer, task_id, seal_caller(sealer, task_id, caller))  # type: ignore[arg-type]

    seal = min(timeit.repeat(lambda: seal_caller(sealer, task_id, caller), number=number, repeat=5))
    both = min(timeit.repeat(pair, number=number, repeat=5))
    return {
        "seal_us": seal / number * 1e6,
        "seal_open_us": both / number * 1e6,
        "sealed_chars": len(sealed),
    }


async def main(args: argparse.Namespace) -> None:
    os.environ.pop(KEY_ENV, None)  # "without a key" must not read one from the environment
    transports.request_frame = authenticated(transports.request_frame)  # type: ignore[attr-defined]
    report: dict[str, Any] = {"rounds": args.rounds, "micro": micro(args.number), "stores": {}}
    skipped = []
    with tempfile.TemporaryDirectory(prefix="bench-sealing-") as scratch:
        for name in args.stores.split(","):
            why = await reachable(name, store_url(name, args, Path(scratch)))
            if why is not None:
                skipped.append(f"{name}: {why}")
                continue
            urls = {mode: store_url(name, args, Path(scratch)) for mode in MODES}
            report["stores"][name] = {"p50_us": await latency(urls, args.rounds)}
            for url in urls.values():
                if name in ("redis", "postgres"):
                    async with opened(name, url):  # clears the prefix / drops the schema
                        pass
    m = report["micro"]
    print(
        f"HTTP + bearer token + 10 headers; sealed caller {m['sealed_chars']} chars; "
        f"seal {m['seal_us']:.1f} µs, seal + open {m['seal_open_us']:.1f} µs"
    )
    print()
    print(
        "| store | sync p50 µs | create p50 / sync (no key / key / seal all) "
        "| tasks/get p50 / sync (no key / key / seal all) | seal + open / sync |"
    )
    print("|---|---|---|---|---|")
    for name, row in report["stores"].items():
        p = row["p50_us"]
        sync = p["sync"]
        print(
            f"| {name} | {sync:.0f} | "
            + " / ".join(f"{p[f'create_{m}'] / sync:.2f}" for m in MODES)
            + " | "
            + " / ".join(f"{p[f'get_{m}'] / sync:.2f}" for m in MODES)
            + f" | {m['seal_open_us'] / sync:.3f} |"
        )
    write_report(report, skipped, RESULTS)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--number", type=int, default=2000, help="timeit loops (micro)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    asyncio.run(main(parser.parse_args()))
