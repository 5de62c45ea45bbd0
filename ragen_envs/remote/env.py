"""``RemoteEnv``: a ``gymnasium.Env`` whose environment runs in an env server (``ragen serve``).

    env = gymnasium.make("Ragen/Remote-v0", url="http://127.0.0.1:8000", env_id="Ragen/FrozenLake-v0")

It opens one session on the server and keeps the env contract of ``ragen_envs.base``: the same
``instructions``, ``valid_actions``, ``parse_action``, ``oracle_action`` and ``oracle_reasoning`` (the oracle
only from a server started with ``--oracle``: it hands the answers to whoever asks),
spaces equal to the env's, and for a seed the same episode as the local env. So ``ChatEnv``, the
rollout runner and the trainer take it unchanged (env id ``Ragen/Remote-v0`` with ``env_kwargs``
``{"url": ..., "env_id": ...}``). One difference: ``info`` holds only what the env lets an agent see
(``LLMEnv.agent_info``, the contract's keys and the env's ``agent_info_keys``); the keys for the trainer
(how far the answer is, whether the gold passage was found) stay on the server. The server's errors
come back as ``RemoteEnvError`` with the server's status and code (``session_closed``: the server closed
the session, idle past its timeout); a server that cannot be reached fails at once with a
``ConnectionError``.

Needs the ``server`` extra (``httpx``).
"""

from __future__ import annotations

from typing import Any

from ragen_envs.extras import install_hint
from ragen_envs.remote import wire
from ragen_envs.remote.client import EnvClient


class RemoteEnvError(RuntimeError):
    """An error reply of the env server: ``status`` (HTTP) and ``code`` (e.g. "capacity")."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"env server: {message} ({status} {code})")
        self.status, self.code = status, code


class RemoteEnv(EnvClient):
    """One session of an env server.

    Args:
        url: the server's base URL.
        env_id: which of the server's envs (default: its first).
        token: the server's shared secret, when it has one.
        timeout_s: how long one call may take (a sandboxed program's step can take seconds).
        render_mode: the env's render mode, made on the server.
        client: an ``httpx.Client`` to send through instead (tests pass FastAPI's ``TestClient``).
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", env_id: str | None = None, token: str | None = None,
                 timeout_s: float = 60.0, render_mode: str | None = None, client=None):
        try:
            import httpx
        except ImportError:
            raise ImportError(f"RemoteEnv needs the 'server' extra: {install_hint('server')}") from None
        self._httpx = httpx
        self.url = url.rstrip("/")
        self._owns_client = client is None
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        if client is None:
            client = httpx.Client(base_url=self.url, timeout=httpx.Timeout(timeout_s, connect=5.0))
        self._client = client
        self.session_id: str | None = None
        info = self._post("/v1/sessions", {"env_id": env_id, "render_mode": render_mode})
        self.session_id, self.env_id = info["session_id"], info["env_id"]
        self._take_surface({**info, "observation_space": wire.space_from_json(info["observation_space"]),
                            "action_space": wire.space_from_json(info["action_space"]),
                            "metadata": wire.decode(info["metadata"])})

    # -- the Gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        reply = self._post(self._path("reset"), {"seed": seed, "options": wire.encode(options)})
        self.instructions = reply["instructions"]  # an env may word them per episode
        return wire.decode(reply["observation"]), wire.decode(reply["info"])

    def step(self, action):
        reply = self._post(self._path("step"), {"action": wire.encode(action)})
        return (wire.decode(reply["observation"]), reply["reward"], reply["terminated"], reply["truncated"],
                wire.decode(reply["info"]))

    def close(self):
        if self.session_id is not None:
            try:
                self._request("DELETE", f"/v1/sessions/{self.session_id}")
            except (RemoteEnvError, ConnectionError):
                pass  # already gone (idle timeout) or the server is down: nothing left to free
            self.session_id = None
        if self._owns_client:
            self._client.close()
        super().close()

    # -- the wire ------------------------------------------------------------------------------------
    def _path(self, what: str) -> str:
        if self.session_id is None:
            raise RuntimeError("this RemoteEnv is closed")
        return f"/v1/sessions/{self.session_id}/{what}"

    def _call(self, method: str, *args):
        return wire.decode(self._post(self._path(f"call/{method}"), {"args": wire.encode(list(args))})["result"])

    def _post(self, path: str, body: dict) -> dict:
        return self._request("POST", path, body)

    def _request(self, method: str, path: str, body: dict | None = None):
        try:
            response = self._client.request(method, path, json=body, headers=self._headers)
        except self._httpx.TransportError as error:
            raise ConnectionError(f"cannot reach the env server at {self.url} ({type(error).__name__}: {error}); "
                                  f"start one with `ragen serve --env ENV_ID`") from None
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                code, message = error["code"], error["message"]
            except (ValueError, KeyError, TypeError):
                code, message = "error", response.text[:500]
            raise RemoteEnvError(response.status_code, code, message)
        return response.json() if response.content else None
