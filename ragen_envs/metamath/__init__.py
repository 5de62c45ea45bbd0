from ragen_envs.metamath.env import MetaMathQAEnv

__all__ = ["MetaMathQAEnv"]
