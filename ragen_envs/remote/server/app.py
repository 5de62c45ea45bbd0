"""``ragen serve``: environments over HTTP, many sessions at once, also in OpenEnv's protocol.

Each session is its own env instance (``gymnasium.make``), held by one session layer (``sessions.py``)
under the routes of each protocol: ``rest.py``, ``openenv.py`` (WebSocket), ``mcp.py``; this module
composes them behind the guards and runs the server. The session API, which ``RemoteEnv``
speaks (JSON bodies, values in ``ragen_envs.remote.wire``'s form)::

    POST   /v1/sessions                      {"env_id": ID?, "render_mode": MODE?} -> the env's surface
    POST   /v1/sessions/{sid}/reset          {"seed": S?, "options": {...}?}       -> observation, info
    POST   /v1/sessions/{sid}/step           {"action": "..."}  -> observation, reward, terminated, ...
    POST   /v1/sessions/{sid}/call/{method}  {"args": [...]}    -> {"result": ...}  (parse_action,
                                             oracle_action, oracle_reasoning, render)
    GET    /v1/sessions/{sid}                -> env_id, episode_id, step_count (this episode), idle_s
    DELETE /v1/sessions/{sid}
    GET    /health                           (no token needed)
    GET    /metadata, /schema                (OpenEnv's: every served env; /envs/{env_id}/... one env)
    POST   /mcp                              (MCP's JSON-RPC: tools list_envs, reset, step, state, close)

OpenEnv's WebSocket protocol (``openenv-core``'s ``EnvClient``) is served at ``/ws`` for the first
env and at ``/envs/{env_id}/ws`` for each env, one session per connection: messages
``{"type": "reset" | "step" | "state" | "close", "data": {...}}``, a step's data ``{"action": "..."}``,
and replies ``{"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}}``.

Limits, so that no request can take the server down: at most ``max_sessions`` sessions on all protocols
together (one more is refused with 503 and code ``capacity``; ``/health`` counts the envs alive), sessions
idle for ``idle_timeout_s`` are closed (a WebSocket that still holds one gets ``SESSION_CLOSED``), request
bodies and WebSocket messages over ``max_request_bytes`` get 413, a request must arrive whole within
``read_timeout_s`` and at most ``max_connections`` connections are open at once (``TimedH11``), env calls
run on a bounded thread pool per served env (a slow env queues behind itself, not in front of the others)
and calls on one session run one at a time. Clients see of ``info`` only what the env lets an agent see
(``LLMEnv.agent_info``). Errors are JSON ``{"error": {"code", "message"}}``
with a 4xx status for the client's mistakes (401 token, 404 unknown session/env/method, 409 step
before reset, 400 malformed JSON or a value the env refuses, 422 a wrong field). With ``token`` set,
every request but ``/health`` needs ``Authorization: Bearer TOKEN``.

Against web pages in a browser on the same machine (``Guard``): a Host header that names neither
loopback, the bind address, this machine (bound to all interfaces) nor ``allowed_hosts`` gets 403
``forbidden_host`` (DNS rebinding; IP addresses pass), an Origin header of any other host and not in
``allowed_origins`` 403 ``forbidden_origin`` (a WebSocket is closed before it is accepted: 403), and a
POST whose Content-Type is not ``application/json`` 415. Clients outside browsers send no Origin.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import ipaddress
import json
import logging
import socket
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import gymnasium as gym

from ragen_envs.extras import install_hint
from ragen_envs.remote.server.config import ServerConfig, host_name

try:  # first, so that a missing extra is this one line, not an ImportError from a protocol's module
    import h11
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"the env server needs the 'server' extra: {install_hint('server')} ({error})") from None

from ragen_envs.remote.server import mcp, openenv, rest  # noqa: E402 (after the extra's check)
from ragen_envs.remote.server.sessions import ServeError, Sessions, authorized  # noqa: E402


log = logging.getLogger("ragen_envs.serve")


class Guard:
    """ASGI middleware against web pages, as Jupyter's: refuses (403) a Host header the server does not go
    by (DNS rebinding: a page of evil.example whose name now points here) and a browser's Origin that is
    not allowed (any page's WebSocket or fetch), and (415) a POST body not declared JSON: a form or
    text/plain POST is a "simple request" a page sends cross-site without asking (no CORS preflight)."""

    def __init__(self, app, config: ServerConfig):
        self.app = app
        self.names = {"localhost", "127.0.0.1", "::1", host_name(config.host), *config.allowed_hosts}
        if config.host in ("0.0.0.0", "::", ""):  # bound to every interface: its own name too
            self.names.add(socket.gethostname().lower())
        self.any_host, self.origins = "*" in config.allowed_hosts, set(config.allowed_origins)

    def host_ok(self, host: str | None) -> bool:
        name = None if host is None else host_name(host)
        return host is None or self.any_host or name in self.names or is_ip(name)  # no Host: not a browser

    def origin_ok(self, origin: str | None) -> bool:
        if origin is None or "*" in self.origins:  # no Origin: not a browser
            return True
        name = host_name(urlsplit(origin).netloc) if "://" in origin else None  # "null" (file://, sandbox): none
        return origin.lower().rstrip("/") in self.origins or name in self.origins or name in self.names \
            or is_ip(name, loopback=True)

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = None
        if not self.host_ok(headers.get("host")):
            refusal = 403, "forbidden_host", (f"Host {headers['host']!r} is not this server's (DNS rebinding?); "
                                              "start it with --allow-host NAME to answer to that name")
        elif not self.origin_ok(headers.get("origin")):
            refusal = 403, "forbidden_origin", (f"pages of {headers['origin']!r} may not use this server; start "
                                                "it with --allow-origin ORIGIN to let them")
        elif scope["type"] == "http" and scope["method"] == "POST" and "content-type" in headers \
                and headers["content-type"].split(";")[0].strip().lower() != "application/json":
            refusal = 415, "unsupported_media_type", "a POST body is JSON: send Content-Type: application/json"
        if refusal is None:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await receive()  # the connect; a close before accept is a 403 to the handshake
            return await send({"type": "websocket.close", "code": 1008, "reason": refusal[1]})
        await error_response(*refusal)(scope, receive, send)


def is_ip(name: str | None, loopback: bool = False) -> bool:
    try:
        address = ipaddress.ip_address(name or "")
    except ValueError:
        return False
    return address.is_loopback or not loopback


class BodyLimit:
    """ASGI middleware: a request body is read whole before the app sees it, and one over ``limit``
    bytes (declared or, when chunked, counted) gets 413 without being kept."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":  # the client left mid-body: an answer no one reads
                return await self._refuse(send, 400, "incomplete_body", "the connection closed before the body ended")
            size += len(message.get("body", b""))
            if size > self.limit:
                return await self._refuse(send)
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()  # after the body: the disconnect, when it comes
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send, status: int = 413, code: str = "too_large", message: str | None = None):
        body = json.dumps({"error": {"code": code, "message": message or f"request body over {self.limit} bytes"}})
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body.encode()})


