"""``POST /mcp``: the served envs as MCP tools (JSON-RPC 2.0), so a tool-calling agent can play them.

Methods: ``initialize``, ``ping``, ``tools/list``, ``tools/call``; notifications get no reply. Tools:
``list_envs``; ``reset`` (opens a session unless given one, returns its id and the first observation);
``step``; ``state``; ``close``. Sessions are the server's own (the limits, idle timeout and worker pools
of the REST and WebSocket sessions). A tool that fails returns ``isError`` with the reason, as MCP asks;
a malformed request gets a JSON-RPC error.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ragen_envs import __version__
from ragen_envs.base import observation_text
from ragen_envs.remote import wire
from ragen_envs.remote.server.sessions import MAX_SEED, ServeError, Sessions, reset_arguments

PROTOCOL = "2025-06-18"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602

SESSION = {"type": "string", "description": "the id reset returned"}
TOOLS = [
    {"name": "list_envs", "description": "The envs this server serves: instructions and action grammar of each.",
     "inputSchema": {"type": "object", "properties": {}}},
    {"name": "reset", "description": "Start an episode: a new session (or session_id's again) from the env's "
                                     "initial state for seed. Returns session_id, the observation, instructions.",
     "inputSchema": {"type": "object", "properties": {
         "env_id": {"type": "string", "description": "a served env (default: the first)"},
         "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED, "description": "the initial state's seed"},
         "session_id": SESSION}}},
    {"name": "step", "description": "Play one action. Returns the observation, reward, terminated, truncated, info.",
     "inputSchema": {"type": "object", "properties": {"session_id": SESSION, "action": {"type": "string"}},
                     "required": ["session_id", "action"]}},
    {"name": "state", "description": "The session's env, episode id and step count.",
     "inputSchema": {"type": "object", "properties": {"session_id": SESSION}, "required": ["session_id"]}},
    {"name": "close", "description": "Close the session and its env.",
     "inputSchema": {"type": "object", "properties": {"session_id": SESSION}, "required": ["session_id"]}},
]


def routes(sessions: Sessions) -> APIRouter:
    router = APIRouter()

    @router.post("/mcp")
    async def mcp_endpoint(request: Request):
        reply = await handle(await request.body(), sessions)
        return Response(status_code=202) if reply is None else JSONResponse(reply)

    return router


class ToolError(Exception):
    """A tool call that failed: its result says why (``isError``)."""


def error(code: int, message: str, request_id=None) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


async def handle(raw: bytes, sessions: Sessions) -> dict | None:
    """The JSON-RPC reply to one request body (None for a notification)."""
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):
        return error(PARSE_ERROR, "Parse error: the body is not JSON")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        request_id = message.get("id") if isinstance(message, dict) else None
        return error(INVALID_REQUEST, 'Invalid Request: {"jsonrpc": "2.0", "method": ..., "id": ...} expected',
                     request_id if isinstance(request_id, (str, int)) else None)
    method, params, request_id = message["method"], message.get("params") or {}, message.get("id")
    if "id" not in message:  # a notification (notifications/initialized, ...): no reply
        return None
    if not isinstance(params, dict):
        return error(INVALID_PARAMS, "params must be an object", request_id)
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion") or PROTOCOL,
                  "capabilities": {"tools": {"listChanged": False}},
                  "serverInfo": {"name": "ragen-envs", "version": __version__},
                  "instructions": "Call reset to start an episode, then step with its session_id until terminated "
                                  "or truncated; list_envs shows each env's instructions and actions."}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name not in {t["name"] for t in TOOLS}:
            return error(INVALID_PARAMS, f"unknown tool {name!r}; tools: {', '.join(t['name'] for t in TOOLS)}",
                         request_id)
        if not isinstance(arguments, dict):
            return error(INVALID_PARAMS, "arguments must be an object", request_id)
        try:
            data = await call(name, arguments, sessions)
            text = data.pop("text", None)
            result = {"content": [{"type": "text", "text": text if text is not None else json.dumps(data)}],
                      "structuredContent": data, "isError": False}
        except ToolError as failure:
            result = {"content": [{"type": "text", "text": str(failure)}], "isError": True}
    else:
        return error(METHOD_NOT_FOUND, f"Method not found: {method}", request_id)
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _string(arguments: dict, key: str, required: bool = True) -> str | None:
    value = arguments.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ToolError(f"{key} must be a string, got {value!r}")
    return value


async def call(name: str, arguments: dict, sessions: Sessions) -> dict:
    """Run tool ``name``; its structured result ("text": what the model reads, when not the JSON)."""
    try:
        if name == "list_envs":
            envs = {env_id: {k: meta[k] for k in ("description", "instructions", "action_grammar", "max_steps")}
                    for env_id, meta in (await sessions.run(sessions.metadata)).items()}
            return {"envs": envs}
        sid = _string(arguments, "session_id", required=name != "reset")
        if name == "reset":
            seed = reset_arguments({"seed": arguments.get("seed")}).seed  # the REST route's rules
            if sid is None:
                sid, session = await sessions.create(_string(arguments, "env_id", required=False))
            else:
                session = sessions.get(sid)
            obs, info = await sessions.reset(session, seed)
            instructions = session.env.get_wrapper_attr("instructions")
            return {"session_id": sid, "env_id": session.env_id, "observation": wire.encode(obs),
                    "info": wire.encode(info), "instructions": instructions,
                    "text": f"session_id: {sid}\n\n{instructions}\n\n{observation_text(obs)}"}
        session = sessions.get(sid)
        if name == "step":
            action = _string(arguments, "action")
            obs, reward, terminated, truncated, info = await sessions.step(session, action)
            ended = " (the episode is over)" if terminated or truncated else ""
            return {"observation": wire.encode(obs), "reward": reward, "terminated": terminated,
                    "truncated": truncated, "info": wire.encode(info),
                    "text": f"reward {reward:g}{ended}\n\n{observation_text(obs)}"}
        if name == "state":
            return {"episode_id": session.episode_id, "step_count": session.steps, "env_id": session.env_id}
        await sessions.close(sid)
        return {"closed": sid}
    except ServeError as failure:
        raise ToolError(failure.message) from None
