"""``ragen serve``: environments over HTTP, many sessions at once, also in OpenEnv's protocol.

Each session is its own env instance (``gymnasium.make``). The session API, which ``RemoteEnv``
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

Limits, so that no request can take the server down: at most ``max_sessions`` sessions (one more is
refused with 503 and code ``capacity``), sessions idle for ``idle_timeout_s`` are closed, request
bodies and WebSocket messages over ``max_request_bytes`` get 413, env calls run on a bounded thread
pool per served env (a slow env queues behind itself, not in front of the others) and calls on one
session run one at a time. Errors are JSON ``{"error": {"code", "message"}}``
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
import hmac
import ipaddress
import json
import logging
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import gymnasium as gym

from ragen_envs.remote import wire
from ragen_envs.remote.client import CALLS, surface
from ragen_envs.remote.server import mcp
from ragen_envs.remote.server.config import ServerConfig, host_name
from ragen_envs.remote.server.describe import env_metadata, env_schema, server_metadata, server_schema

try:
    import h11
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError
except ImportError as error:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"the env server needs the 'server' extra: pip install 'ragen-envs[server]' ({error})") from None


log = logging.getLogger("ragen_envs.serve")


class ServeError(Exception):
    """An error with its HTTP status and a short machine-readable code."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


HEADLESS = (None, "rgb_array", "ansi")  # render modes a session may ask for ("human" would open a window)
MAX_ID_CHARS = 256  # a client's own ids (OpenEnv's episode_id) are kept per session: bounded


class Session:
    def __init__(self, env_id: str, env: gym.Env):
        self.env_id, self.env = env_id, env
        self.lock = asyncio.Lock()  # one call at a time on this env
        self.last_used = time.monotonic()
        self.steps = 0
        self.episode_id: str | None = None

    def stepped(self, info: dict) -> None:
        """Count a step of the episode: one past its end (info["episode_over"]) is none."""
        self.steps += not info.get("episode_over", False)


