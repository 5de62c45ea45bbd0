"""The session layer the server's three protocols share (the REST session API, OpenEnv's WebSocket, MCP):
each session its own env (``gymnasium.make``), the served envs checked once, the limits (``max_sessions``,
the idle timeout), a bounded thread pool per env, one call at a time per session, and the episode's
bookkeeping (step count, episode id) kept by ``reset`` and ``step`` for every protocol alike.

Every protocol goes through here for what it must not decide alone: which envs are alive (``count``: the
cap and ``/health`` read it; a closed session's env takes no call again, whoever still holds it), what a
reset's arguments may be (``reset_arguments``), and what of ``info`` a client sees (``agent_info``)."""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import gymnasium as gym
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragen_envs.base import INFO_KEYS
from ragen_envs.remote.server.config import ServerConfig
from ragen_envs.remote.server.describe import env_metadata


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
        self.closed: str | None = None  # why it was closed (its env takes no more calls); None: open


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

    def count(self) -> int:
        """Envs alive: the sessions held (a closing one until its env is closed) and those being built.
        The one count the session cap and ``/health`` go by."""
        return len(self.open) + self.reserved

    async def run(self, fn, *args, env_id: str | None = None, **kwargs):
        """``fn(*args, **kwargs)`` on a worker thread of ``env_id``'s pool (None: the server's)."""
        pool = self.server_pool if env_id is None else self.pools[env_id]
        return await asyncio.get_running_loop().run_in_executor(pool, partial(fn, *args, **kwargs))

    def shutdown(self) -> None:
        for pool in [*self.pools.values(), self.server_pool]:
            pool.shutdown(wait=False, cancel_futures=True)

    def served(self, env_id: str) -> str:
        """``env_id`` if this server serves it; else 404 ``unknown_env``."""
        if env_id not in self.config.envs:
            raise ServeError(404, "unknown_env", f"this server serves {', '.join(self.config.envs)}, not {env_id!r}")
        return env_id

    def metadata(self) -> dict[str, dict]:
        """Each served env's description (built once per env, then cached); a slow call: ``run`` it."""
        return {env_id: env_metadata(env_id, json.dumps(self.config.env_kwargs.get(env_id, {}), sort_keys=True))
                for env_id in self.config.envs}

    async def create(self, env_id: str | None, render_mode: str | None = None) -> tuple[str, Session]:
        env_id = self.served(self.config.envs[0] if env_id is None else env_id)  # "" is no env: refused
        if self.count() >= self.config.max_sessions:
            await self.close_idle()
        if self.count() >= self.config.max_sessions:
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
        if session is None or session.closed:
            raise ServeError(404, "unknown_session", f"no session {sid!r} (closed, timed out after "
                                                     f"{self.config.idle_timeout_s:g} s idle, or never opened)")
        return session

    @staticmethod
    def ensure_open(session: Session) -> Session:
        """``session``, unless it was closed: then 410 ``session_closed`` (a WebSocket holds its session
        past the idle reaper; its env must not be played again)."""
        if session.closed:
            raise ServeError(410, "session_closed", f"this session was closed ({session.closed}) and its env "
                                                    "with it; open a new session")
        return session

    async def call(self, session: Session, fn, *args, **kwargs):
        """Run an env call on the pool, one at a time per session; env errors become 4xx."""
        async with session.lock:
            self.ensure_open(session)  # it may have been closed while this call waited
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

    async def reset(self, session: Session, seed: int | None = None, options: dict | None = None,
                    episode_id: str | None = None) -> tuple[Any, dict]:
        """The session's env reset: a new episode (its id ``episode_id``, or a fresh one), no steps yet."""
        obs, info = await self.call(session, session.env.reset, seed=seed, options=options)
        session.steps, session.episode_id = 0, episode_id or secrets.token_hex(8)
        return obs, agent_info(session.env, info)

    async def step(self, session: Session, action) -> tuple[Any, float, bool, bool, dict]:
        """One step of the session's env, counted (a step past the episode's end is none)."""
        obs, reward, terminated, truncated, info = await self.call(session, session.env.step, action)
        session.steps += not info.get("episode_over", False)
        return obs, float(reward), bool(terminated), bool(truncated), agent_info(session.env, info)

    async def close(self, sid: str, reason: str = "closed by its client") -> None:
        """Close a session and its env. From now on no call starts on it (a protocol that still holds it,
        as a WebSocket does, gets ``session_closed``); it counts as alive until its env is closed."""
        session = self.open.get(sid)
        if session is None or session.closed:
            return
        session.closed = reason
        try:
            async with session.lock:  # a call in flight finishes first
                await self.run(session.env.close, env_id=session.env_id)
        finally:
            del self.open[sid]

    async def close_idle(self) -> int:
        limit = time.monotonic() - self.config.idle_timeout_s
        idle = [sid for sid, s in self.open.items() if s.last_used < limit and not s.lock.locked() and not s.closed]
        self.closed_idle += len(idle)  # counted before the awaits, so a session gone is a session counted
        for sid in idle:
            await self.close(sid, f"unused for {self.config.idle_timeout_s:g} s")
        return len(idle)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


MAX_SEED = 2**64 - 1  # numpy's seeds are unbounded; the wire's are not (a 10**6-digit int costs to read)


class ResetBody(Strict):
    """A reset's arguments, by the same rules in every protocol."""
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED, strict=True)
    options: dict[str, Any] | None = None


def reset_arguments(data: dict) -> ResetBody:
    """``data`` (a protocol's reset arguments: seed, options) checked by ``ResetBody``'s rules, which the
    REST route applies itself; a 422 ``invalid_request`` naming each wrong field otherwise."""
    try:
        return ResetBody.model_validate(data)
    except ValidationError as error:
        where = "; ".join(f"{'.'.join(map(str, p['loc'])) or 'body'}: {p['msg']}" for p in error.errors())
        raise ServeError(422, "invalid_request", where) from None


def agent_info(env: gym.Env, info: dict) -> dict:
    """What of a reset's or step's ``info`` goes to a client: the env's ``agent_info`` (never how far the
    answer is, or whether the gold passage was found); only ``INFO_KEYS`` for an env without one."""
    shown = getattr(env.unwrapped, "agent_info", None)
    return shown(info) if shown is not None else {k: v for k, v in info.items() if k in INFO_KEYS}


def authorized(config: ServerConfig, headers) -> bool:
    """Whether a request's headers carry the server's token (always, when it has none)."""
    if not config.token:
        return True
    given = headers.get("authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {config.token}".encode())
