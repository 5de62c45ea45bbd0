from ragen_envs.bandit.env import BanditEnv

__all__ = ["BanditEnv"]
