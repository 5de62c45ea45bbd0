from ragen_envs.frozenlake.env import FrozenLakeEnv

__all__ = ["FrozenLakeEnv"]
