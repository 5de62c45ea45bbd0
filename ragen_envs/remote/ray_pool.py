"""``RayEnv``: envs hosted by a pool of Ray actors, on this machine or across a Ray cluster.

    env = gymnasium.make("Ragen/Ray-v0", env_id="Ragen/DeepCoder-v0", workers=8)

Each ``RayEnv`` is one session on one of ``workers`` named actors (``{pool}-0`` .. ``{pool}-{n-1}``,
created on first use and shared by every client in the Ray namespace ``ragen_envs``); a new session
goes to the actor holding the fewest. Ray places the actors on the cluster's nodes, restarts none
and moves no state: a lost actor's sessions fail with a clear error. The client keeps the env
contract as ``RemoteEnv`` does (``instructions``, ``valid_actions``, ``parse_action``, the oracle,
the spaces), so ``ChatEnv``, the runner and the trainer take it unchanged: env id ``Ragen/Ray-v0``
with ``env_kwargs`` ``{"env_id": ..., "workers": ...}``. With no Ray running, the first ``RayEnv``
starts a local instance (``ray.init``); ``address`` joins an existing cluster.

Needs the ``ray`` extra.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

from ragen_envs.base import check_positive_int
from ragen_envs.extras import install_hint
from ragen_envs.remote.client import CALLS, EnvClient, surface

try:
    import ray
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ImportError(f"RayEnv needs the 'ray' extra: {install_hint('ray')}") from None

NAMESPACE = "ragen_envs"


@ray.remote
class EnvWorker:
    """Hosts many env sessions; every call names its session."""

    def __init__(self):
        import ragen_envs  # noqa: F401  (registers the envs in this worker process)

        self.envs: dict[int, gym.Env] = {}
        self.next_id = 0

    def sessions(self) -> int:
        return len(self.envs)

    def open(self, env_id: str, kwargs: dict) -> tuple[int, dict]:
        env = gym.make(env_id, **kwargs)
        self.next_id += 1
        self.envs[self.next_id] = env
        return self.next_id, surface(env)

    def reset(self, sid: int, seed, options):
        env = self._env(sid)
        obs, info = env.reset(seed=seed, options=options)
        return obs, info, env.get_wrapper_attr("instructions")

    def step(self, sid: int, action):
        return self._env(sid).step(action)

    def call(self, sid: int, method: str, args: list):
        if method not in CALLS:
            raise ValueError(f"callable env methods: {', '.join(CALLS)}")
        return self._env(sid).get_wrapper_attr(method)(*args)

    def close(self, sid: int) -> None:
        env = self.envs.pop(sid, None)
        if env is not None:
            env.close()

    def _env(self, sid: int) -> gym.Env:
        if sid not in self.envs:
            raise KeyError(f"no session {sid} on this worker (closed, or the worker restarted)")
        return self.envs[sid]


def pool_actors(n: int, pool: str = "ragen-envs", cpus: float = 1.0) -> list:
    """The pool's ``n`` named actors, created where missing (Ray keeps each alive while a handle made
    by this job's ``pool_actors`` is held: every ``RayEnv`` holds all of its pool's)."""
    return [EnvWorker.options(name=f"{pool}-{k}", namespace=NAMESPACE, get_if_exists=True, num_cpus=cpus).remote()
            for k in range(n)]


class RayEnv(EnvClient):
    """One session of ``env_id`` on the least-loaded actor of the pool (see the module docstring).

    Args:
        env_id: the env to host.
        workers: actors in the pool (sessions spread over them; each steps its envs one call at a time).
        pool: the pool's name; clients naming the same pool share its actors.
        address: a Ray cluster to join (default: the running one, or a new local instance).
        worker_cpus: CPUs Ray reserves for each actor (so it spreads them over the cluster's nodes).
        render_mode, env_kwargs: passed to ``gymnasium.make`` on the actor.
    """

    def __init__(self, env_id: str, workers: int = 4, pool: str = "ragen-envs", address: str | None = None,
                 worker_cpus: float = 1.0, render_mode: str | None = None, **env_kwargs):
        check_positive_int("workers", workers)
        if not ray.is_initialized():
            ray.init(address=address, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
        for attempt in range(2):
            actors = pool_actors(workers, pool, worker_cpus)
            try:
                loads = ray.get([actor.sessions.remote() for actor in actors])
                break
            except ray.exceptions.ActorDiedError:
                if attempt:
                    raise
                time.sleep(0.5)  # an actor whose last client had just gone was found dying: look again
        # every actor of the pool, not only this session's: Ray ends an actor once no handle is left, and the
        # next client should find the pool whole
        self._pool, self._actor = actors, actors[loads.index(min(loads))]
        kwargs = dict(env_kwargs, **({"render_mode": render_mode} if render_mode else {}))
        self.session_id, surface = self._get(self._actor.open.remote(env_id, kwargs))
        self.env_id = env_id
        self._take_surface(surface)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, info, self.instructions = self._get(self._actor.reset.remote(self.session_id, seed, options))
        return obs, info

    def step(self, action):
        return self._get(self._actor.step.remote(self.session_id, action))

    def close(self):
        if self.session_id is not None:
            try:
                self._get(self._actor.close.remote(self.session_id))
            except (ray.exceptions.RayError, KeyError):
                pass  # the actor is gone: nothing left to free
            self.session_id = None
        super().close()

    def _call(self, method: str, *args):
        return self._get(self._actor.call.remote(self.session_id, method, list(args)))

    @staticmethod
    def _get(ref):
        """The result, or the env's own exception (not Ray's wrapper), so errors read as local ones."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as error:
            raise error.as_instanceof_cause() from None