def create_app(config: ServerConfig | None = None) -> FastAPI:
    """The server's app: one session layer (``Sessions``) under the routes of each protocol (REST,
    OpenEnv's WebSocket, MCP), behind the token check, the body limit and the browser guard."""
    config = config or ServerConfig()
    sessions = Sessions(config)

    async def reaper():
        while True:
            await asyncio.sleep(min(config.idle_timeout_s / 2, 10.0))
            await sessions.close_idle()

    @asynccontextmanager
    async def lifespan(app):
        gc.freeze()  # the startup's objects (torch-free, but gymnasium, pydantic, ...) out of every collection
        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            for sid in list(sessions.open):
                await sessions.close(sid, "the server is stopping")
            sessions.shutdown()

    # No /docs or /redoc: their pages load from a CDN (blank offline); /openapi.json is the schema.
    app = FastAPI(title="ragen-envs env server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.sessions = sessions
    app.add_middleware(BodyLimit, limit=config.max_request_bytes)

    @app.middleware("http")
    async def check_token(request: Request, call_next):
        if request.url.path != "/health" and not authorized(config, request.headers):
            return error_response(401, "unauthorized", "missing or wrong token (Authorization: Bearer TOKEN)")
        return await call_next(request)

    app.add_middleware(Guard, config=config)  # added last, so it runs first: before the body is read

    @app.exception_handler(ServeError)
    async def serve_error(request, error: ServeError):
        return error_response(error.status, error.code, error.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, error: StarletteHTTPException):  # FastAPI's own 4xx (a body it cannot parse)
        code = {400: "malformed_json", 404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "error")
        message = "the request body is not valid JSON (or nested too deeply)" if code == "malformed_json" \
            else str(error.detail)
        return error_response(error.status_code, code, message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request, error: RequestValidationError):
        problems = error.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        where = "; ".join(f"{'.'.join(map(str, p.get('loc', ())[1:])) or 'body'}: {p.get('msg')}" for p in problems)
        return error_response(422, "invalid_request", where)

    for protocol in (rest, openenv, mcp):
        app.include_router(protocol.routes(sessions))
    return app


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message}})


