"""OpenEnv's WebSocket protocol (``openenv-core``'s ``EnvClient``): ``/ws`` for the first served env and
``/envs/{env_id}/ws`` for each, one session per connection. Messages ``{"type": "reset" | "step" | "state"
| "close", "data": {...}}``, a step's data ``{"action": "..."}``, replies ``{"type": "observation", "data":
{"observation": {...}, "reward": r, "done": d}}``. Errors are ``{"type": "error"}`` replies and the
connection stays open, but for ``SESSION_CLOSED``: the server closed the session (idle past its timeout, or
stopping, or nothing sent for ``idle_timeout_s``), and the connection ends after that reply."""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from ragen_envs.remote import wire
from ragen_envs.remote.server.sessions import MAX_ID_CHARS, ServeError, Session, Sessions, authorized, \
    reset_arguments

log = logging.getLogger("ragen_envs.serve")


def routes(sessions: Sessions) -> APIRouter:
    router = APIRouter()

    @router.websocket("/ws")
    async def openenv_default(websocket: WebSocket):
        await play(sessions, websocket, sessions.config.envs[0])

    @router.websocket("/envs/{env_id:path}/ws")
    async def openenv_named(websocket: WebSocket, env_id: str):
        await play(sessions, websocket, env_id)

    return router


async def play(sessions: Sessions, websocket: WebSocket, env_id: str) -> None:
    """One OpenEnv session for the connection's life."""
    if not authorized(sessions.config, websocket.headers):
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
            try:  # a connection that sends nothing holds a connection slot: it ends with its idle session
                frame = await asyncio.wait_for(websocket.receive(), timeout=sessions.config.idle_timeout_s)
            except asyncio.TimeoutError:
                idle = sessions.config.idle_timeout_s
                await websocket.send_text(ws_error("SESSION_CLOSED", f"no message for {idle:g} s (the idle timeout)"))
                break
            if frame["type"] == "websocket.disconnect":
                break
            raw = frame.get("text")
            if raw is None:  # a binary frame: an error reply, the session goes on
                await websocket.send_text(ws_error("VALIDATION_ERROR", "binary frames are not read: send "
                                                                       "JSON text messages"))
                continue
            reply = await openenv_reply(sessions, session, raw, sessions.config.max_request_bytes)
            if reply is None:  # "close": OpenEnv's client sends it and hangs up, no reply
                break
            await websocket.send_text(reply)
            if session.closed:  # reaped: this connection's one session is gone, and so is the connection
                break
    except (WebSocketDisconnect, RuntimeError, OSError) as gone:  # the client left mid-reply: one line
        log.info("websocket session %s ended by the client (%s)", sid, type(gone).__name__)
    finally:
        if sid is not None:
            await sessions.close(sid)
        try:
            await websocket.close()
        except (RuntimeError, WebSocketDisconnect, OSError):
            pass  # already closed by the client


def ws_error(code: str, message: str) -> str:
    return json.dumps({"type": "error", "data": {"code": code, "message": message}})


def openenv_observation(obs, info, reward, terminated: bool, truncated: bool) -> dict:
    observation = {"text": obs} if isinstance(obs, str) else dict(obs)
    observation.update(info=info, terminated=terminated, truncated=truncated)
    return {"observation": wire.encode(observation), "reward": reward, "done": terminated or truncated}


async def openenv_reply(sessions: Sessions, session: Session, raw: str, limit: int) -> str | None:
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
    try:
        if kind == "reset":
            try:  # the session API's own rules for a reset (OpenEnv's episode_id aside)
                body = reset_arguments({k: data[k] for k in ("seed", "options") if k in data})
            except ServeError as error:
                return ws_error("VALIDATION_ERROR", error.message)
            episode_id = data.get("episode_id")
            if episode_id is not None and not (isinstance(episode_id, str) and len(episode_id) <= MAX_ID_CHARS):
                return ws_error("VALIDATION_ERROR", f"episode_id must be a string of at most {MAX_ID_CHARS} "
                                                    "characters")
            obs, info = await sessions.reset(session, body.seed, body.options, episode_id)
            reply = openenv_observation(obs, info, None, False, False)
        elif kind == "step":
            action = data.get("action")
            if not isinstance(action, str):
                return ws_error("VALIDATION_ERROR", f"a step's data is {{\"action\": TEXT}}, got {data!r}")
            obs, reward, terminated, truncated, info = await sessions.step(session, action)
            reply = openenv_observation(obs, info, reward, terminated, truncated)
        elif kind == "state":
            sessions.ensure_open(session)
            return json.dumps({"type": "state", "data": {"episode_id": session.episode_id,
                                                         "step_count": session.steps, "env_id": session.env_id}})
        else:
            return ws_error("UNKNOWN_TYPE", f"Unknown message type: {kind}")
    except ServeError as error:
        return ws_error("SESSION_CLOSED" if error.code == "session_closed" else "EXECUTION_ERROR", error.message)
    return json.dumps({"type": "observation", "data": reply})
