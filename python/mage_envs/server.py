"""Serves `mage-env/1` (protocol.py's `EnvService`) over HTTP with uvicorn and Starlette, with the
guarantees and flags of `mage env-serve`: bearer keys (`--api-key-env`: 401 on every endpoint but
`GET /health`), a session cap (`--max-sessions`: 503 `too_many_sessions` with Retry-After), idle
expiry (`--session-ttl`), a body limit (413), a per-request time budget for engine calls
(`--time-budget-ms`) on a bounded pool of threads (`--engine-threads`), and SIGTERM/SIGINT that
let requests in flight finish for a grace, then exit 0.

An adapter adds its own flags to `argument_parser(...)` and hands its environments to
`serve_from_args`; nothing else of the server is its own.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import uvicorn
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import request_response

from mage_envs.protocol import EnvError, EnvService, Environment, Json, ServiceLimits

MAX_BODY_BYTES = 1 << 20
# Bytes of an oversize body read and thrown away before the connection is cut (as env-serve).
DRAIN_BYTES = 256 << 20
# How long requests in flight may take after SIGTERM before they answer 503 shutting_down.
SHUTDOWN_GRACE_SECONDS = 2.0
# The kernel's queue of connections not yet accepted (the standard library's server had 5).
LISTEN_BACKLOG = 2048
# Arrays and objects nested deeper than this in a request body answer 400 (a protocol body nests
# three or four levels; Python's parser would raise RecursionError near 1,000).
MAX_BODY_DEPTH = 64
ENDPOINTS = "GET /info, GET /health, POST /create, /step, /restart, /expert, /close"


def _reply(status: int, body: Json | bytes, headers: dict[str, str] | None = None) -> Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Response(content, status_code=status, headers=headers, media_type="application/json")


class HttpFront:
    """The ASGI side: key check, shutdown state, body limit and routing to the service."""

    def __init__(self, service: EnvService, api_key: str | None, max_body: int = MAX_BODY_BYTES,
                 log: Callable[[str], None] = lambda line: None):
        self.service = service
        self.max_body = max_body
        self.closing = False
        self.log = log
        self._want = None if api_key is None else f"Bearer {api_key}".encode()
        self._info = json.dumps(service.info()).encode()
        self._posts: dict[str, Callable[[Json], Any]] = {
            "/create": service.create,
            "/step": service.step,
            "/restart": service.restart,
            "/expert": service.expert,
            "/close": service.close,
        }
        # One endpoint for every method and path, so that 404s and 401s are the protocol's JSON.
        self.app = request_response(self.handle)

    async def handle(self, request: Request) -> Response:
        try:
            return await self._route(request)
        except EnvError as e:
            headers = e.headers()
            if e.kind == "unauthorized":
                headers["WWW-Authenticate"] = "Bearer"
            return _reply(e.status, e.body(), headers)
        except ClientDisconnect:
            return _reply(400, EnvError("bad_request", "the client went away mid-body").body())
        except Exception as e:  # an adapter bug: a 500 the client may retry
            self.log(f"internal error: {type(e).__name__}: {e}")
            return _reply(500, EnvError("internal", f"{type(e).__name__}: {e}").body())

    async def _route(self, request: Request) -> Response:
        method, path = request.method, request.url.path
        if method == "GET" and path == "/health":
            return _reply(200, {"status": "ok"})
        if self._want is not None and not self._authorized(request):
            raise EnvError(
                "unauthorized",
                "missing or wrong API key: send 'Authorization: Bearer KEY' "
                "(a game: remote config names the variable that holds it in env.apiKeyEnv)",
            )
        if self.closing:
            raise EnvError("shutting_down", "the server is stopping", retry_after=1)
        if method == "GET" and path == "/info":
            return _reply(200, self._info)
        handler = self._posts.get(path)
        if handler is None or method != "POST":
            raise EnvError("not_found", f"no endpoint {method} {path}; endpoints: {ENDPOINTS}")
        reply = handler(await self._body(request))
        if asyncio.iscoroutine(reply):
            reply = await reply
        return _reply(200, reply)

    def _authorized(self, request: Request) -> bool:
        got = request.headers.get("authorization", "").strip().encode()
        return self._want is not None and hmac.compare_digest(got, self._want)

    async def _body(self, request: Request) -> Json:
        """The request body: a JSON object of at most max_body bytes. Past the limit (declared or
        counted) nothing more is kept, the rest is read and thrown away, then 413 answers: uvicorn
        closes a connection whose body was not read, and a client still sending would see a reset
        instead of the 413. Past DRAIN_BYTES thrown away the connection is cut."""
        declared = request.headers.get("content-length")
        over = declared is not None and declared.isdigit() and int(declared) > self.max_body
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if over or size > self.max_body:
                over = True
                chunks.clear()
                if size > self.max_body + DRAIN_BYTES:
                    break
            else:
                chunks.append(chunk)
        if over:
            raise EnvError("bad_request", f"request body over {self.max_body} bytes", status=413)
        raw = b"".join(chunks) or b"{}"
        # The scan only for a body with that many brackets at all (bytes.count is the C loop).
        if raw.count(b"[") + raw.count(b"{") > MAX_BODY_DEPTH and nesting_depth(raw) > MAX_BODY_DEPTH:
            raise EnvError("bad_request", f"the body nests arrays and objects more than {MAX_BODY_DEPTH} deep")
        try:
            parsed = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise EnvError("bad_request", f"the body is not JSON: {e}") from e
        if not isinstance(parsed, dict):
            raise EnvError("bad_request", "the body must be a JSON object")
        return parsed


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, counted without parsing it (brackets
    inside strings skipped), so that a body nested 100,000 deep is refused before the parser recurses."""
    depth = deepest = 0
    in_string = escaped = False
    for b in raw:
        if in_string:
            if escaped:
                escaped = False
            elif b == 0x5C:  # backslash
                escaped = True
            elif b == 0x22:  # quote
                in_string = False
        elif b == 0x22:
            in_string = True
        elif b in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif b in (0x5D, 0x7D):  # ] }
            depth -= 1
    return deepest


