from ragen_envs.countdown.env import CountdownEnv

__all__ = ["CountdownEnv"]