class Sessions:
    """The open sessions, their limits, and the thread pool their env calls run on."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.open: dict[str, Session] = {}
        self.reserved = 0  # sessions being created (their env is being built)
        # Each env its own pool of worker threads: slow steps of one env (a sandboxed program that
        # sleeps) queue behind each other, never in front of another env's.
        self.pools = {env_id: ThreadPoolExecutor(config.workers, thread_name_prefix=f"env-{env_id}")
                      for env_id in config.envs}
        self.server_pool = ThreadPoolExecutor(2, thread_name_prefix="server")  # describing the envs
        self.created = self.closed_idle = 0

    async def run(self, fn, *args, env_id: str | None = None, **kwargs):
        """``fn(*args, **kwargs)`` on a worker thread of ``env_id``'s pool (None: the server's)."""
        pool = self.server_pool if env_id is None else self.pools[env_id]
        return await asyncio.get_running_loop().run_in_executor(pool, partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        for pool in [*self.pools.values(), self.server_pool]:
            pool.shutdown(wait=False, cancel_futures=True)

    async def create(self, env_id: str | None, render_mode: str | None = None) -> tuple[str, Session]:
        env_id = self.config.envs[0] if env_id is None else env_id  # "" is no env: refused below
        if env_id not in self.config.envs:
            raise ServeError(404, "unknown_env", f"this server serves {', '.join(self.config.envs)}, not {env_id!r}")
        if len(self.open) + self.reserved >= self.config.max_sessions:
            await self.close_idle()
        if len(self.open) + self.reserved >= self.config.max_sessions:
            raise ServeError(503, "capacity", f"the server holds its maximum of {self.config.max_sessions} "
                                              f"sessions; close one (DELETE /v1/sessions/ID) or retry later")
        if render_mode not in HEADLESS:
            raise ServeError(400, "bad_render_mode", f"render_mode must be one of {', '.join(map(str, HEADLESS))}: "
                                                     f"a server opens no windows, got {render_mode!r}")
        self.reserved += 1
        try:
            # Without Gymnasium's passive checker: a first reset that raises (a bad option) leaves the
            # checker broken for the session's later steps. The contract tests run it on every env.
            kwargs = {"disable_env_checker": True, **self.config.env_kwargs.get(env_id, {})}
            if render_mode is not None:
                kwargs["render_mode"] = render_mode
            try:
                env = await self.run(gym.make, env_id, env_id=env_id, **kwargs)
            except (TypeError, ValueError, gym.error.Error) as error:
                raise ServeError(400, "bad_env_arguments", f"{env_id}: {error}") from None
        finally:
            self.reserved -= 1
        sid = secrets.token_urlsafe(16)
        self.open[sid] = session = Session(env_id, env)
        self.created += 1
        return sid, session

    def get(self, sid: str) -> Session:
        session = self.open.get(sid)
        if session is None:
            raise ServeError(404, "unknown_session", f"no session {sid!r} (closed, timed out after "
                                                     f"{self.config.idle_timeout_s:g} s idle, or never opened)")
        return session

    async def call(self, session: Session, fn, *args, **kwargs):
        """Run an env call on the pool, one at a time per session; env errors become 4xx."""
        async with session.lock:
            session.last_used = time.monotonic()
            try:
                return await self.run(fn, *args, env_id=session.env_id, **kwargs)
            except (RuntimeError, gym.error.ResetNeeded) as error:  # step() before reset()
                raise ServeError(409, "bad_state", str(error)) from None
            except (ValueError, TypeError) as error:  # e.g. a bad reset option
                raise ServeError(400, "bad_value", str(error)) from None
            except Exception as error:  # the env's own bug: reported, and the server goes on
                raise ServeError(500, "env_error", f"{type(error).__name__}: {error}") from None
            finally:
                session.last_used = time.monotonic()

    async def close(self, sid: str) -> None:
        session = self.open.pop(sid, None)
        if session is not None:
            async with session.lock:  # a call in flight finishes first
                await self.run(session.env.close, env_id=session.env_id)

    async def close_idle(self) -> int:
        limit = time.monotonic() - self.config.idle_timeout_s
        idle = [sid for sid, s in self.open.items() if s.last_used < limit and not s.lock.locked()]
        self.closed_idle += len(idle)  # counted before the awaits, so a session gone is a session counted
        for sid in idle:
            await self.close(sid)
        return len(idle)


# -- request bodies --------------------------------------------------------------------------------
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateBody(Strict):
    env_id: StrictStr | None = None
    render_mode: StrictStr | None = None


class ResetBody(Strict):
    seed: int | None = Field(default=None, ge=0, le=2**64 - 1, strict=True)
    options: dict[str, Any] | None = None


class StepBody(Strict):
    action: Any  # a string; anything else is an invalid action, as for a local env


class CallBody(Strict):
    args: list[Any] = Field(default_factory=list)


def surface_json(sid: str, session: Session) -> dict:
    """The env's ``surface`` as JSON, with the session's ids: what ``RemoteEnv`` reads on creation."""
    shown = surface(session.env)
    return {**shown, "session_id": sid, "env_id": session.env_id,
            "observation_space": wire.space_to_json(shown["observation_space"]),
            "action_space": wire.space_to_json(shown["action_space"]), "metadata": wire.encode(shown["metadata"])}


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
                await sessions.close(sid)
            sessions.shutdown()

    # No /docs or /redoc: their pages load from a CDN (blank offline); /openapi.json is the schema.
    app = FastAPI(title="ragen-envs env server", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.sessions = sessions
    app.add_middleware(BodyLimit, limit=config.max_request_bytes)

    def authorized(headers) -> bool:
        if not config.token:
            return True
        given = headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {config.token}".encode())

    @app.middleware("http")
    async def check_token(request: Request, call_next):
        if request.url.path != "/health" and not authorized(request.headers):
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

    def metadata() -> dict[str, dict]:
        """Each served env's description (built once per env, then cached)."""
        return {env_id: env_metadata(env_id, json.dumps(config.env_kwargs.get(env_id, {}), sort_keys=True))
                for env_id in config.envs}

    app.state.metadata, app.state.ServeError = metadata, ServeError

    @app.get("/metadata")
    async def server_meta():
        return server_metadata(await sessions.run(metadata))

    @app.get("/schema")
    async def server_schemas():
        return server_schema(await sessions.run(metadata))

    @app.get("/envs/{env_id:path}/metadata")
    async def one_meta(env_id: str):
        return (await sessions.run(metadata))[served(env_id)]

    @app.get("/envs/{env_id:path}/schema")
    async def one_schema(env_id: str):
        return env_schema((await sessions.run(metadata))[served(env_id)])

    def served(env_id: str) -> str:
        if env_id not in config.envs:
            raise ServeError(404, "unknown_env", f"this server serves {', '.join(config.envs)}, not {env_id!r}")
        return env_id

    @app.post("/mcp")
    async def mcp_endpoint(request: Request):
        reply = await mcp.handle(await request.body(), app.state)
        return Response(status_code=202) if reply is None else JSONResponse(reply)

    @app.get("/health")
    async def health():
        return {"status": "healthy", "sessions": len(sessions.open), "max_sessions": config.max_sessions,
                "envs": config.envs}

    @app.post("/v1/sessions", status_code=201)
    async def create(body: CreateBody | None = None):
        body = body or CreateBody()
        sid, session = await sessions.create(body.env_id, body.render_mode)
        return surface_json(sid, session)

    @app.post("/v1/sessions/{sid}/reset")
    async def reset(sid: str, body: ResetBody | None = None):
        body, session = body or ResetBody(), sessions.get(sid)
        obs, info = await sessions.call(session, session.env.reset, seed=body.seed, options=body.options)
        session.steps, session.episode_id = 0, secrets.token_hex(8)
        return {"observation": wire.encode(obs), "info": wire.encode(info),
                "instructions": session.env.get_wrapper_attr("instructions")}

    @app.post("/v1/sessions/{sid}/step")
    async def step(sid: str, body: StepBody):
        session = sessions.get(sid)
        obs, reward, terminated, truncated, info = await sessions.call(session, session.env.step, body.action)
        session.stepped(info)
        return {"observation": wire.encode(obs), "reward": float(reward), "terminated": bool(terminated),
                "truncated": bool(truncated), "info": wire.encode(info)}

    @app.post("/v1/sessions/{sid}/call/{method}")
    async def call(sid: str, method: str, body: CallBody | None = None):
        session = sessions.get(sid)
        if method not in CALLS:
            raise ServeError(404, "unknown_method", f"callable env methods: {', '.join(CALLS)}")
        fn = session.env.get_wrapper_attr(method)
        return {"result": wire.encode(await sessions.call(session, fn, *(body.args if body else [])))}

    @app.get("/v1/sessions/{sid}")
    async def state(sid: str):
        session = sessions.get(sid)
        return {"session_id": sid, "env_id": session.env_id, "episode_id": session.episode_id,
                "step_count": session.steps, "idle_s": time.monotonic() - session.last_used}

    @app.delete("/v1/sessions/{sid}", status_code=204)
    async def close(sid: str):
        sessions.get(sid)
        await sessions.close(sid)
        return Response(status_code=204)

    @app.websocket("/ws")
    async def openenv_default(websocket: WebSocket):
        await openenv_session(websocket, config.envs[0])

    @app.websocket("/envs/{env_id:path}/ws")
    async def openenv_named(websocket: WebSocket, env_id: str):
        await openenv_session(websocket, env_id)

    async def openenv_session(websocket: WebSocket, env_id: str):
        """One OpenEnv session per connection; errors are replies, the connection stays open."""
        if not authorized(websocket.headers):
            await websocket.close(code=1008, reason="missing or wrong token")
            return
        await websocket.accept()
        sid = None
        try:
            try:
                sid, session = await sessions.create(env_id)
            except ServeError as error:
                code = "CAPACITY_REACHED" if error.code == "capacity" else "SESSION_ERROR"
                await websocket.send_text(ws_error(code, error.message))
                return
            while True:
                frame = await websocket.receive()
                if frame["type"] == "websocket.disconnect":
                    break
                raw = frame.get("text")
                if raw is None:  # a binary frame: an error reply, the session goes on
                    await websocket.send_text(ws_error("VALIDATION_ERROR", "binary frames are not read: send "
                                                                           "JSON text messages"))
                    continue
                reply = await openenv_reply(sessions, sid, session, raw, config.max_request_bytes)
                if reply is None:  # "close": OpenEnv's client sends it and hangs up, no reply
                    break
                await websocket.send_text(reply)
        except (WebSocketDisconnect, RuntimeError, OSError) as gone:  # the client left mid-reply: one line
            log.info("websocket session %s ended by the client (%s)", sid, type(gone).__name__)
        finally:
            if sid is not None:
                await sessions.close(sid)
            try:
                await websocket.close()
            except (RuntimeError, WebSocketDisconnect, OSError):
                pass  # already closed by the client

    return app


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"code": code, "message": message}})


