"""The env server: ``ragen serve`` (``app.py``, FastAPI + uvicorn, the ``server`` extra) and its settings
(``config.py``). The client is ``ragen_envs.remote.RemoteEnv``."""

from ragen_envs.remote.server.config import ServerConfig

__all__ = ["ServerConfig"]