def serve(config: ServerConfig) -> None:
    """Run the server until interrupted (``ragen serve``). Each env is made once first, so a bad
    argument fails now rather than at a client's first session."""
    for env_id in config.envs:
        try:
            gym.make(env_id, **config.env_kwargs.get(env_id, {})).close()
        except (TypeError, ValueError, gym.error.Error) as error:
            raise ValueError(f"{env_id} {config.env_kwargs.get(env_id, {})}: {error}") from None
    limit = file_limit(raise_to=files_for(config.max_connections))  # before server_config reads it
    sock = bind(config.host, config.port)  # a taken port is reported before "serving"
    print(f"serving {', '.join(config.envs)} on http://{config.host}:{config.port} (at most {config.max_sessions} "
          f"sessions{', token required' if config.token else ''}); Ctrl-C stops")
    cap = connection_cap(config.max_connections, limit)
    if cap < config.max_connections:
        print(f"at most {cap} connections at once, not {config.max_connections}: the open-file limit is {limit} "
              f"(ulimit -n; {files_for(config.max_connections)} would do)")
    if config.host not in ("127.0.0.1", "localhost", "::1") and not config.token:
        print(f"warning: serving on {config.host} without a token: anyone who reaches it can run envs")
    if config.host in ("0.0.0.0", "::", "") and not config.allowed_hosts:
        print(f"clients may use this machine's IP addresses or its name {socket.gethostname()!r}; for another name "
              "(a DNS name, a proxy's), add --allow-host NAME")
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)  # one line per event worth a line (a client that left, a slow one cut off)
    log.setLevel(logging.INFO)
    uvicorn.Server(server_config(config)).run(sockets=[sock])


def server_config(config: ServerConfig, **overrides) -> uvicorn.Config:
    """uvicorn's settings for ``config``'s app: message size, keep-alive, the request deadline and the
    connection cap (``TimedH11``)."""
    # Keep-alive past uvicorn's 5 s: under load a client's pooled connection can sit idle longer than
    # that between two requests, and a connection closed under it fails the next request.
    http = type("Timed", (TimedH11,), {"read_timeout": config.read_timeout_s, "refused": 0,
                                       "max_connections": connection_cap(config.max_connections, file_limit())})
    settings = {"ws_max_size": config.max_request_bytes, "timeout_keep_alive": 75, "backlog": 4096,
                "log_level": "warning", "http": http}
    return uvicorn.Config(create_app(config), **{**settings, **overrides})