# ------------------------------------------------------------------------------------------------
# serving


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # The protocol named, as asyncio only turns Nagle's algorithm off (TCP_NODELAY) on sockets
    # whose proto says TCP: with proto 0 every keep-alive reply waited about 40 ms for an ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def _uvicorn_config(front: HttpFront) -> uvicorn.Config:
    return uvicorn.Config(
        front.app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
        # A backstop: at the grace the waiting requests answer 503 shutting_down themselves.
        timeout_graceful_shutdown=int(SHUTDOWN_GRACE_SECONDS) + 2,
    )


class _Server(uvicorn.Server):
    """uvicorn's server, whose first SIGTERM/SIGINT also starts the front's shutdown."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[int], None]):
        super().__init__(config)
        self._on_signal = on_signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            self._on_signal(sig)
        super().handle_exit(sig, frame)


async def _sweep_forever(service: EnvService) -> None:
    period = min(60.0, max(1.0, service.limits.ttl_seconds / 2))
    while True:
        await asyncio.sleep(period)
        service.sweep()


async def _serve(server: uvicorn.Server, sock: socket.socket, service: EnvService) -> None:
    sweeper = asyncio.create_task(_sweep_forever(service))
    try:
        await server.serve(sockets=[sock])
    finally:
        sweeper.cancel()


def shown_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(service: EnvService, name: str, host: str, port: int, api_key: str | None = None) -> int:
    """Serves until SIGTERM/SIGINT; prints `NAME listening on URL` on stdout (port 0 picks a free one).
    Returns 0 once stopped: requests in flight get SHUTDOWN_GRACE_SECONDS, then answer 503."""
    log = _stderr_log(name)
    front = HttpFront(service, api_key, log=log)
    sock = listen(host, port)
    url = shown_url(sock)
    loop_box: list[asyncio.AbstractEventLoop] = []

    def announce() -> None:
        print(f"{name} listening on {url}{' (API key required)' if api_key else ''}", flush=True)
        if not _is_loopback(host) and api_key is None:
            log(f"WARNING listening on {host} without --api-key-env: anyone who can reach it can create sessions "
                "and use its CPU")

    def on_signal(sig: int) -> None:
        if front.closing:
            return
        log(f"{signal.Signals(sig).name}, shutting down (requests in flight get {SHUTDOWN_GRACE_SECONDS:g} s, "
            "then answer 503 shutting_down)")
        front.closing = True
        loop = loop_box[0]
        loop.call_soon_threadsafe(loop.call_later, SHUTDOWN_GRACE_SECONDS, service.engine.abandon)

    server = _Server(_uvicorn_config(front), on_signal)

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())
        serving = asyncio.create_task(_serve(server, sock, service))
        # The line a launcher waits for comes once uvicorn has its signal handlers: a SIGTERM sent
        # as soon as it is read must stop the server cleanly, not kill it or go ignored.
        while not server.started and not serving.done():
            await asyncio.sleep(0.005)
        if server.started:
            announce()
        await serving

    # uvicorn re-raises the signal it caught under the handlers it found; ignoring them then
    # makes a clean stop exit 0 instead of dying of the signal.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    asyncio.run(main())
    service.engine.shutdown()
    log("stopped")
    if service.engine.running > 0:
        # Engine calls still running cannot be stopped, and the interpreter would wait for them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def _stderr_log(name: str) -> Callable[[str], None]:
    def log(line: str) -> None:
        print(f"{name}: {line}", file=sys.stderr, flush=True)

    return log


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


@dataclass
class Running:
    url: str
    front: HttpFront
    server: uvicorn.Server


@contextmanager
def running_in_thread(service: EnvService, api_key: str | None = None) -> Iterator[Running]:
    """The server on a free loopback port in a background thread (for tests and embedding)."""
    front = HttpFront(service, api_key)
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(_uvicorn_config(front))
    thread = threading.Thread(target=lambda: asyncio.run(_serve(server, sock, service)), daemon=True)
    thread.start()
    try:
        yield Running(shown_url(sock), front, server)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        service.engine.shutdown()
        sock.close()


# ------------------------------------------------------------------------------------------------
# the command line every adapter shares


def argument_parser(prog: str, description: str, default_port: int) -> argparse.ArgumentParser:
    """A parser with the server's flags (those of `mage env-serve`); the adapter adds its own."""
    d = ServiceLimits()
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=default_port, help="0 picks a free port (printed on stdout)")
    ap.add_argument("--api-key-env", metavar="NAME",
                    help="every endpoint but GET /health needs 'Authorization: Bearer $NAME'")
    ap.add_argument("--session-ttl", "--ttl", dest="session_ttl", type=_positive(float), default=d.ttl_seconds,
                    metavar="SECONDS", help="idle sessions expire after this many seconds (default %(default)g)")
    ap.add_argument("--max-sessions", type=_positive(int), default=d.max_sessions, metavar="N",
                    help="live sessions at most; past it /create answers 503 with Retry-After (default %(default)s)")
    ap.add_argument("--time-budget-ms", type=_positive(int), default=d.time_budget_ms, metavar="MS",
                    help="time one request may wait for its engine call, queued or running; past it 503 "
                         "engine_timeout (default %(default)s)")
    ap.add_argument("--engine-threads", type=_positive(int), default=d.engine_threads, metavar="N",
                    help="threads that run engine calls, at most this many at once (default %(default)s)")
    return ap


def serve_from_args(a: argparse.Namespace, envs: list[Environment], name: str) -> int:
    limits = ServiceLimits(
        ttl_seconds=a.session_ttl,
        max_sessions=a.max_sessions,
        time_budget_ms=a.time_budget_ms,
        engine_threads=a.engine_threads,
    )
    api_key = api_key_from_env(a.api_key_env)
    try:
        return serve(EnvService(envs, name, limits), name, a.host, a.port, api_key)
    except OSError as e:
        raise SystemExit(f"--host {a.host} --port {a.port}: cannot listen there ({e.strerror})") from e


def api_key_from_env(name: str | None, env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    if name is None:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise SystemExit(f'--api-key-env must name an environment variable (letters, digits, _), got "{name}"')
    value = env.get(name, "").strip()
    if not value:
        raise SystemExit(f"--api-key-env {name}: the environment variable {name} is not set or empty")
    return value


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a positive {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be a positive {kind.__name__}, got {text!r}")
        return value

    return parse
