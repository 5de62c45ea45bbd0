"""Running envs somewhere else: the env server (``server/``: ``ragen serve``, OpenEnv's protocol), its
client ``RemoteEnv`` (``env.py``, ``Ragen/Remote-v0``), envs on a pool of Ray actors (``ray_pool.py``,
``Ragen/Ray-v0``), the client base they share (``client.py``) and how values cross the wire
(``wire.py``). Each keeps the env contract of ``ragen_envs.base``, so the agent and the trainers take
a remote env like a local one."""

from ragen_envs.remote.client import EnvClient
from ragen_envs.remote.env import RemoteEnv, RemoteEnvError

__all__ = ["EnvClient", "RemoteEnv", "RemoteEnvError"]
