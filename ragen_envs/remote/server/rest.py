"""The REST routes: the session API ``RemoteEnv`` speaks, the health check, and OpenEnv's descriptions
(``/metadata``, ``/schema``, one env's under ``/envs/{env_id}/``). Bodies are JSON, values in
``ragen_envs.remote.wire``'s form; the routes are listed in ``app.py``'s docstring."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import Field, StrictStr

from ragen_envs.remote import wire
from ragen_envs.remote.client import CALLS, surface
from ragen_envs.remote.server.describe import env_schema, server_metadata, server_schema
from ragen_envs.remote.server.sessions import ResetBody, ServeError, Session, Sessions, Strict


class CreateBody(Strict):
    env_id: StrictStr | None = None
    render_mode: StrictStr | None = None


class StepBody(Strict):
    action: Any  # a string; anything else is an invalid action, as for a local env


class CallBody(Strict):
    args: list[Any] = Field(default_factory=list)


ORACLE_CALLS = ("oracle_action", "oracle_reasoning")  # the answers: only with ServerConfig.oracle
# The arguments of each callable env method, by type: a wrong one is the client's mistake (422), not the env's.
CALL_ARGS = {"parse_action": (str,), "oracle_action": (), "oracle_reasoning": (), "render": ()}


def check_call_args(method: str, args: list) -> None:
    """A 422 ``invalid_request`` unless ``args`` are what ``method`` takes (``CALL_ARGS``)."""
    types = CALL_ARGS[method]
    if len(args) != len(types) or not all(isinstance(a, t) for a, t in zip(args, types)):
        wanted = ", ".join(t.__name__ for t in types) or "no arguments"
        given = ", ".join(type(a).__name__ for a in args) or "none"
        raise ServeError(422, "invalid_request", f"args: {method} takes ({wanted}), got ({given})")


def surface_json(sid: str, session: Session) -> dict:
    """The env's ``surface`` as JSON, with the session's ids: what ``RemoteEnv`` reads on creation."""
    shown = surface(session.env)
    return {**shown, "session_id": sid, "env_id": session.env_id,
            "observation_space": wire.space_to_json(shown["observation_space"]),
            "action_space": wire.space_to_json(shown["action_space"]), "metadata": wire.encode(shown["metadata"])}


def routes(sessions: Sessions) -> APIRouter:
    router = APIRouter()
    config = sessions.config

    @router.get("/health")
    async def health():
        return {"status": "healthy", "sessions": sessions.count(), "max_sessions": config.max_sessions,
                "envs": config.envs}

    @router.get("/metadata")
    async def server_meta():
        return server_metadata(await sessions.run(sessions.metadata))

    @router.get("/schema")
    async def server_schemas():
        return server_schema(await sessions.run(sessions.metadata))

    @router.get("/envs/{env_id:path}/metadata")
    async def one_meta(env_id: str):
        return (await sessions.run(sessions.metadata))[sessions.served(env_id)]

    @router.get("/envs/{env_id:path}/schema")
    async def one_schema(env_id: str):
        return env_schema((await sessions.run(sessions.metadata))[sessions.served(env_id)])

    @router.post("/v1/sessions", status_code=201)
    async def create(body: CreateBody | None = None):
        body = body or CreateBody()
        sid, session = await sessions.create(body.env_id, body.render_mode)
        return surface_json(sid, session)

    @router.post("/v1/sessions/{sid}/reset")
    async def reset(sid: str, body: ResetBody | None = None):
        body, session = body or ResetBody(), sessions.get(sid)
        obs, info = await sessions.reset(session, body.seed, body.options)
        return {"observation": wire.encode(obs), "info": wire.encode(info),
                "instructions": session.env.get_wrapper_attr("instructions")}

    @router.post("/v1/sessions/{sid}/step")
    async def step(sid: str, body: StepBody):
        obs, reward, terminated, truncated, info = await sessions.step(sessions.get(sid), body.action)
        return {"observation": wire.encode(obs), "reward": reward, "terminated": terminated,
                "truncated": truncated, "info": wire.encode(info)}

    @router.post("/v1/sessions/{sid}/call/{method}")
    async def call(sid: str, method: str, body: CallBody | None = None):
        session = sessions.get(sid)
        if method not in CALLS:
            raise ServeError(404, "unknown_method", f"callable env methods: {', '.join(CALLS)}")
        if method in ORACLE_CALLS and not config.oracle:
            raise ServeError(403, "oracle_disabled", f"{method}: this server does not hand out its envs' oracle "
                             "(a client that reached it would read the answers); start it with --oracle where "
                             "every client is trusted")
        args = body.args if body else []
        check_call_args(method, args)
        fn = session.env.get_wrapper_attr(method)
        return {"result": wire.encode(await sessions.call(session, fn, *args))}

    @router.get("/v1/sessions/{sid}")
    async def state(sid: str):
        session = sessions.get(sid)
        return {"session_id": sid, "env_id": session.env_id, "episode_id": session.episode_id,
                "step_count": session.steps, "idle_s": time.monotonic() - session.last_used}

    @router.delete("/v1/sessions/{sid}", status_code=204)
    async def close(sid: str):
        sessions.get(sid)
        await sessions.close(sid)
        return Response(status_code=204)

    return router
