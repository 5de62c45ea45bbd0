from ragen_envs.searchqa.env import SearchQAEnv

__all__ = ["SearchQAEnv"]