FILES_KEPT = 64  # descriptors kept from connections, at the least: the envs' files, sandboxes' pipes, logs


def file_limit(raise_to: int = 0) -> int | None:
    """This process's limit on open files (None: none, or not known), first raised to ``raise_to`` as
    far as the hard limit allows."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < raise_to:
        wanted = raise_to if hard == resource.RLIM_INFINITY else min(raise_to, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass  # the limit stays; the cap below follows it
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(max_connections: int, limit: int | None) -> int:
    """How many connections to serve at once: ``max_connections``, or fewer where the open-file limit
    would run out first (a quarter of the limit, ``FILES_KEPT`` at least, stays for everything else)."""
    if limit is None:
        return max_connections
    return max(1, min(max_connections, limit - max(FILES_KEPT, limit // 4)))


def files_for(max_connections: int) -> int:
    """The open-file limit under which ``connection_cap`` allows all ``max_connections``."""
    return max(max_connections + FILES_KEPT, (4 * max_connections + 2) // 3)


BUSY = json.dumps({"error": {"code": "too_many_connections",
                             "message": "the server holds its maximum of connections; retry later"}}).encode()


class TimedH11(H11Protocol):
    """uvicorn's h11 protocol with a request deadline and a connection cap.

    A request's headers and body must arrive whole within ``read_timeout`` seconds of its first byte (a
    new connection's first request: of the connection's opening), or the connection is closed: a client
    that trickles a byte at a time (slowloris) is cut at the deadline, not kept while it trickles. The
    idle time between two requests of a kept-alive connection is uvicorn's keep-alive timeout, and
    while the app works on a request no deadline runs. A connection beyond ``max_connections`` open at
    once (WebSockets included) is answered 503 and closed at once, never queued: slow clients cannot
    take every descriptor, so ``/health`` and the envs keep some."""

    read_timeout = 30.0
    max_connections = 2048
    refused = 0  # connections refused over the cap (per server: ``server_config`` makes a class each)
    _deadline = None

    def connection_made(self, transport):
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse()
        else:
            self._arm()  # the first request's deadline runs from the opening

    def data_received(self, data: bytes) -> None:
        if self._deadline is None:
            self._arm()  # a request begins: its deadline runs from its first byte, not its latest
        super().data_received(data)
        if not self._incomplete():
            self._disarm()  # in whole: the app's time is not the client's

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._incomplete() and self._deadline is None:
            self._arm()  # a pipelined request, read in part while the last one was answered

    def handle_websocket_upgrade(self, event) -> None:
        self._disarm()  # the connection is a WebSocket's now; uvicorn's protocol for those takes it
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc):
        self._disarm()
        super().connection_lost(exc)

    def _incomplete(self) -> bool:
        state = self.conn.their_state
        return state is h11.SEND_BODY or (state is h11.IDLE and bool(self.conn.trailing_data[0]))

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.read_timeout, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.cycle is None or self._incomplete():  # no request yet, or one not arrived whole
            log.info("closed a connection from %s: no whole request within %g s", self.client, self.read_timeout)
            self.transport.close()

    def _refuse(self) -> None:
        cls = type(self)
        cls.refused += 1
        if cls.refused & (cls.refused - 1) == 0:  # the 1st, 2nd, 4th, ...: a flood is a few lines
            log.info("refused a connection (%d so far): %d are open, the cap", cls.refused, self.max_connections)
        head = ("HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
                f"content-length: {len(BUSY)}\r\n\r\n").encode()
        self.transport.write(head + BUSY)
        self.transport.close()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or a ValueError saying in one line why there is none."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as error:
        raise ValueError(f"cannot serve on {host}:{port}: {error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(4096)
    except OSError as error:
        sock.close()
        taken = " (another program listens there: stop it or pick another --port)" \
            if error.errno == errno.EADDRINUSE else ""
        raise ValueError(f"cannot serve on {host}:{port}: {error.strerror}{taken}") from None
    return sock