def ws_error(code: str, message: str) -> str:
    return json.dumps({"type": "error", "data": {"code": code, "message": message}})


def openenv_observation(obs, info, reward, terminated: bool, truncated: bool) -> dict:
    observation = {"text": obs} if isinstance(obs, str) else dict(obs)
    observation.update(info=info, terminated=terminated, truncated=truncated)
    return {"observation": wire.encode(observation), "reward": reward, "done": terminated or truncated}


async def openenv_reply(sessions: Sessions, sid: str, session: Session, raw: str, limit: int) -> str | None:
    """The reply to one OpenEnv message, as JSON text; None for "close"."""
    if len(raw) > limit:  # characters: at most the bytes (uvicorn's ws_max_size caps those)
        return ws_error("VALIDATION_ERROR", f"message over {limit} bytes")
    try:
        message = json.loads(raw)
    except ValueError as error:
        return ws_error("INVALID_JSON", f"Invalid JSON: {error}")
    except RecursionError:
        return ws_error("INVALID_JSON", "Invalid JSON: nested too deeply")
    if not isinstance(message, dict) or not isinstance(message.get("data", {}), dict):
        return ws_error("VALIDATION_ERROR", "a message is an object {\"type\": ..., \"data\": {...}}")
    kind, data = message.get("type"), message.get("data", {})
    if kind == "close":
        return None
    env = session.env
    try:
        if kind == "reset":
            try:  # the session API's own rules for a reset (OpenEnv's episode_id aside)
                body = ResetBody.model_validate({k: data[k] for k in ("seed", "options") if k in data})
            except ValidationError as error:
                return ws_error("VALIDATION_ERROR", "; ".join(f"{'.'.join(map(str, p['loc']))}: {p['msg']}"
                                                              for p in error.errors()))
            episode_id = data.get("episode_id")
            if episode_id is not None and not (isinstance(episode_id, str) and len(episode_id) <= MAX_ID_CHARS):
                return ws_error("VALIDATION_ERROR", f"episode_id must be a string of at most {MAX_ID_CHARS} "
                                                    "characters")
            obs, info = await sessions.call(session, env.reset, seed=body.seed, options=body.options)
            session.steps, session.episode_id = 0, episode_id or secrets.token_hex(8)
            reply = openenv_observation(obs, info, None, False, False)
        elif kind == "step":
            action = data.get("action")
            if not isinstance(action, str):
                return ws_error("VALIDATION_ERROR", f"a step's data is {{\"action\": TEXT}}, got {data!r}")
            obs, reward, terminated, truncated, info = await sessions.call(session, env.step, action)
            session.stepped(info)
            reply = openenv_observation(obs, info, float(reward), bool(terminated), bool(truncated))
        elif kind == "state":
            return json.dumps({"type": "state", "data": {"episode_id": session.episode_id,
                                                         "step_count": session.steps, "env_id": session.env_id}})
        else:
            return ws_error("UNKNOWN_TYPE", f"Unknown message type: {kind}")
    except ServeError as error:
        return ws_error("EXECUTION_ERROR", error.message)
    return json.dumps({"type": "observation", "data": reply})


def serve(config: ServerConfig) -> None:
    """Run the server until interrupted (``ragen serve``). Each env is made once first, so a bad
    argument fails now rather than at a client's first session."""
    for env_id in config.envs:
        try:
            gym.make(env_id, **config.env_kwargs.get(env_id, {})).close()
        except (TypeError, ValueError, gym.error.Error) as error:
            raise ValueError(f"{env_id} {config.env_kwargs.get(env_id, {})}: {error}") from None
    sock = bind(config.host, config.port)  # a taken port is reported before "serving"
    print(f"serving {', '.join(config.envs)} on http://{config.host}:{config.port} (at most {config.max_sessions} "
          f"sessions{', token required' if config.token else ''}); Ctrl-C stops")
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
    """uvicorn's settings for ``config``'s app: message size, keep-alive, and the read deadline."""
    # Keep-alive past uvicorn's 5 s: under load a client's pooled connection can sit idle longer than
    # that between two requests, and a connection closed under it fails the next request.
    settings = {"ws_max_size": config.max_request_bytes, "timeout_keep_alive": 75, "backlog": 4096,
                "log_level": "warning", "http": type("Timed", (TimedH11,), {"read_timeout": config.read_timeout_s})}
    return uvicorn.Config(create_app(config), **{**settings, **overrides})


class TimedH11(H11Protocol):
    """uvicorn's h11 protocol with a read deadline: a request's headers, each piece of its body, and a
    new connection's first bytes must come within ``read_timeout`` seconds, or the connection is closed.
    (uvicorn times only the idle time between requests.) While the app works on a request, no deadline."""

    read_timeout = 30.0
    _deadline = None

    def connection_made(self, transport):
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        self._arm()  # progress moves the deadline
        super().data_received(data)

    def connection_lost(self, exc):
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.read_timeout, self._expire)

    def _expire(self) -> None:
        fresh = self.cycle is None and self.conn.their_state is h11.IDLE
        partial = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])
        if fresh or partial or self.conn.their_state is h11.SEND_BODY:
            log.info("closed a connection from %s: nothing read for %g s", self.client, self.read_timeout)
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
